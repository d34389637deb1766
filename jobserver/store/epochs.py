"""Fence counters: the store's record of the newest lease of every lock key.

Backends without a version of their own (file, postgres) draw fences here with
:meth:`bump`; backends with one (ZooKeeper's ``czxid``) record theirs with
:meth:`advance`. Claims check that their fence is still the newest of their key, so a
scheduler whose lease was taken over cannot claim even before it notices the loss.
"""

from __future__ import annotations

from sqlalchemy import and_, exists, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobserver.store.tables import epochs


def is_current(key: str, fence: int):
    """SQL condition: ``fence`` is the newest recorded fence of ``key``."""
    return exists().where(and_(epochs.c.key == key, epochs.c.epoch == fence))


class EpochRepository:
    def __init__(self, tx) -> None:
        self._tx = tx

    def bump(self, key: str) -> int:
        """Atomically increment and return the epoch of ``key`` (1 on first use)."""
        with self._tx.write() as conn:
            row = conn.execute(update(epochs).where(epochs.c.key == key)
                               .values(epoch=epochs.c.epoch + 1)
                               .returning(epochs.c.epoch)).first()
            if row is not None:
                return int(row[0])
        try:
            with self._tx.write() as conn:
                conn.execute(insert(epochs).values(key=key, epoch=1))
                return 1
        except IntegrityError:  # a concurrent first acquisition inserted it: bump that row
            return self.bump(key)

    def advance(self, key: str, fence: int) -> bool:
        """Record ``fence`` as the newest of ``key``; False if a newer one is recorded."""
        with self._tx.write() as conn:
            updated = conn.execute(update(epochs)
                                   .where(epochs.c.key == key, epochs.c.epoch <= fence)
                                   .values(epoch=fence)).rowcount
            if updated:
                return True
            if conn.execute(select(epochs.c.epoch).where(epochs.c.key == key)).first():
                return False
        try:
            with self._tx.write() as conn:
                conn.execute(insert(epochs).values(key=key, epoch=fence))
                return True
        except IntegrityError:
            return self.advance(key, fence)

    def current(self, key: str) -> int:
        with self._tx.read() as conn:
            value = conn.execute(select(epochs.c.epoch).where(epochs.c.key == key)).scalar()
            return int(value or 0)
