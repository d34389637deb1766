"""The datasets planner's repositories as their own types.

The store hands an installed planner's repositories out by name (``store.datasets``),
typed ``Any`` since the core knows no planner. Planner code reaches them through these
accessors so that its calls are type-checked; they cost one attribute read and import
nothing at run time.
"""

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
