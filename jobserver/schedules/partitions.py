"""Partition triggers: new partitions of a dataset, counted for each schedule.

The evaluator reads new partitions from a :class:`PartitionFeed` (the datasets
package's ``NewPartitions``: commit order, a cursor per dataset saved in the
evaluator's fenced transaction) for the datasets some schedule watches, and hands
each watching schedule the batch; :class:`PartitionCounter` turns a batch into one
notification per partition leaf on that dataset, counting the partitions that match
the leaf's ``filter`` (and those of its ``consumer``: its filter and start/end
window) and were added after the schedule was enabled. A filter that
names a field the dataset's key does not declare makes the schedule unevaluable
(a :class:`~jobserver.exceptions.TriggerError`, recorded as an ``error`` evaluation):
the dataset may have been declared, or changed, after the schedule.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection, select

from jobserver.exceptions import InvalidRequest, TriggerError
from jobserver.schedules.spec import PartitionTrigger, ScheduleSpec, leaves, qualify
from jobserver.schedules.store import Due
from jobserver.schedules.triggers import Notification

#: How many filters (schedule generation, leaf, dataset key) are kept parsed.
FILTER_CACHE = 10_000


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
            conditions, start, end = list(leaf.filter), due.enabled_at, None
            if leaf.consumer is not None:
                taken, start, end = _consumer(conn, dataset, leaf.consumer, due.enabled_at)
                conditions += taken
            matcher = self._filter(due, path, conditions, dataset)
            count = sum(1 for partition in batch.partitions
                        if start <= partition.created_at and (end is None
                                                              or partition.created_at < end)
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


def _consumer(conn: Connection, dataset: Any, name: str,
              enabled_at: datetime) -> tuple[list[str], datetime, datetime | None]:
    """The filter of the consumer ``name`` of ``dataset`` and the window it takes
    partitions from, narrowed to after ``enabled_at``."""
    from jobserver.datasets.consumer_spec import ConsumerSpec
    from jobserver.datasets.tables import consumers

    spec = conn.execute(select(consumers.c.spec).where(
        consumers.c.dataset_id == dataset.id, consumers.c.name == name)).scalar()
    if spec is None:
        raise TriggerError(f"dataset {dataset.full_name} has no consumer {name}",
                           {"dataset": dataset.full_name, "consumer": name})
    consumer = ConsumerSpec.model_validate(spec, strict=False)
    start = max(enabled_at, consumer.start) if consumer.start else enabled_at
    return list(consumer.filter), start, consumer.end
