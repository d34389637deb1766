"""The schedules planner's repositories as their own types.

The store hands an installed planner's repositories out by name (``store.schedules``),
typed ``Any`` since the core knows no planner. Planner code reaches them through these
accessors so that its calls are type-checked; they cost one attribute read and import
nothing at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobserver.schedules.catalog import ScheduleCatalog
    from jobserver.store import Store


def schedule_catalog(store: Store) -> ScheduleCatalog:
    """``store.schedules``, typed."""
    return store.schedules
