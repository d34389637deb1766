"""Who asks a planner for work, and what they may: the one object every planner action
that creates jobs or changes a definition is given.

The engine's rules for a submit are the caller's scopes, the caller's submit budget
(``api.submit_rate``) and the caller's name on what they cause. A planner launches
work on someone's behalf (a materialize request, a batch run, a dashboard form), so it
is handed a :class:`Requester` by whatever took the request, and

* charges every job it is about to create to the requester's budget before it writes
  anything (:meth:`Requester.charge`): one request that creates 3,000 jobs costs what
  3,000 submits cost, and one over the burst is refused whole;
* records the requester on those jobs, with the planner beside it
  (:meth:`Requester.on_behalf`: ``views for alice``), and on the definitions it saves;
* checks a scope a definition needs beyond the route's (:meth:`Requester.require`: a
  batch config whose watermark runs SQL needs ``sql``).

Work a planner starts on its own (a schedule's fire time, a tracker's retry) runs as
the planner itself, :data:`PLANNER_ITSELF`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobserver.exceptions import Forbidden
from jobserver.store.records import SYSTEM, Actor
from jobserver.store.tokens import ALL_SCOPES, grants


@dataclass(frozen=True)
class Requester:
    """The caller a planner acts for: its actor (a token's name and id), its scopes,
    and ``take``, which takes ``n`` jobs from its submit budget or raises
    :class:`~jobserver.exceptions.RateLimited` (None: no budget, the planners' own)."""

    actor: Actor
    scopes: frozenset[str] = ALL_SCOPES
    take: Callable[[int], None] | None = None

    def charge(self, jobs: int) -> None:
        """Charge ``jobs`` about-to-be-created jobs, all or none, before any is written."""
        if jobs > 0 and self.take is not None:
            self.take(jobs)

    def on_behalf(self, planner: str) -> Actor:
        """Who submitted the jobs ``planner`` makes for this requester: ``views for
        alice`` with alice's token id, or the planner alone for its own work."""
        if self.actor == SYSTEM:
            return Actor(planner)
        return Actor(f"{planner} for {self.actor.name}", self.actor.token_id)

    def require(self, scope: str, field: str, what: str) -> None:
        """:class:`Forbidden` (403 naming ``field`` and ``scope``) unless the requester
        has ``scope``: ``what`` says what needs it (``a watermark that runs SQL``)."""
        if grants(self.scopes, scope):
            return
        raise Forbidden(f"{field}: {what} needs a token with the {scope!r} scope",
                        [{"field": field, "message": f"token {self.actor.name!r} lacks the "
                                                     f"{scope!r} scope"}])


#: A planner acting on its own: the schedule evaluator, the trackers' retries.
PLANNER_ITSELF = Requester(SYSTEM)
