"""Consumers in the store: declared, changed, deleted, viewed, and their FAILED
partitions retried.

A consumer belongs to a dataset (deleting the dataset deletes its consumers and
their working sets). A new consumer's pointer is the start of the dataset's commit
order: it consumes the partitions already there too, within its ``start``/``end``
window. Changing a consumer's settings keeps its pointer and working set: a new
filter applies to partitions read from then on. The view (:class:`ConsumerView`)
reads the working set's counts by state and the lag:

    lag = NEW + IN_PROGRESS in the working set
          + partitions after the pointer that match the filter and window

(partitions committed after the pointer are counted whether or not a fill could
read them yet; the filter is evaluated in SQL, the same answers as the fill's).
With a ``lag_cap`` (the lists: the dataset page, ``/metrics``, the API's list), only
the first ``lag_cap`` + 1 partitions after the pointer are read, whatever the filter
matches, and the lag counts the matching ones among them: a lower bound, said so by
``lag_capped`` when more lie after the pointer. A pointer that far behind means a
consumer whose fills have not run for that many partitions.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (Connection, FromClause, and_, case, func, insert, select, text,
                        true, tuple_, update)

from jobserver.datasets.catalog import DatasetCatalog
from jobserver.datasets.consumer_spec import ConsumerSpec, check_filter
from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.tables import FEED_ROWS, consumers, partitions, working_sets
from jobserver.spec import refuse
from jobserver.datasets.tables import datasets
from jobserver.datasets.working_set import (DONE, FAILED, IN_PROGRESS, MAX_ROUNDS, NEW,
                                            ConsumeError, Taken, end_start, env_name, lookup,
                                            split_ref, take_inputs)
from jobserver.exceptions import Conflict, ConstraintViolation, NotFound
from jobserver.resources import CREATED, UNCHANGED, digest, plan_put
from jobserver.planners.hooks import Deletion
from jobserver.store import Transactions
from jobserver.states import State
from jobserver.store.engine import store_now
from jobserver.store.records import ClaimToken
from jobserver.store.runs import holds

#: FAILED partitions a view lists at most (all are counted).
MAX_LISTED = 100
#: Partitions after a consumer's pointer a listing of many consumers (the dataset
#: page, the API's list, ``/metrics``) reads at most to count each lag.
LAG_CAP = 1_000


@dataclass
class ConsumerView:
    """A consumer with the state of its working set."""

    dataset: DatasetRecord
    id: int
    spec: ConsumerSpec
    pointer: tuple[int, int]
    counts: dict[str, int]
    processed_total: int
    failed_total: int
    lag: int
    overdue: int
    failed: list[dict[str, Any]] = field(default_factory=list)
    in_progress: list[dict[str, Any]] = field(default_factory=list)
    #: The lag is a lower bound: more partitions after the pointer than were counted.
    lag_capped: bool = False
    #: NEW partitions that have failed before (``attempts`` > 0), with their last error.
    retrying: list[dict[str, Any]] = field(default_factory=list)


class ConsumerCatalog:
    def __init__(self, tx: Transactions, catalog: DatasetCatalog) -> None:
        self._tx = tx
        self._datasets = catalog

    # -- writes -----------------------------------------------------------------------
    def put(self, spec: ConsumerSpec, dry_run: bool = False,
            max_consumers: int | None = None
            ) -> tuple[ConsumerView | None, str, builtins.list[str]]:
        """Create or update the consumer to match ``spec``; ``(view after, change,
        changed fields)``. The filter is checked against the dataset's key first
        (:class:`InvalidRequest` naming ``filter[i]``; nothing stored). A dry run for a
        dataset that does not exist yet says ``created``.

        A new consumer of a dataset that has ``max_consumers`` already is a
        :class:`Conflict` naming ``name`` (a dry run says so too); the count is taken
        under the dataset's lock, so concurrent creations cannot pass it together."""
        document = spec.model_dump(mode="json")
        try:
            with self._tx.read() if dry_run else self._tx.write() as conn:
                if dry_run and self._datasets.find_or_none(conn, spec.namespace,
                                                           spec.dataset) is None:
                    # Its dataset may come with it (one ``apply``): checked then.
                    return None, CREATED, []
                dataset = self._datasets.find(conn, spec.namespace, spec.dataset,
                                              share=True, exclusive=not dry_run)
                check_filter(spec, dataset.partition_key)
                row = self._row(conn, dataset.id, spec.name, lock=not dry_run)
                change, changed = plan_put(row, document, digest(document), None)
                if row is None and max_consumers is not None:
                    _check_room(conn, dataset, max_consumers)
                if dry_run:
                    return (None if row is None else self._view(conn, dataset, row),
                            change, changed)
                _write(conn, dataset, spec.name, row, document, change)
                found = self._row(conn, dataset.id, spec.name, lock=False)
                return self._view(conn, dataset, found), change, changed
        except ConstraintViolation:
            raise Conflict(f"consumer {spec.name} of {spec.dataset_name} was created "
                           "concurrently; try again", {"field": "name"}) from None

    def delete(self, namespace: str, dataset: str, name: str) -> None:
        """Remove the consumer with its working set (its pointer is lost); a
        :class:`Conflict` naming them while another planner's rows name it (a
        schedule's partition trigger, or its template's ``inputs``): the installed
        planners' deletion guards, asked with the dataset's row locked."""
        with self._tx.write() as conn:
            self._datasets.find(conn, namespace, dataset, exclusive=True)
            row = lookup(conn, namespace, dataset, name)
            self._datasets.refuse_deletion(
                conn, Deletion("consumer", namespace, name, parent=dataset))
            conn.execute(consumers.delete().where(consumers.c.id == row["id"]))

    def reset_failed(self, namespace: str, dataset: str, name: str) -> int:
        """Put the consumer's FAILED partitions back to NEW with no failed attempts,
        to be consumed again; returns how many."""
        with self._tx.write() as conn:
            row = lookup(conn, namespace, dataset, name)
            if self._tx.dialect == "postgresql":  # the fills' lock: one at a time
                conn.execute(select(consumers.c.id).where(consumers.c.id == row["id"])
                             .with_for_update())
            moved = conn.execute(update(working_sets).where(
                working_sets.c.consumer_id == row["id"], working_sets.c.state == FAILED)
                .values(state=NEW, attempts=0)).rowcount
            conn.execute(update(consumers).where(consumers.c.id == row["id"]).values(
                failed_reset=consumers.c.failed_reset + moved, updated_at=store_now()))
            return int(moved)

    def take(self, token: ClaimToken, inputs: builtins.list[dict[str, Any]]) -> Taken:
        """The start of a run that declares ``inputs``: fill and claim in one
        transaction (:func:`~jobserver.datasets.working_set.take_inputs`). An input
        whose dataset or consumer is gone ends the run ERROR, naming it. A fill that
        stopped after skipping ``MAX_SCAN`` partitions commits and fills on in a new
        transaction, at most ``MAX_ROUNDS`` of them: none holds the store long."""
        try:
            rounds, taken = MAX_ROUNDS, Taken("more")
            while taken.outcome == "more":
                rounds -= 1
                with self._tx.write() as conn:
                    taken = take_inputs(conn, token, inputs, final=rounds <= 0)
            return taken
        except ConsumeError as exc:
            with self._tx.write() as conn:
                if not holds(conn, token):
                    return Taken("stopped")
                end_start(conn, token, State.ERROR, f"inputs: {exc}")
                return Taken("failed", error=f"inputs: {exc}")

    def check_inputs(self, inputs: builtins.list[Any]) -> None:
        """A job's inputs (``JobSpec.inputs``) against the store: an unknown dataset
        or consumer, a ``limit`` above the consumer's ``processing_limit``, or two
        inputs handed to steps under one name is an :class:`InvalidRequest` naming
        ``inputs[i].<field>``."""
        if not inputs:  # most jobs: no read transaction, a round trip less per submit
            return
        problems: builtins.list[dict[str, str]] = []
        names: dict[str, int] = {}
        with self._tx.read() as conn:
            for index, item in enumerate(inputs):
                problems += self._input_problems(conn, index, item, names)
        refuse(problems)

    def _input_problems(self, conn: Connection, index: int, item: Any,
                        names: dict[str, int]) -> builtins.list[dict[str, str]]:
        where = f"inputs[{index}]"
        env = env_name(item.dataset)
        if env in names:
            return [{"field": f"{where}.dataset", "message": f"handed to steps as {env}, "
                     f"as inputs[{names[env]}] is: one input per dataset name"}]
        names[env] = index
        namespace, dataset = split_ref(item.dataset)
        try:
            row = lookup(conn, namespace, dataset, item.consumer)
        except NotFound:
            exists = conn.execute(select(datasets.c.id).where(
                datasets.c.namespace == namespace, datasets.c.name == dataset)).first()
            field = "consumer" if exists else "dataset"
            return [{"field": f"{where}.{field}", "message": (
                f"dataset {namespace}/{dataset} has no consumer {item.consumer!r}" if exists
                else f"dataset {namespace}/{dataset} does not exist")}]
        limit = int(row["spec"].get("processing_limit", 0))
        if item.limit is not None and item.limit > limit:
            return [{"field": f"{where}.limit", "message": f"{item.limit} is above the "
                     f"consumer's processing_limit ({limit})"}]
        return []

    # -- reads ------------------------------------------------------------------------
    def get(self, namespace: str, dataset: str, name: str) -> ConsumerView:
        with self._tx.read() as conn:
            found = self._datasets.find(conn, namespace, dataset)
            return self._view(conn, found, lookup(conn, namespace, dataset, name))

    def list(self, namespace: str, dataset: str,
             lag_cap: int | None = None) -> builtins.list[ConsumerView]:
        """Every consumer of the dataset, by name, with its state; with ``lag_cap``,
        at most that many partitions after each pointer are counted (the count reads
        each of them), and ``lag_capped`` says when there are more."""
        with self._tx.read() as conn:
            found = self._datasets.find(conn, namespace, dataset)
            rows = conn.execute(select(consumers).where(consumers.c.dataset_id == found.id)
                                .order_by(consumers.c.name)).mappings().all()
            return [self._view(conn, found, row, lag_cap) for row in rows]

    def all(self, lag_cap: int | None = None) -> builtins.list[ConsumerView]:
        """Every consumer of every dataset (for metrics), lags counted as by
        :meth:`list`."""
        with self._tx.read() as conn:
            rows = conn.execute(select(datasets).where(datasets.c.id.in_(
                select(consumers.c.dataset_id)))).mappings().all()
            views = []
            for dataset in (DatasetRecord.from_row(row) for row in rows):
                views += [self._view(conn, dataset, row, lag_cap) for row in conn.execute(
                    select(consumers).where(consumers.c.dataset_id == dataset.id)).mappings()]
            return views

    @staticmethod
    def _row(conn: Connection, dataset_id: int, name: str, lock: bool) -> Any:
        query = select(consumers).where(consumers.c.dataset_id == dataset_id,
                                        consumers.c.name == name)
        if lock and conn.dialect.name == "postgresql":
            query = query.with_for_update()
        return conn.execute(query).mappings().first()

    def _view(self, conn: Connection, dataset: DatasetRecord, row: Any,
              lag_cap: int | None = None) -> ConsumerView:
        spec = ConsumerSpec.model_validate(row["spec"], strict=False)
        ws = working_sets
        counts = {state: 0 for state in (NEW, IN_PROGRESS, FAILED, DONE)}
        counts.update({state: int(n) for state, n in conn.execute(
            select(ws.c.state, func.count()).where(ws.c.consumer_id == row["id"])
            .group_by(ws.c.state))})
        overdue = conn.execute(select(func.count()).select_from(ws).where(
            ws.c.consumer_id == row["id"], ws.c.state == IN_PROGRESS,
            ws.c.lease_expires_at < store_now())).scalar_one()
        pointer = (int(row["pointer_txid"]), int(row["pointer_position"]))
        ahead, capped = self._ahead(conn, dataset, spec, pointer, lag_cap)
        return ConsumerView(
            dataset, int(row["id"]), spec, pointer,
            {state: counts[state] for state in (NEW, IN_PROGRESS, FAILED)},
            int(row["processed"]) + counts[DONE], int(row["failed_reset"]) + counts[FAILED],
            counts[NEW] + counts[IN_PROGRESS] + ahead, int(overdue),
            self._listed(conn, dataset, row["id"], FAILED),
            self._listed(conn, dataset, row["id"], IN_PROGRESS), capped,
            self._listed(conn, dataset, row["id"], NEW))

    @staticmethod
    def _ahead(conn: Connection, dataset: DatasetRecord, spec: ConsumerSpec,
               pointer: tuple[int, int], cap: int | None = None) -> tuple[int, bool]:
        """(partitions after the pointer that match the filter and the window, whether
        more lie there than were read). With ``cap``, the first ``cap`` + 1 partitions
        after the pointer in commit order are read, by the feed's index, and the
        matching ones among them counted (at most ``cap``)."""
        table = partitions
        after: builtins.list[Any] = [table.c.dataset_id == dataset.id]
        if conn.dialect.name == "postgresql":
            after += [text(FEED_ROWS), tuple_(table.c.txid, table.c.id) > tuple_(*pointer)]
            order = [table.c.txid, table.c.id]
        else:
            after.append(table.c.id > pointer[1])
            order = [table.c.id]
        if cap is None:
            where = after + _matching(spec, dataset, table)
            return int(conn.execute(select(func.count()).select_from(table).where(*where))
                       .scalar_one()), False
        window = select(table).where(*after).order_by(*order).limit(cap + 1).subquery()
        matched = func.coalesce(func.sum(case(
            (and_(true(), *_matching(spec, dataset, window)), 1), else_=0)), 0)
        read, found = conn.execute(select(func.count(), matched).select_from(window)).one()
        return min(int(found), cap), int(read) > cap

    @staticmethod
    def _listed(conn: Connection, dataset: DatasetRecord, consumer_id: int,
                state: str) -> builtins.list[dict[str, Any]]:
        """The first :data:`MAX_LISTED` partitions in ``state`` with their failed
        attempts (NEW: only those that failed before)."""
        ws = working_sets
        where = [ws.c.consumer_id == consumer_id, ws.c.state == state]
        if state == NEW:
            where.append(ws.c.attempts > 0)
        rows = conn.execute(select(partitions, ws.c.attempts, ws.c.last_error, ws.c.job_id
                                   .label("holder"), ws.c.job_attempt,
                                   ws.c.lease_expires_at)
                            .join(ws, ws.c.partition_id == partitions.c.id)
                            .where(*where)
                            .order_by(partitions.c.id).limit(MAX_LISTED)).mappings().all()
        listed = []
        for row in rows:
            record = PartitionRecord.from_row(row, dataset.partition_key)
            item: dict[str, Any] = {"id": record.id, "key": record.key,
                                    "attempts": int(row["attempts"])}
            if state in (FAILED, NEW):
                item["last_error"] = row["last_error"]
            else:
                item.update(job_id=row["holder"], job_attempt=row["job_attempt"],
                            lease_expires_at=row["lease_expires_at"])
            listed.append(item)
        return listed


def _write(conn: Connection, dataset: DatasetRecord, name: str, row: Any,
           document: dict[str, Any], change: str) -> None:
    """Insert the consumer (``row`` None: its pointer at the dataset's start) or
    update its settings (its pointer and working set kept)."""
    if row is None:
        conn.execute(insert(consumers).values(
            dataset_id=dataset.id, name=name, spec=document, spec_hash=digest(document),
            pointer_txid=0, pointer_position=0, processed=0, failed_reset=0,
            created_at=store_now(), updated_at=store_now()))
    elif change != UNCHANGED:
        conn.execute(update(consumers).where(consumers.c.id == row["id"]).values(
            spec=document, spec_hash=digest(document), updated_at=store_now()))


def _matching(spec: ConsumerSpec, dataset: DatasetRecord,
              table: FromClause) -> builtins.list[Any]:
    """The consumer's filter and window as conditions on ``table`` (the partitions,
    or a window of them)."""
    where = [*check_filter(spec, dataset.partition_key).sql(table)]
    if spec.start is not None:
        where.append(table.c.created_at >= spec.start)
    if spec.end is not None:
        where.append(table.c.created_at < spec.end)
    return where


def _check_room(conn: Connection, dataset: DatasetRecord, limit: int) -> None:
    """Refuse one more consumer of a dataset that has ``limit`` already: each one's lag
    is counted by every look at the dataset (its page, ``/metrics``)."""
    count = int(conn.execute(select(func.count()).select_from(consumers).where(
        consumers.c.dataset_id == dataset.id)).scalar_one())
    if count >= limit:
        message = (f"dataset {dataset.full_name} has {count} consumers, the most a "
                   f"dataset may have (datasets.max_consumers = {limit}): delete one first")
        raise Conflict(f"name: {message}", [{"field": "name", "message": message,
                                             "limit": limit}])


__all__ = ["CREATED", "ConsumerCatalog", "ConsumerView"]
