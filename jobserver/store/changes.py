"""The history of changes asked through the API and the dashboard (``changes``).

Jobs keep their own trail (``job_events``: a submit, every operator action). Everything
else a request changes — a schedule, dataset, consumer, view or batch config created,
replaced, switched or deleted, partitions added, a materialize, a batch run — is one
row here: who (a token's name and id, never its secret), which path, which route, and
what the reply said it did. The application records a row after each such request
succeeded (:func:`jobserver.api.history.record_change`), so a route added later is
recorded without doing anything.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import cast
from datetime import datetime

from sqlalchemy import Table, delete, insert, select

from jobserver.store import Transactions
from jobserver.store.engine import store_now
from jobserver.store.epochs import fenced
from jobserver.store.models import ChangeRow
from jobserver.store.records import Actor

changes = cast(Table, ChangeRow.__table__)

#: The most rows one read returns.
MAX_PAGE = 500


@dataclass(frozen=True)
class ChangeRecord:
    id: int
    at: datetime
    actor: Actor
    method: str
    resource: str
    action: str
    outcome: str


class ChangeHistory:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def record(self, actor: Actor, method: str, resource: str, action: str,
               outcome: str) -> None:
        """One change, at the store's clock (never a node's)."""
        with self._tx.write() as conn:
            conn.execute(insert(changes).values(
                at=store_now(), actor=actor.name[:200], actor_token_id=actor.token_id,
                method=method[:8], resource=resource[:1000], action=action[:100],
                outcome=outcome[:100]))

    def list(self, resource: str | None = None, limit: int = 100,
             before_id: int | None = None) -> builtins.list[ChangeRecord]:
        """Newest first; ``resource``: that path and every path under it."""
        query = select(changes)
        if resource is not None:
            prefix = resource.rstrip("/")
            query = query.where((changes.c.resource == prefix)
                                | changes.c.resource.startswith(prefix + "/",
                                                                autoescape=True))
        if before_id is not None:
            query = query.where(changes.c.id < before_id)
        query = query.order_by(changes.c.id.desc()).limit(max(1, min(limit, MAX_PAGE)))
        with self._tx.read() as conn:
            return [ChangeRecord(row.id, row.at, Actor(row.actor, row.actor_token_id),
                                 row.method, row.resource, row.action, row.outcome)
                    for row in conn.execute(query)]

    def delete_before(self, before: datetime, limit: int, fence: tuple[str, int]) -> int:
        """Delete up to ``limit`` of the oldest rows recorded before ``before``, in one
        transaction fenced by the lease ``fence`` (key, fence); how many went.

        Rows are recorded in id order at the store's clock, so the oldest are the
        lowest ids: the read walks the primary key from its start and stops after
        ``limit`` rows, with no index on ``at``."""
        oldest = (select(changes.c.id).where(changes.c.at < before)
                  .order_by(changes.c.id).limit(limit))
        with fenced(self._tx, fence[0], fence[1], "another node deletes old changes") as conn:
            ids = list(conn.execute(oldest).scalars())
            if ids:
                conn.execute(delete(changes).where(changes.c.id.in_(ids)))
        return len(ids)
