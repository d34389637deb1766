"""What claim-ahead's statements cost against the claim they would replace.

``python -m bench.claim_ahead [ROUNDS]``: on a scratch PostgreSQL database with 40,000
READY one-step jobs, ROUNDS rounds (default 3) of 300 claims of 10 jobs, then 300
holds of 10 each followed by the start of those 10 by id (``jobserver.store.holds``),
in one process. Prints p50 and mean per statement. A held job pays off only if its
start costs less than a claim: the hold runs while the slots are busy, the start
while a slot waits.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench.stores import queue_jobs, store_for

BATCH = 10
PER_ROUND = 300


class _Lease:
    def __init__(self, key: str, fence: int) -> None:
        self.key, self.fence = key, fence


def _timed(call: Callable[[], Any], into: list[float]) -> Any:
    started = time.perf_counter()
    result = call()
    into.append(time.perf_counter() - started)
    return result


def _ms(samples: list[float]) -> str:
    return f"p50 {statistics.median(samples) * 1e3:.2f} ms, mean {statistics.mean(samples) * 1e3:.2f}"


def main(rounds: int) -> None:
    from jobserver.store import Store

    with TemporaryDirectory() as work, store_for("postgres", Path(work)) as url:
        queue_jobs(url, 2 * rounds * PER_ROUND * BATCH + BATCH,
                   {"name": "n", "steps": [{"name": "s", "type": "noop"}]})
        store = Store(url)
        lease = _Lease("scheduler/global", store.epochs.bump("scheduler/global", "bench"))
        for number in range(1, rounds + 1):
            claims: list[float] = []
            holds: list[float] = []
            starts: list[float] = []
            for _ in range(PER_ROUND):
                assert len(_timed(lambda: store.runs.claim("bench", lease, BATCH), claims)) == BATCH
            for _ in range(PER_ROUND):
                ids = _timed(lambda: store.holds.hold("bench", lease, BATCH), holds)
                started = _timed(lambda: store.holds.start_held("bench", lease, ids), starts)
                assert len(started) == BATCH
            print(f"round {number}: claim {_ms(claims)} | hold {_ms(holds)} | "
                  f"start held {_ms(starts)}", flush=True)
        store.dispose()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
