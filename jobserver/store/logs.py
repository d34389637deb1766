"""The full logs of step attempts: compressed chunks in ``step_logs``.

A step's output is written here while it runs (see :mod:`jobserver.steps.log`), one
row per chunk in ``seq`` order, so any node can serve it, even while the step still
runs. Rows are never changed once written: a reader may page through them while the
writer appends, and resume from a byte offset of the uncompressed log.

An attempt's log is complete once the step has left that attempt (a newer attempt
started, or the step is no longer RUNNING): the runner writes an attempt's last chunk
before it records how the attempt ended.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple, cast

from sqlalchemy import Connection, Table, delete, insert, select

from jobserver.exceptions import NotFound
from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.models import StepLogRow
from jobserver.store.tables import jobs, steps

step_logs = cast(Table, StepLogRow.__table__)

#: Chunks read per query: a page is at most this many compressed chunks in memory.
PAGE = 8
#: The newest chunks :meth:`StepLogRepository.tail` looks at (a running step writes a
#: chunk a second at most, so this is a minute of a quiet step's output).
TAIL_CHUNKS = 64


class LogKey(NamedTuple):
    """Which log: one attempt of one step of one job."""

    job_id: int
    step: str
    attempt: int


class StepProgress(NamedTuple):
    """Where a step is: its newest attempt (0: never started) and its state."""

    attempt: int
    state: State

    def complete(self, attempt: int) -> bool:
        """Whether attempt ``attempt``'s log has all its chunks."""
        return attempt < self.attempt or self.state is not State.RUNNING


class StepLogRepository:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def append(self, key: LogKey, seq: int, start: int, data: bytes) -> None:
        """Store chunk ``seq`` of ``key``'s log: ``data``, whose first byte is byte
        ``start`` of the log. Raises a :class:`~jobserver.exceptions.StoreError` when
        it cannot (the job was deleted, the store is out)."""
        row = {**key._asdict(), "seq": seq, "start": start, "size": len(data),
               "data": zlib.compress(data)}
        # One statement: on PostgreSQL it commits by itself, saving the COMMIT's round
        # trip (SQLite's writes take its write lock in a transaction of their own).
        single = self._tx.dialect == "postgresql"
        with (self._tx.statement() if single else self._tx.write()) as conn:
            conn.execute(insert(step_logs).values(**row))

    def progress(self, job_id: int, step: str) -> StepProgress:
        """The step's newest attempt and state; :class:`NotFound` for an unknown job
        or a step the job does not have."""
        with self._tx.read() as conn:
            row = conn.execute(select(steps.c.attempt, steps.c.state).where(
                steps.c.job_id == job_id, steps.c.name == step)).first()
            if row is None and conn.execute(
                    select(jobs.c.id).where(jobs.c.id == job_id)).first() is None:
                raise NotFound(f"job {job_id} does not exist", {"job_id": job_id})
        if row is None:
            raise NotFound(f"job {job_id} has no step {step!r}",
                           {"job_id": job_id, "step": step})
        return StepProgress(int(row.attempt), State(row.state))

    def read(self, key: LogKey, offset: int = 0) -> Iterator[bytes]:
        """The log's bytes from byte ``offset`` on, as stored now, chunk by chunk
        (decompressed). Each page of chunks is read in a transaction of its own, so
        a slow consumer holds no transaction open."""
        after = -1
        while True:
            with self._tx.read() as conn:
                rows = conn.execute(
                    select(step_logs.c.seq, step_logs.c.start, step_logs.c.data)
                    .where(step_logs.c.job_id == key.job_id, step_logs.c.step == key.step,
                           step_logs.c.attempt == key.attempt, step_logs.c.seq > after,
                           step_logs.c.start + step_logs.c.size > offset)
                    .order_by(step_logs.c.seq).limit(PAGE)).all()
            for row in rows:
                data = zlib.decompress(row.data)
                yield data[max(0, offset - row.start):]
            if len(rows) < PAGE:
                return
            after = rows[-1].seq

    def tail(self, key: LogKey, limit: int = 4096) -> bytes:
        """The last ``limit`` bytes of ``key``'s log as stored now (less when it is
        shorter or written in more than :data:`TAIL_CHUNKS` small chunks; empty
        before the attempt writes anything). Reads the sizes of the newest chunks,
        then the data of only those it needs, so a long log costs what a short one
        does."""
        mine = ((step_logs.c.job_id == key.job_id) & (step_logs.c.step == key.step)
                & (step_logs.c.attempt == key.attempt))
        with self._tx.read() as conn:
            newest = conn.execute(select(step_logs.c.seq, step_logs.c.size).where(mine)
                                  .order_by(step_logs.c.seq.desc()).limit(TAIL_CHUNKS)).all()
            wanted, size = [], 0
            for row in newest:
                if size >= limit:
                    break
                wanted.append(row.seq)
                size += row.size
            if not wanted:
                return b""
            rows = conn.execute(select(step_logs.c.data).where(
                mine, step_logs.c.seq.in_(wanted)).order_by(step_logs.c.seq)).all()
        return b"".join(zlib.decompress(row.data) for row in rows)[-limit:]

    def chunk_count(self, key: LogKey) -> int:
        """How many chunks ``key``'s log has."""
        with self._tx.read() as conn:
            return len(conn.execute(select(step_logs.c.seq).where(
                step_logs.c.job_id == key.job_id, step_logs.c.step == key.step,
                step_logs.c.attempt == key.attempt)).all())


def forget(conn: Connection, job_id: int, names: Iterable[str]) -> None:
    """Delete the logs of the job's steps ``names``, in the caller's transaction: a
    rerun starts their attempts again at 1, and the new attempts' logs must not meet
    the old ones."""
    names = list(names)
    if names:
        conn.execute(delete(step_logs).where(step_logs.c.job_id == job_id,
                                             step_logs.c.step.in_(names)))
