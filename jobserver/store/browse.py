"""What the dashboard reads about jobs in bulk, each read bounded whatever the number
of jobs in the store.

* :meth:`JobBrowser.counts` counts each state up to a cap, by ``ix_jobs_state_id``:
  a state holding more says so (``capped``) instead of reading every row.
* :meth:`JobBrowser.throughput` counts the jobs finished per minute over the last
  hour by ``ix_jobs_finished``: an index range scan of that hour's finished jobs.
* :meth:`JobBrowser.page` lists jobs newest first under filters: see its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Integer, cast, func, literal, select, text

from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.engine import seconds_since, store_now
from jobserver.store.models import FINISHED_JOBS
from jobserver.store.tables import jobs

#: A state's count stops here (see :class:`StateCounts`).
COUNT_CAP = 100_000
#: The states a job ends a run in, drawn in the throughput chart.
THROUGHPUT_STATES = (State.SUCCEED, State.ERROR, State.DISCARDED)


@dataclass(frozen=True)
class StateCounts:
    """Jobs per state; a state in ``capped`` holds at least its count (the cap)."""

    counts: dict[str, int]
    capped: frozenset[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Throughput:
    """Jobs finished in each of the last ``minutes`` minutes, oldest first, by state:
    ``per_minute[state][i]`` is the minute that ended ``minutes - i - 1`` minutes ago."""

    minutes: int
    per_minute: dict[str, list[int]]

    @property
    def total(self) -> int:
        return sum(sum(counts) for counts in self.per_minute.values())


class JobBrowser:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def counts(self, cap: int = COUNT_CAP) -> StateCounts:
        """Each state's jobs, counted up to ``cap``: one index range scan of at most
        ``cap`` entries per state."""
        found: dict[str, int] = {}
        with self._tx.read() as conn:
            for state in State:
                capped = (select(literal(1)).select_from(jobs)
                          .where(jobs.c.state == state.value).limit(cap).subquery())
                count = int(conn.execute(select(func.count()).select_from(capped)).scalar_one())
                if count:
                    found[state.value] = count
        return StateCounts(found, frozenset(s for s, n in found.items() if n >= cap))

    def throughput(self, minutes: int = 60) -> Throughput:
        """Jobs that finished (SUCCEED, ERROR, DISCARDED) in each of the last
        ``minutes`` minutes of the store's clock, by ``ix_jobs_finished`` (the partial
        index's predicate is spelled as it is, so that SQLite uses it too)."""
        # A cast truncates, which for ages (never negative) is the floor.
        ago = cast(seconds_since(jobs.c.finished_at) / 60.0, Integer).label("ago")
        query = (select(jobs.c.state, ago, func.count())
                 .where(text(FINISHED_JOBS), jobs.c.finished_at >= store_now(-60.0 * minutes))
                 .group_by(jobs.c.state, ago))
        per_minute = {state.value: [0] * minutes for state in THROUGHPUT_STATES}
        with self._tx.read() as conn:
            for state, minutes_ago, count in conn.execute(query):
                if state in per_minute and 0 <= minutes_ago < minutes:
                    per_minute[state][minutes - 1 - int(minutes_ago)] += int(count)
        return Throughput(minutes, per_minute)
