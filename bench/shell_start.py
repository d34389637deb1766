"""What a shell step's process start costs: ``/bin/true``, start to exit.

    python -m bench.shell_start            # 500 starts per row
    python -m bench.shell_start 200        # fewer

Rows, each a per-start latency from the call to the step's reported end (the ways
are taken in turn, one start each, so that other load falls on all alike):

- ``posix_spawn`` of ``/bin/true`` and ``waitpid``, in a loop, from this process:
  the floor; ``fork`` and ``execv`` from this process, the same with a copy of this
  process's address space.
- ``reaper``, process only: the fallback chain (setpriv, the parent check, the
  reaper interpreter, setpriv, the step), spawned and reaped as ``run_shell`` does.
- ``fork server``, process only: a request to the node's fork server, its reply that
  the step ended.
- ``run_shell``, each path: the whole step as the runner calls it (scratch directory,
  environment, output capture, usage, outcome).

Writes ``bench/results/shell_start.json``. Not part of ``make bench``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Options, latency_summary, loadavg, log, write_result
from jobserver.config import ShellStepConfig
from jobserver.steps import StepContext, forkclient, shell

STARTS = 500
TRUE = "/bin/true"


def _spawn_floor() -> None:
    pid = os.posix_spawn(TRUE, [TRUE], os.environ)
    os.waitpid(pid, 0)


def _fork_exec() -> None:
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(TRUE, [TRUE])
        finally:
            os._exit(127)
    os.waitpid(pid, 0)


def _reaper_process(usage_file: Path) -> Callable[[], None]:
    argv = shell._command([TRUE], dict(os.environ), usage_file)

    def start() -> None:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        proc.communicate()
    return start


def _server_process() -> None:
    read_end, write_end = os.pipe()
    try:
        run = forkclient.SERVER.start([TRUE], dict(os.environ), write_end)
    finally:
        os.close(write_end)
    assert run is not None, "no fork server"
    run.done.wait()
    os.close(read_end)
    assert run.result is not None and run.result["status"] == 0, run.result


def _ctx() -> StepContext:
    return StepContext(job_id=1, job_name="bench", step="s", attempt=1, job_attempt=1,
                       fence=1, node="n1", params={}, shell=ShellStepConfig(),
                       cancelled=threading.Event())


def _run_shell() -> None:
    outcome = shell.run_shell({"argv": [TRUE]}, _ctx())
    assert outcome.exit_code == 0, outcome.error


def _measure(starts: dict[str, Callable[[], None]], count: int) -> list[dict[str, Any]]:
    """Time each way ``count`` times, taking them in turn, so that other load on the
    machine falls on every row alike."""
    seconds: dict[str, list[float]] = {what: [] for what in starts}
    for start in starts.values():  # warm: caches, the server's own start
        for _ in range(min(20, count)):
            start()
    for _ in range(count):
        for what, start in starts.items():
            began = time.perf_counter()
            start()
            seconds[what].append(time.perf_counter() - began)
    rows = [{"what": what, **latency_summary(values)} for what, values in seconds.items()]
    for row in rows:
        log(f"{row['what']}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms")
    return rows


def _without_server(start: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        saved, forkclient.SERVER = forkclient.SERVER, forkclient.ForkServer(None)
        try:
            start()
        finally:
            forkclient.SERVER = saved
    return run


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else STARTS
    opts = Options(command="python -m bench.shell_start " + " ".join(argv))
    usage_file = opts.work_dir / "usage.json"
    load = loadavg()
    rows = _measure({"posix_spawn /bin/true (floor)": _spawn_floor,
                     "fork+exec /bin/true": _fork_exec,
                     "reaper, process only": _reaper_process(usage_file),
                     "fork server, process only": _server_process,
                     "run_shell, reaper": _without_server(_run_shell),
                     "run_shell, fork server": _run_shell}, count)
    floor = rows[0]["p50_ms"]
    for row in rows:
        row["p50_vs_floor"] = round(row["p50_ms"] / floor, 1) if floor else None
    write_result("shell_start", opts, rows, {"loadavg_before": load, "loadavg_after": loadavg()})


if __name__ == "__main__":
    main(sys.argv[1:])
