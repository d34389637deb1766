"""The procrastinate side: an app with a no-op task, a stamping task and the
shapes' tasks (:mod:`bench.shapes`).

Worker: ``python -m bench.peers.procrastinate_app`` (env ``BENCH_PG_DSN``,
``BENCH_STAMP_FILE``, ``BENCH_CONCURRENCY``). A sync task (``true``) runs in a
thread of the worker, as procrastinate runs every sync task.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import procrastinate

app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=os.environ.get("BENCH_PG_DSN", "")))
_stamp_file = None
#: Links in a ``link`` chain: each link defers the next until the last.
CHAIN_LINKS = 5


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


@app.task(name="sleep10")
async def sleep10() -> None:
    await asyncio.sleep(0.01)


@app.task(name="true")
def true() -> None:
    subprocess.run(["/bin/true"], check=True)


@app.task(name="link")
async def link(n: int) -> None:
    """Link ``n`` of a chain; procrastinate has no chains: a link defers the next."""
    if n < CHAIN_LINKS:
        await link.defer_async(n=n + 1)


@app.task(name="payload")
async def payload(blob: str) -> str:
    # procrastinate keeps no task results: the 4 KB returned is dropped.
    return "o" * 4096


def main() -> None:
    app.run_worker(concurrency=int(os.environ.get("BENCH_CONCURRENCY", "10")),
                   delete_jobs="never")


if __name__ == "__main__":
    main()
