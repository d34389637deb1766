"""Shared pieces of the benchmark: options, statistics, results, process readings.

The store side (databases, bulk queueing, reading outcomes) is in
:mod:`bench.stores`; node processes and the HTTP client in :mod:`bench.cluster`.
Nothing here changes a setting that weakens durability.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(os.environ.get("BENCH_RESULTS", ROOT / "bench" / "results"))
PYTHON = sys.executable
TOKEN = "bench-token-0123456789abcdef"
NOOP_JOB = {"name": "noop", "steps": [{"name": "s", "type": "noop"}]}

def stamp_job(sleep: float = 0.0, name: str = "stamp") -> dict[str, Any]:
    """A job of one python step that stamps ``time.time()`` as its first instruction."""
    args = {"sleep": sleep} if sleep else {}
    return {"name": name,
            "steps": [{"name": "s", "type": "python", "callable": "bench.stamp", "args": args}]}


# -- options shared by every scenario ----------------------------------------------------
@dataclass
class Options:
    smoke: bool = False
    command: str = ""
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-")))
    profile: bool = True
    #: Extra JOBSERVER_* settings for the throughput nodes (``--node-setting K=V``).
    node_settings: dict[str, str] = field(default_factory=dict)

    def scale(self, full: int, smoke: int) -> int:
        return smoke if self.smoke else full


# -- statistics ---------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(round(q / 100.0 * len(ordered) + 0.5))))
    return ordered[rank - 1]


def latency_summary(seconds: list[float]) -> dict[str, Any]:
    ms = [v * 1000.0 for v in seconds]
    return {"n": len(ms), "p50_ms": _r(percentile(ms, 50)), "p95_ms": _r(percentile(ms, 95)),
            "p99_ms": _r(percentile(ms, 99)), "max_ms": _r(max(ms) if ms else None),
            "mean_ms": _r(statistics.fmean(ms) if ms else None)}


def epoch_seconds(value: Any) -> float:
    """A stored timestamp (datetime or ISO text; naive means UTC) as epoch seconds."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- results ------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    def run(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001 - informational only
            return "?"

    return {"nproc": os.cpu_count(), "free_h": run("free -h"),
            "cpu": run("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
            "python": platform.python_version(), "kernel": platform.release(),
            "postgres": run("psql -h 127.0.0.1 -U postgres -Atc 'select version()'"),
            "synchronous_commit": run("psql -h 127.0.0.1 -U postgres -Atc "
                                      "'show synchronous_commit'"),
            "fsync": run("psql -h 127.0.0.1 -U postgres -Atc 'show fsync'"),
            "git_head": run(f"git -C {ROOT} rev-parse --short HEAD"),
            "git_dirty_files": run(f"git -C {ROOT} status --porcelain -- jobserver schedulers "
                                   "locks migrations | wc -l")}


def write_result(name: str, opts: Options, rows: list[dict[str, Any]],
                 extra: dict[str, Any] | None = None) -> Path:
    """Write ``bench/results/<name>[-smoke].json`` and print the rows as a table."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}{'-smoke' if opts.smoke else ''}.json"
    document = {"scenario": name, "smoke": opts.smoke, "command": opts.command,
                "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(), "rows": rows}
    document.update(extra or {})
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print_table(name, rows)
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}\n", flush=True)
    return path


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        print(f"== {title}: no rows")
        return
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns and not isinstance(
            row[key], (dict, list))]
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(line[i]) for line in cells)) for i, col in enumerate(columns)]
    print(f"== {title}")
    print("  ".join(col.ljust(w) for col, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for line in cells:
        print("  ".join(value.ljust(w) for value, w in zip(line, widths)))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def loadavg() -> float | None:
    """The 1-minute load average: other work on this 2-core machine skews a figure."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def shell_quote(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


# -- processes, from /proc ---------------------------------------------------------------
def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(raw[raw.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of one process, or of its thread ``tid`` (0 if it is gone)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    return _stat_seconds(path, 11)


def reaped_cpu_seconds(pid: int) -> float:
    """cutime + cstime of one process: the CPU of the children it has waited for
    (theirs included), e.g. the processes a shell step starts (0 if it is gone)."""
    return _stat_seconds(f"/proc/{pid}/stat", 13)


def _stat_seconds(path: str, first: int) -> float:
    """The sum of two clock-tick fields of a ``stat`` file from ``first`` on, counted
    after the command name (which may hold spaces), in seconds."""
    try:
        raw = Path(path).read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


def backend_pids(dbname: str) -> list[int]:
    """PostgreSQL backends connected to ``dbname`` (their title names the database)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                title = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if title.startswith("postgres: ") and f" {dbname} " in title:
                found.append(int(entry))
    return found


def cpu_now(pid: int, url: str) -> tuple[float, float, float]:
    """CPU seconds so far of the node (its API workers included), of PostgreSQL's
    backends of the database, and of this process (the clients)."""
    backends = backend_pids(url.rsplit("/", 1)[1]) if url.startswith("postgresql") else []
    return (sum(cpu_seconds(p) for p in tree_pids(pid)),
            sum(cpu_seconds(p) for p in backends), time.process_time())
