"""Fence counters: the store's record of the newest lease of every lock key.

Every lock backend records here each fence it draws: those without a version of
their own (file, postgres) draw fences with :meth:`bump`; those with one (ZooKeeper's
``czxid``, the memory backend's counter) record theirs with :meth:`advance`. Claims
check that their fence is still the newest of their key, so a scheduler whose lease
was taken over cannot claim even before it notices the loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection, Exists, and_, exists, insert, select, update

from jobserver.exceptions import ConstraintViolation, FencedOff
from jobserver.store import Transactions
from jobserver.store.engine import store_now
from jobserver.store.tables import epochs


def is_current(key: str, fence: int) -> Exists:
    """SQL condition: ``fence`` is the newest recorded fence of ``key``."""
    return exists().where(and_(epochs.c.key == key, epochs.c.epoch == fence))


@contextmanager
def fenced(tx: Transactions, key: str, fence: int,
           holder: str = "another node") -> Iterator[Connection]:
    """A write transaction that commits only while ``fence`` is the newest of ``key``
    (a planner's lease); :class:`FencedOff` (writing nothing) otherwise.

    On PostgreSQL the epoch row stays share-locked until the commit, so that a new
    holder's fence cannot be recorded between the check and the writes; SQLite's
    write transaction serialises them anyway. ``holder`` says who acts instead, in
    the refusal's message.
    """
    with tx.write() as conn:
        query = select(epochs.c.epoch).where(epochs.c.key == key)
        if tx.dialect == "postgresql":
            query = query.with_for_update(read=True)
        if conn.execute(query).scalar() != fence:
            raise FencedOff(f"the lease {key} (fence {fence}) is no longer the newest; "
                            f"{holder} acts now")
        yield conn


class Taken(NamedTuple):
    """Who took the newest lease of a key, and when (the store's clock)."""

    holder: str | None
    at: datetime | None


class EpochRepository:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def bump(self, key: str, holder: str | None = None) -> int:
        """Atomically increment and return the epoch of ``key`` (1 on first use)."""
        stamp = {"holder": holder, "acquired_at": store_now()}
        with self._tx.write() as conn:
            row = conn.execute(update(epochs).where(epochs.c.key == key)
                               .values(epoch=epochs.c.epoch + 1, **stamp)
                               .returning(epochs.c.epoch)).first()
            if row is not None:
                return int(row[0])
        try:
            with self._tx.write() as conn:
                conn.execute(insert(epochs).values(key=key, epoch=1, **stamp))
                return 1
        except ConstraintViolation:  # a concurrent first acquisition inserted it: bump that row
            return self.bump(key, holder)

    def advance(self, key: str, fence: int, holder: str | None = None) -> bool:
        """Record ``fence`` as the newest of ``key``; False if a newer one is recorded."""
        with self._tx.write() as conn:
            current = conn.execute(select(epochs.c.epoch, epochs.c.holder)
                                   .where(epochs.c.key == key)).first()
            if current is not None:
                if current.epoch > fence:
                    return False
                if current.epoch < fence or (holder and current.holder != holder):
                    conn.execute(update(epochs).where(epochs.c.key == key,
                                                      epochs.c.epoch <= fence)
                                 .values(epoch=fence, holder=holder or current.holder,
                                         acquired_at=store_now()))
                return True
        try:
            with self._tx.write() as conn:
                conn.execute(insert(epochs).values(key=key, epoch=fence, holder=holder,
                                                   acquired_at=store_now()))
                return True
        except ConstraintViolation:
            return self.advance(key, fence, holder)

    def holder(self, key: str) -> str | None:
        """Who took the newest lease of ``key`` (it may have been released since)."""
        with self._tx.read() as conn:
            return conn.execute(select(epochs.c.holder).where(epochs.c.key == key)).scalar()

    def taken(self, key: str) -> Taken | None:
        """Who took the newest lease of ``key`` and when, in one read; None if nobody
        ever did. The lease may have been released or lost since: ask the lock
        backend whether ``key`` is still held (``jobserver.presence``)."""
        with self._tx.read() as conn:
            row = conn.execute(select(epochs.c.holder, epochs.c.acquired_at)
                               .where(epochs.c.key == key)).first()
        return None if row is None else Taken(row.holder, row.acquired_at)
