"""The caller of the current request as the planners see it (:mod:`jobserver.requester`):
its token's actor and scopes, and its submit budget (``api.submit_rate``), which every
job a planner creates for it is charged to, as a submit of that many jobs would be."""

from __future__ import annotations

from flask import g

from jobserver.api import api
from jobserver.api.auth import Principal
from jobserver.requester import Requester


def requester_for(principal: Principal) -> Requester:
    """The planners' view of ``principal`` in this application."""
    limiter = api().limiter
    return Requester(principal.actor, principal.scopes,
                     lambda jobs: limiter.check(principal, jobs))


def requester() -> Requester:
    """The caller of the current API request (authenticated before any route runs)."""
    return requester_for(g.principal)
