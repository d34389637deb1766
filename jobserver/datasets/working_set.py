"""Consumers' working sets: filled from the pointer, shared out to jobs, settled when
the jobs end.

A job that declares inputs (``JobSpec.inputs``) takes its partitions when the
engine starts it, in ONE transaction fenced by its claim (:func:`take_inputs`): for
each input, the consumer's row is locked (fills of one consumer are serialised;
PostgreSQL row lock, SQLite's single writer), partitions left DONE by jobs that
succeeded are purged into the consumer's ``processed`` count, partitions held by a
run that no longer runs are given back (:func:`settle`), the working set is filled
from the pointer in commit order up to ``max_working_set_size`` (partitions outside
the filter or the start/end window are skipped for good; the pointer moves past all
that was read), and up to ``limit`` NEW partitions become IN_PROGRESS for this run
(``job_id``, ``job_attempt``). A fill that has skipped :data:`MAX_SCAN` partitions
stops and claims nothing: its transaction commits the pointer and the caller takes
again in a new one (:func:`take_inputs` with ``final`` False), so that no transaction
holds the store long, yet a run reaches the matching partitions after any stretch of
skipped ones. After :data:`MAX_ROUNDS` such transactions a run that has nothing goes
back to READY at once, saying how far its fill got; one with partitions runs. Those rows are taken with SKIP LOCKED, so a fill
never waits on a working-set row that another transaction holds, and several jobs
of one consumer each get a disjoint set.

How a run ends decides where its partitions go, always in the transaction that
writes the end: SUCCEED marks them DONE (the group commit, ``complete`` in
queries.sql, and :meth:`RunRepository.finish_job`); ERROR, STOPPED, DISCARDED and a
rescue after the node died give them back as NEW with ``attempts`` + 1, or FAILED
once ``attempts`` exceeds ``max_retries``; a run this node gives up (shutdown)
gives them back without counting an attempt. :func:`settle` is the one statement
for giving back, and every fill runs it over the consumer's whole working set too,
so no partition stays IN_PROGRESS for a run that has ended, whatever ended it.

Invariant: a partition is IN_PROGRESS for at most one run, and only while that run
is RUNNING; it leaves the working set only with its run's SUCCEED.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, case, delete, exists, func, insert, not_, select, update

from jobserver.api.serialize import time_text
from jobserver.datasets.consumer_spec import ConsumerSpec, check_filter
from jobserver.datasets.feed_read import held_back, read_after
from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.tables import consumers, datasets, partitions, working_sets
from jobserver.exceptions import NotFound
from jobserver.states import State
from jobserver.store.engine import store_now
from jobserver.store.feed import Cursor
from jobserver.store.records import ClaimToken
from jobserver.store.runs import holds
from jobserver.store.tables import AuditEvent, jobs, record_events, steps

NEW, IN_PROGRESS, FAILED, DONE = "NEW", "IN_PROGRESS", "FAILED", "DONE"
#: Partitions one fill skips at most (outside the filter or window) before it stops,
#: so that a transaction over a long stretch of skipped partitions stays short.
MAX_SCAN = 10_000
#: Transactions one start of a run fills in at most before it gives up the start.
MAX_ROUNDS = 20
_CHUNK = 1000


class ConsumeError(Exception):
    """An input that cannot be consumed (its dataset or consumer is gone)."""


@dataclass
class Taken:
    """What a run took at its start: per input (by position) the partitions as
    handed to steps; ``outcome`` is ``run``, ``succeeded`` (nothing to consume, the
    job is SUCCEED), ``waiting`` (nothing to consume, the job is READY again),
    ``more`` (a fill stopped at :data:`MAX_SCAN`: take again in a new transaction),
    ``stopped`` (the run no longer holds the job) or ``failed`` (the job is ERROR:
    ``error`` says why). ``message`` is what the job's audit says of a start that
    consumed nothing."""

    outcome: str
    inputs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    message: str | None = None

    @property
    def count(self) -> int:
        return sum(len(item["partitions"]) for item in self.inputs)


def env_name(dataset_ref: str) -> str:
    """``JOBSERVER_INPUT_<NAME>``: the dataset's name, upper-cased, each character
    that is not a letter or digit as ``_``."""
    name = dataset_ref.rsplit("/", 1)[-1]
    return "JOBSERVER_INPUT_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def split_ref(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.rpartition("/")
    return namespace or "default", name


@dataclass
class Filled:
    """How one fill ended: at the pointer ``cursor``; ``skipped`` partitions it read
    were outside the filter or window; ``more``: it stopped at :data:`MAX_SCAN` with
    partitions after ``cursor`` still to read."""

    dataset: DatasetRecord
    cursor: Cursor
    skipped: int = 0
    more: bool = False


# -- the start of a run ----------------------------------------------------------------
def take_inputs(conn: Connection, token: ClaimToken, inputs: Sequence[dict[str, Any]],
                final: bool = True) -> Taken:
    """Fill and claim for each of ``inputs`` in the caller's write transaction, which
    holds the job (:func:`holds`). Idempotent per run: a run that took partitions
    already (its commit was lost to a store failure) gets the same ones again. Not
    ``final``: an input whose fill stopped at :data:`MAX_SCAN` claims nothing and the
    outcome is ``more`` (commit, then take again). A run that consumes nothing ends
    as its inputs' ``on_empty`` says, its message saying why there was nothing; but
    one whose fill stopped early goes back to READY at once, to read on."""
    if not holds(conn, token):
        return Taken("stopped")
    pairs = [_take(conn, token, item, final) for item in inputs]
    taken, fills = [pair[0] for pair in pairs], [pair[1] for pair in pairs if pair[1]]
    if not final and any(fill.more for fill in fills):
        return Taken("more", taken)
    if any(item["partitions"] for item in taken):
        return Taken("run", taken)
    early = [fill for fill in fills if fill.more]
    if early:
        message = "nothing to consume yet: " + "; ".join(_read_on(fill) for fill in early)
        end_start(conn, token, State.READY, message, 0.0)
        return Taken("waiting", taken, message=message)
    why = "".join(f"; {reason}" for fill in fills
                  if (reason := held_back(conn, fill.dataset, fill.cursor)))
    if any(item.get("on_empty") == "skip" for item in inputs):
        wait = min(float(item.get("wait_seconds", 30.0)) for item in inputs)
        message = "nothing to consume; waiting" + why
        end_start(conn, token, State.READY, message, wait)
        return Taken("waiting", taken, message=message)
    message = "nothing to consume; no step run" + why
    end_start(conn, token, State.SUCCEED, message)
    return Taken("succeeded", taken, message=message)


def _read_on(fill: Filled) -> str:
    return (f"the fill of {fill.dataset.full_name} skipped {fill.skipped} partitions "
            f"outside the consumer's filter or window, up to partition "
            f"{fill.cursor.position}; the next start reads on from there")


def _take(conn: Connection, token: ClaimToken, item: dict[str, Any],
          final: bool) -> tuple[dict[str, Any], Filled | None]:
    namespace, name = split_ref(item["dataset"])
    dataset, consumer = _locked(conn, namespace, name, item["consumer"])
    spec = ConsumerSpec.model_validate(consumer["spec"], strict=False)
    mine = _held(conn, consumer["id"], token)
    filled = None
    if not mine:
        _purge_done(conn, consumer["id"])
        settle(conn, consumer_id=consumer["id"], error="its job ended")
        filled = _fill(conn, dataset, consumer, spec)
        if final or not filled.more:
            limit = min(item.get("limit") or spec.processing_limit, spec.processing_limit)
            mine = _claim(conn, consumer["id"], token, limit, spec.lease_seconds)
    return {"dataset": dataset.full_name, "input": item["dataset"],
            "consumer": consumer["name"], "env": env_name(item["dataset"]),
            "partitions": _handed(conn, dataset, consumer["id"], token) if mine else []
            }, filled


def _locked(conn: Connection, namespace: str, name: str,
            consumer: str) -> tuple[DatasetRecord, Any]:
    row = conn.execute(select(datasets).where(datasets.c.namespace == namespace,
                                              datasets.c.name == name)).mappings().first()
    if row is None:
        raise ConsumeError(f"dataset {namespace}/{name} does not exist")
    dataset = DatasetRecord.from_row(row)
    query = select(consumers).where(consumers.c.dataset_id == dataset.id,
                                    consumers.c.name == consumer)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    found = conn.execute(query).mappings().first()
    if found is None:
        raise ConsumeError(f"dataset {dataset.full_name} has no consumer {consumer!r}")
    return dataset, found


def _held(conn: Connection, consumer_id: int, token: ClaimToken) -> list[int]:
    return list(conn.execute(select(working_sets.c.partition_id).where(
        working_sets.c.consumer_id == consumer_id, working_sets.c.state == IN_PROGRESS,
        working_sets.c.job_id == token.job_id, working_sets.c.job_attempt == token.attempt)
        .order_by(working_sets.c.partition_id)).scalars())


def _purge_done(conn: Connection, consumer_id: int) -> None:
    purged = conn.execute(delete(working_sets).where(
        working_sets.c.consumer_id == consumer_id, working_sets.c.state == DONE)).rowcount
    if purged:
        conn.execute(update(consumers).where(consumers.c.id == consumer_id)
                     .values(processed=consumers.c.processed + purged))


def _fill(conn: Connection, dataset: DatasetRecord, consumer: Any,
          spec: ConsumerSpec) -> Filled:
    """Read partitions after the pointer into the working set as NEW, until it is full,
    the feed has no more, or :data:`MAX_SCAN` partitions were skipped (``more``)."""
    size = conn.execute(select(func.count()).select_from(working_sets).where(
        working_sets.c.consumer_id == consumer["id"],
        working_sets.c.state.in_([NEW, IN_PROGRESS]))).scalar_one()
    room = spec.max_working_set_size - int(size)
    start = Cursor(consumer["pointer_txid"], consumer["pointer_position"])
    filled = Filled(dataset, start)
    if room <= 0:
        return filled
    matches = check_filter(spec, dataset.partition_key).matches
    added: list[int] = []
    while len(added) < room and filled.skipped < MAX_SCAN:
        batch = read_after(conn, dataset, filled.cursor, _CHUNK)
        for partition in batch:
            filled.cursor = partition.cursor
            if spec.in_window(partition.created_at) and matches(partition.columns,
                                                                partition.metadata):
                added.append(partition.id)
                if len(added) == room:
                    break
            else:
                filled.skipped += 1
                if filled.skipped == MAX_SCAN:
                    filled.more = True
                    break
        if len(batch) < _CHUNK:
            break
    cursor = filled.cursor
    if added:
        conn.execute(insert(working_sets).values(
            consumer_id=consumer["id"], state=NEW, attempts=0, added_at=store_now()),
            [{"partition_id": partition_id} for partition_id in added])
    if cursor != start:
        conn.execute(update(consumers).where(consumers.c.id == consumer["id"]).values(
            pointer_txid=cursor.txid, pointer_position=cursor.position))
    return filled


def _claim(conn: Connection, consumer_id: int, token: ClaimToken, limit: int,
           lease_seconds: float) -> list[int]:
    """Mark up to ``limit`` NEW partitions IN_PROGRESS for the run, oldest first, in
    one statement whatever ``limit`` is (no list of ids is sent)."""
    ws = working_sets
    query = (select(ws.c.partition_id)
             .where(ws.c.consumer_id == consumer_id, ws.c.state == NEW)
             .order_by(ws.c.partition_id).limit(limit))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return sorted(conn.execute(update(ws).where(
        ws.c.consumer_id == consumer_id, ws.c.partition_id.in_(query))
        .values(state=IN_PROGRESS, job_id=token.job_id, job_attempt=token.attempt,
                lease_expires_at=store_now(lease_seconds))
        .returning(ws.c.partition_id)).scalars())


def _handed(conn: Connection, dataset: DatasetRecord, consumer_id: int,
            token: ClaimToken) -> list[dict[str, Any]]:
    """The partitions the run holds as steps see them, oldest first."""
    ws = working_sets
    rows = conn.execute(select(partitions, ws.c.attempts)
                        .join(ws, ws.c.partition_id == partitions.c.id)
                        .where(ws.c.consumer_id == consumer_id, ws.c.state == IN_PROGRESS,
                               ws.c.job_id == token.job_id,
                               ws.c.job_attempt == token.attempt)
                        .order_by(partitions.c.id)).mappings().all()
    handed = []
    for row in rows:
        record = PartitionRecord.from_row(row, dataset.partition_key)
        handed.append({"id": record.id, "key": record.key, "location": record.location,
                       "metadata": record.metadata, "created_at": time_text(record.created_at),
                       "failed_attempts": int(row["attempts"])})
    return handed


def end_start(conn: Connection, token: ClaimToken, state: State, message: str,
               wait: float = 0.0) -> None:
    """End a run before its first step ran: SUCCEED (nothing to consume), READY
    again after ``wait`` seconds (nothing yet) or ERROR (``message`` says why). The
    step the claim started goes back to READY."""
    values: dict[str, Any] = {"state": state.value, "updated_at": store_now()}
    if state is State.READY:
        values.update(node=None, not_before=store_now(wait))
    else:
        values.update(finished_at=store_now(),
                      error=message if state is State.ERROR else None)
    conn.execute(update(jobs).where(jobs.c.id == token.job_id).values(**values))
    names = conn.execute(update(steps).where(steps.c.job_id == token.job_id,
                                             steps.c.state == State.RUNNING.value)
                         .values(state=State.READY.value).returning(steps.c.name)).scalars()
    record_events(conn, [AuditEvent.of_run(token, State.RUNNING, State.READY, name,
                                           message=message) for name in names]
                  + [AuditEvent.of_run(token, State.RUNNING, state, message=message)])


# -- the end of a run ------------------------------------------------------------------
def settle(conn: Connection, job_ids: Sequence[int] | None = None,
           consumer_id: int | None = None, error: str | None = None,
           count: bool = True) -> int:
    """Give back partitions IN_PROGRESS for runs that are no longer RUNNING (of
    ``job_ids``, or of one consumer's working set): NEW with ``attempts`` + 1, or
    FAILED past the consumer's ``max_retries`` (``count`` False: NEW, no attempt
    counted). In the caller's transaction, after it wrote the run's end. Returns how
    many were given back."""
    ws = working_sets
    still_running = exists().where(jobs.c.id == ws.c.job_id,
                                   jobs.c.state == State.RUNNING.value,
                                   jobs.c.attempt == ws.c.job_attempt)
    where = [ws.c.state == IN_PROGRESS, not_(still_running)]
    if job_ids is not None:
        if not job_ids:
            return 0
        where.append(ws.c.job_id.in_(list(job_ids)))
    if consumer_id is not None:
        where.append(ws.c.consumer_id == consumer_id)
    retries = (select(consumers.c.spec).where(consumers.c.id == ws.c.consumer_id)
               .scalar_subquery())
    attempts = ws.c.attempts + 1 if count else ws.c.attempts
    max_retries = func.coalesce(_json_int(conn, retries, "max_retries"), 3)
    state: Any = case((attempts > max_retries, FAILED), else_=NEW) if count else NEW
    job_error = (select(jobs.c.error).where(jobs.c.id == ws.c.job_id).scalar_subquery())
    return int(conn.execute(update(ws).where(*where).values(
        state=state, attempts=attempts, job_id=None, job_attempt=None, lease_expires_at=None,
        last_error=func.coalesce(job_error, error, ws.c.last_error))).rowcount)


def _json_int(conn: Connection, document: Any, name: str) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy import Integer, cast, literal_column

        return cast(document.op("->>")(literal_column(f"'{name}'")), Integer)
    return func.json_extract(document, f"$.{name}")


def consumed(conn: Connection, done: Sequence[tuple[int, int]]) -> None:
    """Runs (``(job_id, attempt)``) that just SUCCEEDed: their partitions are DONE,
    in the transaction that wrote the SUCCEED."""
    for job_id, attempt in done:
        conn.execute(update(working_sets).where(
            working_sets.c.job_id == job_id, working_sets.c.job_attempt == attempt,
            working_sets.c.state == IN_PROGRESS).values(state=DONE, lease_expires_at=None))


def lookup(conn: Connection, namespace: str, dataset: str, consumer: str) -> Any:
    """The consumer row, or :class:`NotFound`."""
    row = conn.execute(select(consumers).join(datasets, datasets.c.id == consumers.c.dataset_id)
                       .where(datasets.c.namespace == namespace, datasets.c.name == dataset,
                              consumers.c.name == consumer)).mappings().first()
    if row is None:
        raise NotFound(f"dataset {namespace}/{dataset} has no consumer {consumer!r}",
                       {"field": "consumer", "consumer": consumer})
    return row
