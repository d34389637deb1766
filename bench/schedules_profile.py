"""The schedule evaluator's thread inside a node: which thread it is, and a py-spy
profile of it over one firing.

Python 3.11 does not give its threads native names (every thread's ``comm`` is the
interpreter's), so the evaluator's thread id is taken from ``py-spy dump --json``,
which reads the Python thread names; a ``comm`` equal to the name is used first, for
interpreters that do set it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, ROOT, log

#: The evaluator loop's thread name (jobserver.schedules.evaluator.ScheduleEvaluator).
EVALUATOR = "schedules"
PY_SPY = Path(sys.executable).parent / "py-spy"
PROFILE_DIR = RESULTS_DIR / "profiles"
#: The frames of every sample of the thread, left out of the printed lists.
LOOP = ("Loop._main ", "ScheduleEvaluator.run ")


def evaluator_thread(pid: int, name: str = EVALUATOR,
                     timeout: float = 90.0) -> tuple[int | None, str]:
    """The native id of ``pid``'s thread named ``name``, and how it was found; looked
    for until ``timeout`` (a node starts its loops after it registers)."""
    deadline = time.monotonic() + timeout
    while True:
        tid, how = _find_thread(pid, name)
        if tid is not None or time.monotonic() > deadline or not how.startswith("wait"):
            return tid, how.removeprefix("wait: ")
        time.sleep(1.0)


def _find_thread(pid: int, name: str) -> tuple[int | None, str]:
    for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
        try:
            if (task / "comm").read_text().strip() == name:
                return int(task.name), "comm"
        except OSError:
            continue
    if not PY_SPY.exists():
        return None, "not found: threads have no native names and py-spy is not installed"
    proc = subprocess.run([str(PY_SPY), "dump", "--pid", str(pid), "--json", "--nonblocking"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None, f"not found: py-spy dump failed: {proc.stderr.strip()[-300:]}"
    for thread in json.loads(proc.stdout):
        if thread.get("thread_name") == name and thread.get("os_thread_id"):
            return int(thread["os_thread_id"]), "py-spy dump"
    return None, f"wait: not found: no thread named {name!r}"


def _sleep_until(wall: float) -> None:
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 1.0))


def profile_firing(pid: int, fire_time: float, label: str, finished: Callable[[], bool],
                   cap: float) -> dict[str, Any]:
    """``py-spy record`` of the node from 2 s before ``fire_time`` until ``finished()``
    (checked each second from the fire time on) or ``cap`` seconds, twice at once:
    on-CPU samples (``cpu``) and every sample, waiting included (``wall``). Returns
    each flavour's summary of the evaluator's thread."""
    if not PY_SPY.exists():
        return {"error": "py-spy is not installed (pip install -e '.[bench]')"}
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    _sleep_until(fire_time - 2)
    started = time.time()
    running = {}
    for flavour, flags in (("cpu", []), ("wall", ["--idle"])):
        out = PROFILE_DIR / f"schedules-{label}-{flavour}.txt"
        argv = [str(PY_SPY), "record", "-p", str(pid), "-d", str(int(cap)), "-r", "100",
                "-f", "raw", "--threads", "--nonblocking", "-o", str(out)] + flags
        running[flavour] = (subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True), out, argv)
    _sleep_until(fire_time + 1)
    while time.time() - started < cap and not finished():
        time.sleep(1.0)
    for proc, _, _ in running.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # py-spy writes what it has, then exits
    results: dict[str, Any] = {"seconds": round(time.time() - started, 1)}
    for flavour, (proc, out, argv) in running.items():
        _, err = proc.communicate(timeout=60)
        if not out.exists():
            results[flavour] = {"error": err[-500:]}
            continue
        results[flavour] = summarise_thread(out, EVALUATOR)
        results[flavour]["file"] = str(out.relative_to(ROOT) if out.is_relative_to(ROOT)
                                       else out)
        results[flavour]["command"] = " ".join(argv)
        log(f"py-spy {flavour}: {results[flavour]['thread_samples']} samples of the "
            f"evaluator -> {out.name}")
    return results


def summarise_thread(path: Path, thread: str, top: int = 25) -> dict[str, Any]:
    """Shares of one thread's samples in a ``py-spy record -f raw --threads`` file:
    inclusive by function and by line (our code only), and by innermost frame."""
    from bench.profile import INCLUSIVE

    total = mine = 0
    by_function: Counter[str] = Counter()
    by_line: Counter[str] = Counter()
    innermost: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        if not frames[0].endswith(f": {thread}"):
            continue
        mine += n
        innermost[_short(frames[-1])] += n
        for label, needle in INCLUSIVE:
            if any(needle in frame for frame in frames):
                inclusive[label] += n
        ours = {_short(f) for f in frames[1:] if re.search(r"\((\S*/)?jobserver/", f)}
        for frame in ours:
            by_line[frame] += n
        for frame in {re.sub(r":\d+\)$", ")", f) for f in ours}:
            by_function[frame] += n

    def shares(counter: Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": frame, "pct": round(100.0 * n / mine, 1)}
                for frame, n in counter.most_common(top)] if mine else []

    return {"thread_samples": mine, "all_samples": total,
            "thread_share_pct": round(100.0 * mine / total, 1) if total else None,
            "inclusive_pct": {label: round(100.0 * inclusive[label] / mine, 1) if mine else 0.0
                              for label, _ in INCLUSIVE},
            "functions": shares(by_function), "lines": shares(by_line),
            "innermost": shares(innermost)}


def _short(frame: str) -> str:
    """``function (path/to/file.py:12)`` -> ``function (file.py:12)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1]}" if where else name


def print_profile(results: dict[str, Any], lines: int = 15) -> None:
    for flavour, summary in results.items():
        if flavour == "seconds":
            continue
        if not isinstance(summary, dict) or "functions" not in summary:
            print(f"py-spy {flavour}: {summary}")
            continue
        print(f"py-spy {flavour}: evaluator thread, {summary['thread_samples']} samples "
              f"({summary['thread_share_pct']} % of the process's); inclusive %")
        for title, key in (("by function", "functions"), ("by line", "lines")):
            print(f"  {title}:")
            shown = [item for item in summary[key] if not item["frame"].startswith(LOOP)]
            for item in shown[:lines]:
                print(f"  {item['frame'][:70]:70s} {item['pct']:5.1f}")
