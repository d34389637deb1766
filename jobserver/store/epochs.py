"""Fence counters for lock backends whose locks carry no version of their own."""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from jobserver.store.models import LockEpochRow

_epochs = LockEpochRow.__table__


class EpochRepository:
    def __init__(self, tx) -> None:
        self._tx = tx

    def bump(self, key: str) -> int:
        """Atomically increment and return the epoch of ``key`` (1 on first use)."""
        with self._tx.write() as conn:
            row = conn.execute(update(_epochs).where(_epochs.c.key == key)
                               .values(epoch=_epochs.c.epoch + 1)
                               .returning(_epochs.c.epoch)).first()
            if row is not None:
                return int(row[0])
        try:
            with self._tx.write() as conn:
                conn.execute(insert(_epochs).values(key=key, epoch=1))
                return 1
        except IntegrityError:  # a concurrent first acquisition inserted it: bump that row
            return self.bump(key)

    def current(self, key: str) -> int:
        with self._tx.read() as conn:
            value = conn.execute(select(_epochs.c.epoch).where(_epochs.c.key == key)).scalar()
            return int(value or 0)
