"""Typed accessors of the datasets planner's repositories
(:meth:`jobserver.planners.base.Planner.repositories` says why)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobserver.datasets.catalog import DatasetCatalog
    from jobserver.datasets.consumers import ConsumerCatalog
    from jobserver.datasets.partitions import PartitionRepository
    from jobserver.store import Store


def dataset_catalog(store: Store) -> DatasetCatalog:
    """``store.datasets``, typed."""
    return store.datasets


def partition_repository(store: Store) -> PartitionRepository:
    """``store.partitions``, typed."""
    return store.partitions


def consumer_catalog(store: Store) -> ConsumerCatalog:
    """``store.consumers``, typed."""
    return store.consumers
