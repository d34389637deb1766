"""Who is calling, and may they: bearer tokens and scopes per route (the submit rate
limit is :mod:`jobserver.api.limits`).

Two kinds of token are accepted:

* ``api.tokens`` from the config: operator-provisioned secrets with every scope
  (they should be long random values, e.g. ``python -c 'import secrets;
  print(secrets.token_urlsafe(32))'``);
* tokens in the store (``jobserver token create``): hashed, scoped, revocable and
  optionally expiring (see :mod:`jobserver.store.tokens` for the scopes).

A missing or unknown token is a 401; a token without the route's scope is a 403 that
names the scope. Routes not listed in :data:`ENDPOINT_SCOPES` need ``admin``, so a new
route is closed until someone decides otherwise. Every route that changes something
also declares its cost against the caller's submit budget (:data:`ENDPOINT_COSTS`).
"""

from __future__ import annotations

import enum
import hmac
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from jobserver.config import Config
from jobserver.exceptions import AuthError, ConfigError, Forbidden
from jobserver.store.tokens import (ADMIN, ALL_SCOPES, FENCE, OPERATE, READ, SHELL, SQL,
                                    SUBMIT, grants)
from jobserver.store.records import Actor

if TYPE_CHECKING:
    from jobserver.planners import Route

ENDPOINT_SCOPES: dict[str, str] = {
    "jobs.submit": SUBMIT,
    "bulk.submit_batch": SUBMIT,
    "jobs.list_jobs": READ,
    "jobs.get_job": READ,
    "jobs.job_events": READ,
    "logs.step_log": READ,  # as reading the job: its steps carry their output too
    "jobs.operate": OPERATE,
    # The token to give steps: it answers whether a claim is current (yes or no, for
    # any job) and nothing else; 'read' includes it.
    "fences.check_fence": FENCE,
    "cluster.cluster": READ,
    "history.list_changes": READ,
    "metrics.metrics": READ,
    "openapi.openapi_json": READ,
}


class Cost(str, enum.Enum):
    """What a route that changes something costs against the caller's submit budget
    (``api.submit_rate``, ``api.submit_burst``)."""

    #: One per job it creates, charged by what creates them before anything is
    #: written: the submit routes themselves, a planner through its requester
    #: (:mod:`jobserver.requester`). A request over the burst is refused whole.
    PER_JOB = "per job"
    #: One per request, charged before the route runs: what saves a definition or
    #: adds data that planners act on.
    ONE = "one"
    #: Nothing: operations on what exists (pause, enable, delete, invalidate).
    FREE = "free"


#: The cost of every route that is not a read (a test walks the URL map: a route
#: added later cannot leave it out). Reads cost nothing.
ENDPOINT_COSTS: dict[str, Cost] = {
    "jobs.submit": Cost.PER_JOB,
    "bulk.submit_batch": Cost.PER_JOB,
    "jobs.operate": Cost.FREE,
    "ui.operate": Cost.FREE,
    "ui.sign_in_post": Cost.FREE,
    "ui.sign_out": Cost.FREE,
}


@lru_cache(maxsize=1)
def endpoint_scopes() -> dict[str, str]:
    """The scope of every declared endpoint: the engine's (:data:`ENDPOINT_SCOPES`)
    and each installed planner's (:meth:`~jobserver.planners.base.Planner.routes`)."""
    merged = dict(ENDPOINT_SCOPES)
    for endpoint, route in _planner_routes().items():
        merged[endpoint] = route.scope
    return merged


@lru_cache(maxsize=1)
def endpoint_costs() -> dict[str, Cost]:
    """The cost of every declared route that changes something: the engine's
    (:data:`ENDPOINT_COSTS`) and each installed planner's."""
    merged = dict(ENDPOINT_COSTS)
    for endpoint, route in _planner_routes().items():
        if route.cost is not None:
            merged[endpoint] = route.cost
    return merged


def _planner_routes() -> dict[str, Route]:
    from jobserver.planners import installed

    found: dict[str, Route] = {}
    for planner in installed():
        for endpoint, route in planner.routes().items():
            if endpoint in found or endpoint in ENDPOINT_SCOPES or endpoint in ENDPOINT_COSTS:
                raise ConfigError(f"planner {planner.name} declares endpoint {endpoint}, "
                                  "which is declared already")
            found[endpoint] = route
    return found


def route_cost(endpoint: str | None) -> Cost:
    """A route's cost; a route that changes something and is not listed is refused
    by the test of the URL map, and costs one meanwhile."""
    return endpoint_costs().get(endpoint or "", Cost.ONE)


@dataclass(frozen=True)
class Principal:
    """The caller: a token's name and id (never its secret) and its scopes."""

    name: str
    scopes: frozenset[str]
    id: int | None = None  # stored tokens only

    @property
    def key(self) -> str:
        """What the rate limiter counts by."""
        return f"token:{self.id}" if self.id is not None else self.name

    def describe(self) -> dict[str, Any]:
        return {"token": self.name, "token_id": self.id}

    @property
    def actor(self) -> Actor:
        """The caller as recorded on the jobs it submits and the changes it asks for:
        a stored token's name and id, or a config token's name (``config token #N``)."""
        return Actor(self.name, self.id)


ANONYMOUS = Principal("anonymous (api.auth=false)", ALL_SCOPES)


def required_scope(endpoint: str | None) -> str | None:
    """The scope a route needs; None for an unmatched URL (it is a 404 anyway)."""
    if endpoint is None:
        return None
    return endpoint_scopes().get(endpoint, ADMIN)


def authenticate(config: Config, store: Any, authorization: str) -> Principal:
    if not config.api.auth:
        return ANONYMOUS
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthError("missing bearer token", {"header": "Authorization"})
    # Compare against every config token so timing does not reveal which one nearly
    # matched.
    matched = None
    for index, candidate in enumerate(config.api.tokens):
        if hmac.compare_digest(candidate.encode(), token.encode("utf-8", "surrogatepass")):
            matched = index
    if matched is not None:
        return config_token_principal(matched)
    verdict = store.tokens.authenticate(token)
    if verdict.token is None:
        reason = {"revoked": "token revoked", "expired": "token expired"}
        raise AuthError(reason.get(verdict.reason or "", "invalid token"),
                        {"header": "Authorization"})
    return Principal(verdict.token.name, frozenset(verdict.token.scopes), verdict.token.id)


def config_token_principal(index: int) -> Principal:
    """The caller holding the ``index``-th token of ``api.tokens`` (from 0): every scope,
    named by its place, never by its secret."""
    return Principal(f"config token #{index + 1}", ALL_SCOPES)


def authorize(principal: Principal, endpoint: str | None) -> None:
    scope = required_scope(endpoint)
    if scope is not None and not grants(principal.scopes, scope):
        raise Forbidden(f"token {principal.name!r} lacks the {scope!r} scope",
                        {"required_scope": scope, **principal.describe()})


#: Step types that need a scope of their own on top of ``submit``: they reach beyond
#: the job server (a process on the node, a database).
STEP_SCOPES: dict[str, str] = {"shell": SHELL, "sql": SQL}


def check_step_types(principal: Principal, spec: Any) -> None:
    """Shell steps need the ``shell`` scope and sql steps the ``sql`` scope, on top of
    ``submit``."""
    lacking = [(index, step.type) for index, step in enumerate(spec.steps)
               if step.type in STEP_SCOPES and STEP_SCOPES[step.type] not in principal.scopes]
    if not lacking:
        return
    fields = [{"field": f"steps[{index}].type",
               "message": f"token {principal.name!r} lacks the {STEP_SCOPES[kind]!r} scope"}
              for index, kind in lacking]
    kind = lacking[0][1]
    raise Forbidden(f"{fields[0]['field']}: {kind} steps need a token with the "
                    f"{STEP_SCOPES[kind]!r} scope", fields)
