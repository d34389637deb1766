"""The procrastinate side: an app with a no-op task and a stamping task.

Worker: ``python -m bench.peers.procrastinate_app`` (env ``BENCH_PG_DSN``,
``BENCH_STAMP_FILE``, ``BENCH_CONCURRENCY``).
"""

from __future__ import annotations

import os
import time

import procrastinate

app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=os.environ.get("BENCH_PG_DSN", "")))
_stamp_file = None


@app.task(name="noop")
async def noop() -> None:
    return None


@app.task(name="stamp")
async def stamp(key: int) -> None:
    started = time.time()  # the body's first instruction
    global _stamp_file
    if _stamp_file is None:
        _stamp_file = open(os.environ["BENCH_STAMP_FILE"], "a", buffering=1)
    _stamp_file.write(f"{key} {started!r}\n")


def main() -> None:
    app.run_worker(concurrency=int(os.environ.get("BENCH_CONCURRENCY", "10")),
                   delete_jobs="never")


if __name__ == "__main__":
    main()
