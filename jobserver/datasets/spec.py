"""Datasets and partitions as a user writes them: parsed strictly, every problem named.

A dataset (:class:`DatasetSpec`) is a name in a namespace, a partition key (ordered
typed fields, :mod:`.keys`) and a description. A partition (:class:`NewPartition`)
is a value for every key field, a location and a small metadata object; it is
checked against its dataset's key by :func:`check_partitions`, which reports every
problem with its path (``partitions[3].key.date``) so that a batch is refused whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from jobserver.datasets.keys import FIELD_NAME, MAX_FIELDS, FieldType, PartitionKey
# MAX_BATCH (partitions in one request) is defined where the CLI reads it light.
from jobserver.datasets.limits import MAX_BATCH
from jobserver.resources import NamespacedSpec, parse_resource
from jobserver.spec import StrictModel

#: A partition's location: its UTF-8 size at most.
MAX_LOCATION_BYTES = 4096
#: A partition's metadata: its compact JSON size at most.
MAX_METADATA_BYTES = 4096


class KeyFieldSpec(StrictModel):
    """One field of a partition key."""

    name: Annotated[str, StringConstraints(pattern=f"^{FIELD_NAME}$")]
    type: FieldType


class DatasetSpec(NamespacedSpec):
    """A dataset as declared: ``key`` is its partition key's fields, in order."""

    description: Annotated[str, StringConstraints(max_length=500,
                                                  pattern=r"^[^\x00]*$")] | None = None
    key: list[KeyFieldSpec] = Field(min_length=1, max_length=MAX_FIELDS)

    @field_validator("key")
    @classmethod
    def _unique_names(cls, value: list[KeyFieldSpec]) -> list[KeyFieldSpec]:
        names = [item.name for item in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"field {repeated[0]!r} is declared twice")
        return value

    @property
    def partition_key(self) -> PartitionKey:
        return PartitionKey.of([item.model_dump() for item in self.key])


def parse_dataset(body: bytes | str | dict[str, Any]) -> DatasetSpec:
    """Parse and validate a dataset; :class:`InvalidRequest` names every bad field."""
    return parse_resource(DatasetSpec, body)


@dataclass(frozen=True)
class NewPartition:
    """A checked partition on its way into the store: its key columns' texts
    (:meth:`PartitionKey.columns`), location and metadata."""

    columns: tuple[str, ...]
    location: str
    metadata: dict[str, Any] = field(default_factory=dict)


def check_partitions(items: list[Any], key: PartitionKey, where: str = "partitions",
                     ) -> tuple[list[NewPartition], list[dict[str, str]]]:
    """Check each of ``items`` (``{"key", "location", "metadata"}`` objects) against
    ``key``; returns the partitions and the problems, each naming its field
    (``<where>[i].key.date``). A key given twice in ``items`` is a problem too."""
    found: list[NewPartition] = []
    problems: list[dict[str, str]] = []
    first_of: dict[tuple[str, ...], int] = {}
    for index, item in enumerate(items):
        path = f"{where}[{index}]" if where else ""
        partition, trouble = check_partition(item, key, path)
        problems += trouble
        if partition is None:
            continue
        if partition.columns in first_of:
            problems.append({"field": _join(path, "key"), "message": "the same key as "
                             f"{where}[{first_of[partition.columns]}]"})
            continue
        first_of[partition.columns] = index
        found.append(partition)
    return found, problems


def check_partition(item: Any, key: PartitionKey,
                    path: str = "") -> tuple[NewPartition | None, list[dict[str, str]]]:
    """One partition object; ``path`` prefixes the fields in the problems."""
    if not isinstance(item, dict):
        return None, [{"field": path or "body", "message": "expected a partition object "
                                                           "{key, location, metadata}"}]
    problems = [] if item.keys() <= _PARTITION_FIELDS else [
        {"field": _join(path, name), "message": "unknown field"}
        for name in item if name not in _PARTITION_FIELDS]
    typed, trouble = key.check(item.get("key"), _join(path, "key"))
    problems += trouble
    location = item.get("location")
    if not isinstance(location, str) or not location or "\x00" in location:
        problems.append({"field": _join(path, "location"),
                         "message": "required: a non-empty string without NUL"})
    elif len(location.encode()) > MAX_LOCATION_BYTES:
        problems.append({"field": _join(path, "location"), "message": (
            f"{len(location.encode())} bytes; at most {MAX_LOCATION_BYTES} are allowed")})
    metadata = item.get("metadata", {})
    problem = _metadata_problem(metadata)
    if problem:
        problems.append({"field": _join(path, "metadata"), "message": problem})
    if problems:
        return None, problems
    return NewPartition(key.columns(typed), location, metadata), []  # type: ignore[arg-type]


_PARTITION_FIELDS = frozenset({"key", "location", "metadata"})


def _metadata_problem(metadata: Any) -> str | None:
    if not isinstance(metadata, dict):
        return "expected a JSON object"
    if not metadata:
        return None
    try:
        text = json.dumps(metadata, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return "not JSON (NaN and Infinity are not JSON numbers)"
    if "\\u0000" in text:
        return "a NUL character (\\u0000) cannot be stored"
    if len(text.encode()) > MAX_METADATA_BYTES:
        return f"{len(text.encode())} bytes of JSON; at most {MAX_METADATA_BYTES} are allowed"
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
