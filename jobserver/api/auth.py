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
route is closed until someone decides otherwise.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from jobserver.config import Config
from jobserver.exceptions import AuthError, Forbidden
from jobserver.store.tokens import (ADMIN, ALL_SCOPES, FENCE, OPERATE, READ, SHELL, SQL,
                                    SUBMIT, grants)
from jobserver.store.records import Actor

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
    "schedules.list_schedules": READ,
    "schedules.get_schedule": READ,
    "schedules.schedule_jobs": READ,
    "schedules.schedule_evaluations": READ,
    # Creating or changing a schedule submits its template, shell steps included
    # (checked like a job's: see check_step_types).
    "schedules.create_schedule": SUBMIT,
    "schedules.put_schedule": SUBMIT,
    "schedules.operate_schedule": OPERATE,
    "schedules.delete_schedule": OPERATE,
    "datasets.list_datasets": READ,
    "datasets.get_dataset": READ,
    "datasets.list_partitions": READ,
    "datasets.create_dataset": SUBMIT,
    "datasets.put_dataset": SUBMIT,
    "datasets.add_partitions": SUBMIT,
    "datasets.delete_dataset": OPERATE,
    "datasets.delete_partitions": OPERATE,
    "datasets.list_consumers": READ,
    "datasets.get_consumer": READ,
    "datasets.put_consumer": SUBMIT,
    "datasets.delete_consumer": OPERATE,
    "datasets.reset_failed": OPERATE,
    "views.list_view_definitions": READ,
    "views.get_view_definition": READ,
    "views.list_views": READ,
    # Saving a definition submits its job template (shell steps need 'shell' too);
    # materializing submits the templates' jobs.
    "views.put_view_definition": SUBMIT,
    "views.materialize": SUBMIT,
    "views.materialize_path": SUBMIT,
    "views.delete_view_definition": OPERATE,
    "views.invalidate": OPERATE,
    "batches.list_batches": READ,
    "batches.batch_audit": READ,
    "batches.get_batch_run": READ,
    "batches.list_batch_configs": READ,
    "batches.get_batch_config": READ,
    # A run launches the config's stage jobs; the config's shell steps were checked
    # against the scopes of whoever put it (like a schedule's template).
    "batches.run_batches": SUBMIT,
    "batches.put_batch_config": SUBMIT,
    "batches.delete_batch_config": OPERATE,
    "cluster.cluster": READ,
    "metrics.metrics": READ,
    "openapi.openapi_json": READ,
}


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
    return ENDPOINT_SCOPES.get(endpoint, ADMIN)


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
