"""Partitions that job steps add: a shell step writes them, one JSON object a line, to
the file named by ``JOBSERVER_PARTITIONS_OUT``; a python step returns them in a
:class:`~jobserver.steps.StepResult`. Each is ``{"dataset": "ns/name" or "name" (in
``default``), "key": {...}, "location": ..., "metadata": {...}}``.

They are added when the step has succeeded, before its SUCCEED is written, in one
transaction that first checks that the step's run still holds its job (a run fenced
off adds nothing). They are checked as an API batch is; a partition that does not fit
its dataset, a dataset that does not exist or a key the dataset holds already fails
the step (not retried: the same output would fail again) and adds nothing. A key that
the same job's same step added before is skipped: a step run again after its node
died, or a rerun of the job, finds its own partitions.

The engine reaches them through the planner seam only: :class:`PartitionOutputs` is
the datasets planner's :class:`~jobserver.planners.hooks.JobOutputs`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jobserver.datasets.partitions import Producer
from jobserver.datasets.records import DatasetRecord
from jobserver.datasets.repos import dataset_catalog, partition_repository
from jobserver.datasets.spec import MAX_BATCH, NewPartition, check_partition
from jobserver.exceptions import Conflict, InvalidRequest, NotFound
from jobserver.names import IDENT
from jobserver.planners.hooks import OutputRefused
from jobserver.store import Store
from jobserver.store.records import ClaimToken
from jobserver.store.runs import holds

ENV = "JOBSERVER_PARTITIONS_OUT"
#: The largest partitions file a shell step may write.
MAX_FILE_BYTES = 32 * 1024 * 1024
_REF = re.compile(rf"(?:(?P<namespace>{IDENT})/)?(?P<name>{IDENT})")


class OutputError(OutputRefused):
    """Step output that cannot be added; the message says which partition and why."""


class PartitionOutputs:
    """Steps output partitions (:class:`~jobserver.planners.hooks.JobOutputs`): a shell
    step writes them to the file :data:`ENV` names, and :func:`add_outputs` adds them
    to ``store``."""

    env = ENV

    def __init__(self, store: Store) -> None:
        self._store = store

    @staticmethod
    def read(path: Path) -> list[Any]:
        """:func:`read_file`."""
        return read_file(path)

    def add(self, token: ClaimToken, step: str, items: list[Any]) -> int:
        """:func:`add_outputs` to this store."""
        return add_outputs(self._store, token, step, items)


def read_file(path: Path) -> list[Any]:
    """The partitions a shell step wrote (none if it wrote no file);
    :class:`OutputError` for a file that is not JSON lines of objects."""
    if not path.exists():
        return []
    with path.open("rb") as stream:
        raw = stream.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise OutputError(f"{ENV}: larger than {MAX_FILE_BYTES} bytes")
    items = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError:
            raise OutputError(f"{ENV} line {number}: not valid JSON") from None
    return items


def add_outputs(store: Store, token: ClaimToken, step: str, items: list[Any]) -> int:
    """Add the partitions of one successful step attempt; returns how many were new.
    :class:`OutputError` when they cannot be (nothing is added); ``FencedOff`` when
    the run no longer holds the job."""
    if len(items) > MAX_BATCH:
        raise OutputError(f"{len(items)} partitions; a step may add at most {MAX_BATCH}")
    groups = _checked(store, items)
    producer = Producer(token.job_id, step)
    try:
        with store.tx.write() as conn:
            if not holds(conn, token):
                return 0  # an operator stopped the job: its step's SUCCEED is dropped too
            partitions = partition_repository(store)
            return sum(partitions.add_checked(conn, dataset, batch, producer=producer,
                                              where="").added
                       for dataset, batch in groups)
    except (InvalidRequest, NotFound, Conflict) as exc:
        raise OutputError(f"partition output: {exc.message}") from None


def _checked(store: Store, items: list[Any]) -> list[tuple[DatasetRecord, list[NewPartition]]]:
    """Each dataset with its partitions, checked; the first problem is an error
    naming the partition by its position (#1 is the first line or item)."""
    datasets: dict[tuple[str, str], DatasetRecord] = {}
    groups: dict[tuple[str, str], list[NewPartition]] = {}
    seen: set[tuple[tuple[str, str], tuple[str, ...]]] = set()
    for number, item in enumerate(items, 1):
        where = f"partition output #{number}"
        if not isinstance(item, dict):
            raise OutputError(f"{where}: expected a JSON object")
        ref = _REF.fullmatch(item.get("dataset") or "") \
            if isinstance(item.get("dataset"), str) else None
        if ref is None:
            raise OutputError(f"{where}: dataset: expected 'namespace/name' or 'name'")
        name = (ref["namespace"] or "default", ref["name"])
        if name not in datasets:
            try:
                with store.tx.read() as conn:
                    datasets[name] = dataset_catalog(store).find(conn, *name)
            except NotFound as exc:
                raise OutputError(f"{where}: {exc.message}") from None
        body = {field: value for field, value in item.items() if field != "dataset"}
        partition, problems = check_partition(body, datasets[name].partition_key)
        if partition is None:
            raise OutputError(f"{where}: {problems[0]['field']}: {problems[0]['message']}")
        if (name, partition.columns) in seen:
            raise OutputError(f"{where}: the same key as an earlier partition")
        seen.add((name, partition.columns))
        groups.setdefault(name, []).append(partition)
    return [(datasets[name], batch) for name, batch in groups.items()]
