"""Consumers as a user declares them: parsed strictly, every problem named.

A consumer (:class:`ConsumerSpec`) is named per dataset (``namespace``/``dataset``
plus its own ``name``) and carries CDAP's PartitionConsumer settings:
``max_working_set_size`` (partitions NEW or IN_PROGRESS at once),
``processing_limit`` (partitions one job takes), ``filter`` (the dataset filter
grammar, :mod:`.filters`: partitions that do not match are skipped for good),
``start``/``end`` (only partitions created in ``[start, end)``), ``max_retries``
(failed attempts per partition before it is FAILED: ``max_retries`` + 1 in all) and
``lease_seconds`` (how long a job's claim on its partitions is expected to last;
past it they are listed as overdue). The filter is checked against the dataset's key
by :func:`check_filter`, which needs the stored dataset.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, model_validator

from jobserver.datasets.filters import MAX_CONDITIONS, Filter
from jobserver.datasets.keys import PartitionKey
from jobserver.resources import Ident, Instant, parse_resource
from jobserver.spec import StrictModel, refuse

#: The largest working set a consumer may keep.
MAX_WORKING_SET = 100_000


class ConsumerSpec(StrictModel):
    """A consumer as declared (``kind: Consumer`` or the consumer routes' body)."""

    namespace: Ident = "default"
    dataset: Ident
    name: Ident
    description: Annotated[str, Field(max_length=500, pattern=r"^[^\x00]*$")] | None = None
    max_working_set_size: int = Field(default=1000, ge=1, le=MAX_WORKING_SET)
    processing_limit: int = Field(default=100, ge=1, le=MAX_WORKING_SET)
    filter: list[Annotated[str, Field(max_length=8192)]] = Field(
        default_factory=list, max_length=MAX_CONDITIONS)
    start: Instant | None = None
    end: Instant | None = None
    max_retries: int = Field(default=3, ge=0, le=100)
    lease_seconds: float = Field(default=3600.0, ge=1, le=7 * 86400)

    @model_validator(mode="after")
    def _bounds(self) -> ConsumerSpec:
        problems = []
        if self.processing_limit > self.max_working_set_size:
            problems.append({"field": "processing_limit", "message": (
                f"{self.processing_limit} is above max_working_set_size "
                f"({self.max_working_set_size})")})
        if self.start is not None and self.end is not None and self.end <= self.start:
            problems.append({"field": "end", "message": "must be after start"})
        refuse(problems)
        return self

    @property
    def dataset_name(self) -> str:
        return f"{self.namespace}/{self.dataset}"

    def in_window(self, created_at: datetime) -> bool:
        """Whether a partition created at ``created_at`` is one to consume."""
        return ((self.start is None or created_at >= self.start)
                and (self.end is None or created_at < self.end))


def parse_consumer(body: bytes | str | dict[str, Any]) -> ConsumerSpec:
    """Parse and validate a consumer; :class:`InvalidRequest` names every bad field."""
    return parse_resource(ConsumerSpec, body)


def check_filter(spec: ConsumerSpec, key: PartitionKey) -> Filter:
    """The consumer's filter parsed against its dataset's key; a condition on an
    undeclared field is an :class:`InvalidRequest` naming it (``filter[0]``)."""
    return Filter.parse(spec.filter, key, "filter")
