"""Is a claim still current? The check a step makes before an effect outside the job
server (``GET /api/v1/jobs/<id>/fence/<fence>``, ``jobserver fence-check``,
:meth:`jobserver.steps.StepContext.fence_is_current`).

A claim is named by the job, the fence of the lease it was taken under and the job's
attempt, which every claim raises by one: the claim token every write of the run
compares with (:class:`~jobserver.store.records.ClaimToken`). The fence alone does not
name one claim: every job a node claims under one lease shares its fence, so a job
paused, resumed and claimed again by the same node comes back under the same fence
with a higher attempt. A check without the attempt answers only "RUNNING under this
fence".

The answer is true at the instant of the read and no later: a rescue may take the job
a moment after. See docs/jobs.md, "Guarantees", for what that leaves open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from jobserver.exceptions import NotFound
from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.tables import jobs


@dataclass(frozen=True)
class FenceStatus:
    """The answer for ``job_id`` under ``fence`` (and ``attempt`` when asked): whether
    that claim is current, and the job's own state and claim now."""

    job_id: int
    fence: int
    attempt: int | None
    current: bool
    state: State
    node: str | None
    job_fence: int
    job_attempt: int

    def as_json(self) -> dict[str, Any]:
        """The API's answer: what was asked, the verdict, and the claim the job holds."""
        return {"current": self.current, "job": self.job_id, "fence": self.fence,
                "attempt": self.attempt, "state": self.state.value,
                "claim": {"node": self.node, "fence": self.job_fence,
                          "attempt": self.job_attempt}}


class FenceRepository:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def check(self, job_id: int, fence: int, attempt: int | None = None) -> FenceStatus:
        """One read of the job's row by its primary key; :class:`NotFound` for an
        unknown job. Current iff the job is RUNNING under ``fence`` (and ``attempt``
        when given)."""
        query = select(jobs.c.state, jobs.c.node, jobs.c.fence, jobs.c.attempt) \
            .where(jobs.c.id == job_id)
        with self._tx.read() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", {"job_id": job_id})
        state = State(row.state)
        current = (state is State.RUNNING and row.fence == fence
                   and (attempt is None or row.attempt == attempt))
        return FenceStatus(job_id, fence, attempt, current, state, row.node, int(row.fence),
                           int(row.attempt))
