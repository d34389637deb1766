"""``jobserver_jobs_stuck{reason}``: jobs READY for longer than
``scheduler.stuck_after`` by why no node runs them, waiting for a free slot left out.

One node counts: the one holding the planner seat (the active scheduler, the leader,
or in ``distributed`` mode the holder of the planner lock), by one grouped read every
:func:`interval` seconds (see :func:`jobserver.store.not_running.count_stuck`). Every other
node reports 0 for every reason, so that ``max()`` over the nodes is the count, and a
node that stops planning stops reporting its last figures at its next round.
"""

from __future__ import annotations

import logging
from typing import Any

from jobserver.config import Config
from jobserver.loops import Periodic
from jobserver.planner import PlannerSeat
from jobserver.store import Store
from jobserver.store.not_running import STUCK_CODES

log = logging.getLogger(__name__)

#: Bounds of the counting interval: often enough to see a threshold crossed soon after,
#: rarely enough that reading a large READY backlog costs nothing that matters.
MIN_INTERVAL, MAX_INTERVAL = 0.5, 30.0


def interval(stuck_after: float) -> float:
    """Seconds between counts: a tenth of the threshold, within the bounds."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, stuck_after / 10))


class StuckJobs(Periodic):
    """Sets ``gauge`` (labelled by reason) from the store while ``seat`` is held here."""

    def __init__(self, store: Store, seat: PlannerSeat, config: Config, gauge: Any) -> None:
        super().__init__("stuck-jobs", interval(config.scheduler.stuck_after), self._round,
                         required=False)  # a metric: never worth the node
        self._store = store
        self._seat = seat
        self._config = config
        self._gauge = gauge

    def _round(self) -> None:
        self.count()

    def count(self) -> dict[str, int]:
        """One round: the counts set (all 0 on a node that does not plan)."""
        counts = dict.fromkeys(STUCK_CODES, 0)
        if self._seat.held():
            scheduler, server = self._config.scheduler, self._config.server
            counts = self._store.jobs.stuck(scheduler.mode.value, server.dead_after,
                                            scheduler.stuck_after)
        for code, value in counts.items():
            self._gauge.labels(code).set(value)
        return counts
