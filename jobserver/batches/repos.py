"""The batches planner's repositories as their own types.

The store hands an installed planner's repositories out by name (``store.batch_configs``),
typed ``Any`` since the core knows no planner. Planner code reaches them through these
accessors so that its calls are type-checked; they cost one attribute read and import
nothing at run time.
"""

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
