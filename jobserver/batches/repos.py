"""Typed accessors of the batches planner's repositories
(:meth:`jobserver.planners.base.Planner.repositories` says why)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobserver.batches.audit import BatchAudit
    from jobserver.batches.catalog import BatchConfigCatalog
    from jobserver.batches.store import BatchStore
    from jobserver.store import Store


def batch_config_catalog(store: Store) -> BatchConfigCatalog:
    """``store.batch_configs``, typed."""
    return store.batch_configs


def batch_store(store: Store) -> BatchStore:
    """``store.batches``, typed."""
    return store.batches


def audit_repository(store: Store) -> BatchAudit:
    """``store.batch_audit``, typed."""
    return store.batch_audit
