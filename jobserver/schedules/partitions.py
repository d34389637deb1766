"""Partition triggers: new partitions of a dataset, counted for each schedule.

The evaluator reads new partitions from a :class:`PartitionFeed` (the datasets
package's ``NewPartitions``: commit order, a cursor per dataset saved in the
evaluator's fenced transaction) for the datasets some schedule watches, and hands
each watching schedule the batch; :class:`PartitionCounter` turns a batch into one
notification per partition leaf on that dataset, counting the partitions that match
the leaf's ``filter`` (and those of its ``consumer``: its filter and start/end
window) and were committed after the schedule was enabled. A filter that
names a field the dataset's key does not declare makes the schedule unevaluable
(a :class:`~jobserver.exceptions.TriggerError`, recorded as an ``error`` evaluation):
the dataset may have been declared again, with another key, after the schedule.

"Committed after the enabling" is decided by the feed's own order, never by clocks:
the transaction that enables a schedule records where the partition feed stood
(:class:`Since`, in the schedule's ``trigger_state``), and a partition counts for it
when that position had not seen it. The evaluator never lets a dataset's cursor pass
such a partition unseen (:func:`start_feeds` and the order of its reads, see
``ScheduleEvaluator._partition_notes``), whatever it was doing when the schedule was
enabled. A schedule enabled before positions were recorded counts the partitions
created at or after its ``enabled_at``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection, func, select

from jobserver.exceptions import InvalidRequest, TriggerError
from jobserver.schedules.spec import PartitionTrigger, ScheduleSpec, leaves, qualify
from jobserver.schedules.store import Due
from jobserver.schedules.tables import schedules, watches
from jobserver.schedules.triggers import Notification
from jobserver.store.feed import Cursor, start_cursor
from jobserver.store.tables import feed_cursors

#: How many filters (schedule generation, leaf, dataset key) are kept parsed.
FILTER_CACHE = 10_000
#: The reader name of the evaluator's ``NewPartitions`` feed: its cursors are the
#: ``feed_cursors`` rows ``<reader>:dataset:<dataset id>`` (jobserver.datasets.feed).
READER = "schedules"
#: The key of a schedule's ``trigger_state`` that holds its :class:`Since`; the
#: others are paths of time trigger leaves ("", "0", "1.0", …), never this.
SINCE = "partitions_since"


@dataclass(frozen=True)
class Since:
    """Where the partition feed stood in the transaction that enabled a schedule:
    the partitions committed after that transaction are those it had not seen.

    PostgreSQL: the snapshot of a statement of the enabling transaction, its
    ``xmax`` and the transactions it saw ``running`` (a partition's ``txid`` is its
    transaction's id): a partition counts when its transaction is one of those or
    began after. SQLite (writers serialised, ids in commit order, ``txid`` 0): the
    newest partition id, ``position``; a partition counts when its id is higher.
    """

    xmax: int = 0
    running: tuple[int, ...] = ()
    position: int = 0

    @classmethod
    def taken(cls, conn: Connection) -> Since:
        """The position now, in the caller's (enabling) transaction."""
        if conn.dialect.name == "postgresql":
            xmax, running = conn.exec_driver_sql(
                "SELECT CAST(CAST(pg_snapshot_xmax(s) AS text) AS bigint), "
                "ARRAY(SELECT CAST(CAST(x AS text) AS bigint) FROM pg_snapshot_xip(s) AS x) "
                "FROM pg_current_snapshot() AS s").one()
            return cls(int(xmax), tuple(sorted(int(x) for x in running or ())))
        from jobserver.datasets.tables import partitions

        newest = conn.execute(select(func.max(partitions.c.id))).scalar()
        return cls(position=int(newest or 0))

    @classmethod
    def of(cls, trigger_state: Mapping[str, Any]) -> Since | None:
        """The schedule's, from its ``trigger_state``; None if it has none."""
        found = trigger_state.get(SINCE)
        if not isinstance(found, dict):
            return None
        return cls(int(found.get("xmax", 0)), tuple(int(x) for x in found.get("running", ())),
                   int(found.get("position", 0)))

    def state(self) -> dict[str, Any]:
        return {"xmax": self.xmax, "running": list(self.running), "position": self.position}

    def counts(self, partition: Any) -> bool:
        """Whether ``partition`` (its ``txid`` and ``id``) was committed after."""
        return partition.txid in self.running or \
            (partition.txid, partition.id) > (self.xmax, self.position)

    @property
    def start(self) -> Cursor:
        """A feed cursor at or before every partition that :meth:`counts`."""
        if self.running:
            return Cursor(self.running[0], 0)
        return Cursor(self.xmax, self.position)


def since_state(conn: Connection, spec: ScheduleSpec) -> dict[str, Any]:
    """The ``trigger_state`` a schedule starts with when it is enabled (created
    enabled, enabled, or updated while enabled) in ``conn``: where its partition
    triggers start counting, if it has any."""
    if not any(isinstance(leaf, PartitionTrigger) for _path, leaf in leaves(spec.trigger)):
        return {}
    return {SINCE: Since.taken(conn).state()}


def cursor_name(dataset_id: int) -> str:
    return f"{READER}:dataset:{dataset_id}"


def start_feeds(conn: Connection, names: set[str]) -> None:
    """Give each dataset of ``names`` ("namespace/name") whose feed cursor does not
    exist yet one at the earliest :attr:`Since.start` of the enabled schedules that
    watch it, so that the feed's first read of it starts there rather than at what it
    holds by then (a dataset first watched, or declared again, while its partitions
    came). With no such schedule the feed's own start (after what exists) is kept."""
    missing = _without_cursor(conn, names)
    if not missing:
        return
    starts: dict[str, Cursor] = {}
    for target, state in conn.execute(
            select(watches.c.target, schedules.c.trigger_state)
            .join(schedules, schedules.c.id == watches.c.schedule_id)
            .where(watches.c.kind == "dataset", watches.c.target.in_(list(missing)),
                   schedules.c.enabled)):
        since = Since.of(state or {})
        if since is not None:
            starts[target] = min(starts.get(target, since.start), since.start)
    for target, start in starts.items():
        start_cursor(conn, missing[target], functools.partial(_at, start))


def _without_cursor(conn: Connection, names: set[str]) -> dict[str, str]:
    """The datasets of ``names`` that exist and have no feed cursor yet: the name of
    the cursor each would have, by "namespace/name"."""
    from jobserver.datasets.tables import datasets

    found = {f"{row.namespace}/{row.name}": cursor_name(row.id) for row in conn.execute(
        select(datasets.c.id, datasets.c.namespace, datasets.c.name).where(
            datasets.c.name.in_({name.partition("/")[2] for name in names})))
        if f"{row.namespace}/{row.name}" in names}
    if not found:
        return {}
    have = set(conn.execute(select(feed_cursors.c.name).where(
        feed_cursors.c.name.in_(list(found.values())))).scalars())
    return {target: name for target, name in found.items() if name not in have}


def _at(cursor: Cursor, _conn: Connection) -> Cursor:
    return cursor


class PartitionFeed(Protocol):
    """A source of new partitions: what was added to each dataset of ``names``
    ("namespace/name") since its own cursor, in commit order, the cursor saved in
    ``conn`` (the evaluator's fenced transaction). Each item has a ``dataset``
    (with ``full_name``, ``id``, ``spec_hash`` and ``partition_key``) and its new
    ``partitions`` (with ``columns``, ``metadata`` and ``created_at``)."""

    def read(self, conn: Connection, limit: int, names: set[str]) -> list[Any]:
        """The new partitions of each dataset of ``names`` that has any."""


class PartitionCounter:
    """Notifications of a schedule's partition leaves for one batch of new
    partitions, with each leaf's filter parsed once per dataset key."""

    def __init__(self) -> None:
        self._filters: dict[tuple[Any, ...], Any] = {}

    def notes(self, conn: Connection, spec: ScheduleSpec, due: Due, batch: Any,
              now: datetime) -> list[Notification]:
        found = []
        dataset = batch.dataset
        for path, leaf in leaves(spec.trigger):
            if not isinstance(leaf, PartitionTrigger) or \
                    qualify(leaf.dataset, due.namespace) != dataset.full_name:
                continue
            conditions, start, end = list(leaf.filter), None, None
            if leaf.consumer is not None:
                taken, start, end = _consumer(conn, dataset, leaf.consumer)
                conditions += taken
            matcher = self._filter(due, path, conditions, dataset)
            new = _new_to(due)
            count = sum(1 for partition in batch.partitions
                        if new(partition)
                        and (start is None or start <= partition.created_at)
                        and (end is None or partition.created_at < end)
                        and (matcher is None
                             or matcher.matches(partition.columns, partition.metadata)))
            if count:
                found.append(Notification(part=path, kind="partition", at=now, count=count))
        return found

    def _filter(self, due: Due, path: str, conditions: list[str], dataset: Any) -> Any:
        """``conditions`` bound to the dataset's key (None: no conditions)."""
        if not conditions:
            return None
        key = (due.id, due.generation, path, dataset.id, dataset.spec_hash, tuple(conditions))
        if key not in self._filters:
            from jobserver.datasets.filters import Filter

            if len(self._filters) >= FILTER_CACHE:
                self._filters.clear()
            where = f"trigger{'.' + path if path else ''}.filter"
            try:
                self._filters[key] = Filter.parse(conditions, dataset.partition_key, where)
            except InvalidRequest as exc:
                raise TriggerError(f"{exc.message} (dataset {dataset.full_name})",
                                   {"dataset": dataset.full_name}) from None
        return self._filters[key]


def _new_to(due: Due) -> Callable[[Any], bool]:
    """Whether a partition was committed after ``due`` was enabled (see
    :class:`Since`); for a schedule enabled before that was recorded, whether it was
    created at or after its ``enabled_at``."""
    since = Since.of(due.trigger_state)
    if since is not None:
        return since.counts
    return lambda partition: due.enabled_at <= partition.created_at


def _consumer(conn: Connection, dataset: Any,
              name: str) -> tuple[list[str], datetime | None, datetime | None]:
    """The filter of the consumer ``name`` of ``dataset`` and the window it takes
    partitions from."""
    from jobserver.datasets.consumer_spec import ConsumerSpec
    from jobserver.datasets.tables import consumers

    spec = conn.execute(select(consumers.c.spec).where(
        consumers.c.dataset_id == dataset.id, consumers.c.name == name)).scalar()
    if spec is None:
        raise TriggerError(f"dataset {dataset.full_name} has no consumer {name}",
                           {"dataset": dataset.full_name, "consumer": name})
    consumer = ConsumerSpec.model_validate(spec, strict=False)
    return list(consumer.filter), consumer.start, consumer.end
