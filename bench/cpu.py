"""The node's own CPU per job, measured in one process, where nothing else runs.

    python -m bench.cpu                      # drain and submit, each store, 5,000 jobs
    python -m bench.cpu 2000 sqlite          # fewer jobs, one store
    python -m bench.cpu 2000 postgres --steps 5   # 5-step no-op chains

The throughput scenario's rates on a shared two-core machine spread by a quarter from
one run to the next, more than a change to the engine usually moves them. This tool
takes the noise of other processes out of a comparison between two trees:

- ``drain``: a :class:`jobserver.node.Node` runs in this process (single and
  distributed mode, no listeners) on a fresh store with N no-op jobs queued by
  :func:`bench.stores.queue_jobs`; CPU seconds of this process from ``start()`` until
  every job is SUCCEED, per job.
- ``submit``: N two-step jobs parsed, validated and submitted through
  ``store.jobs.submit`` back to back, as the API does, per job.

Run it in each tree's own virtual environment, alternating, and compare means. Writes
``bench/results/cpu.json``. Not part of ``make bench``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import Options, log, write_result
from bench.stores import queue_jobs, store_for

JOBS = 5_000
STORES = ("sqlite", "postgres")
TWO_STEPS = {"name": "cpu", "steps": [{"name": "a", "type": "noop"},
                                      {"name": "b", "type": "noop", "depends_on": ["a"]}]}


def drain(url: str, data_dir: Path, mode: str, count: int,
          spec: dict[str, Any] | None = None) -> float:
    """CPU ms per job of a node draining ``count`` queued jobs of ``spec`` (default:
    one no-op step)."""
    from jobserver.config import load_config
    from jobserver.node import Node
    from jobserver.steps.python import PythonSteps
    from jobserver.store import Store

    config = load_config(environ={"JOBSERVER_DATABASE__URL": url,
                                  "JOBSERVER_DATA_DIR": str(data_dir),
                                  "JOBSERVER_SERVER__ID": "cpu-1",
                                  "JOBSERVER_SCHEDULER__MODE": mode,
                                  "JOBSERVER_SCHEDULER__LISTENERS": "[]"})
    queue_jobs(url, count, spec)
    node, probe = Node(config, PythonSteps()), Store(url)
    started, began = time.process_time(), time.monotonic()
    node.start(upgrade=False)
    try:
        while probe.jobs.count_by_state().get("SUCCEED", 0) < count:
            time.sleep(0.05)
        log(f"drained {count} jobs in {time.monotonic() - began:.2f} s "
            f"({count / (time.monotonic() - began):.0f} jobs/s)")
        return 1000 * (time.process_time() - started) / count
    finally:
        node.stop(5)
        probe.dispose()


def submit(url: str, count: int) -> float:
    """CPU ms per submit of a two-step job, parsed and validated as the API does."""
    from jobserver.spec import Policy, parse_job, validate_job
    from jobserver.steps.python import PythonSteps
    from jobserver.store import Store

    store = Store(url)
    policy = Policy(PythonSteps.with_entry_points().is_registered, None)
    body = json.dumps(TWO_STEPS)
    started = time.process_time()
    try:
        for _ in range(count):
            job = parse_job(body)
            store.jobs.submit(job, validate_job(job, policy))
        return 1000 * (time.process_time() - started) / count
    finally:
        store.dispose()


def chain(steps: int) -> dict[str, Any]:
    """A job of ``steps`` no-op steps, each depending on the one before."""
    return {"name": f"chain{steps}", "steps": [
        {"name": f"s{i}", "type": "noop", **({"depends_on": [f"s{i - 1}"]} if i else {})}
        for i in range(steps)]}


def main(argv: list[str]) -> None:
    steps = 1
    if "--steps" in argv:  # --steps K: drain chains of K no-op steps (no submit row)
        at = argv.index("--steps")
        steps, argv = int(argv[at + 1]), argv[:at] + argv[at + 2:]
    count = int(argv[0]) if argv else JOBS
    stores = argv[1:] or list(STORES)
    opts = Options(command="python -m bench.cpu " + " ".join(argv)
                   + (f" --steps {steps}" if steps > 1 else ""))
    spec = chain(steps) if steps > 1 else None
    rows: list[dict[str, Any]] = []
    for backend in stores:
        for mode in ("single", "distributed"):
            work = opts.work_dir / f"drain-{backend}-{mode}"
            with store_for(backend, work / "store") as url:
                rows.append({"store": backend, "what": f"drain, {mode}", "jobs": count,
                             "steps": steps,
                             "cpu_ms_per_job": round(drain(url, work, mode, count, spec), 3)})
            log(f"cpu {backend} drain {mode}: {rows[-1]['cpu_ms_per_job']} ms per job")
        if steps > 1:
            continue
        with store_for(backend, opts.work_dir / f"submit-{backend}") as url:
            rows.append({"store": backend, "what": "submit", "jobs": count,
                         "cpu_ms_per_job": round(submit(url, count), 3)})
        log(f"cpu {backend} submit: {rows[-1]['cpu_ms_per_job']} ms per job")
    write_result("cpu" if steps == 1 else f"cpu-chain{steps}", opts, rows)


if __name__ == "__main__":
    main(sys.argv[1:])
