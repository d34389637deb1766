"""JSON shapes of the dataset routes' responses (documented in
:mod:`jobserver.datasets.openapi`)."""

from __future__ import annotations

from typing import Any

from jobserver.api.serialize import time_text
from jobserver.datasets.records import DatasetRecord, PartitionRecord


def dataset_json(dataset: DatasetRecord) -> dict[str, Any]:
    return {
        "namespace": dataset.namespace, "name": dataset.name, "id": dataset.id,
        "description": dataset.description, "key": dataset.key,
        "spec": dataset.spec, "spec_hash": dataset.spec_hash,
        "partition_count": dataset.partition_count,
        "created_at": time_text(dataset.created_at), "updated_at": time_text(dataset.updated_at),
    }


def partition_json(partition: PartitionRecord) -> dict[str, Any]:
    return {
        "id": partition.id, "key": partition.key, "location": partition.location,
        "metadata": partition.metadata, "created_at": time_text(partition.created_at),
        "job_id": partition.job_id, "step": partition.step,
    }
