"""Typed accessors of the schedules planner's repositories
(:meth:`jobserver.planners.base.Planner.repositories` says why)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobserver.schedules.catalog import ScheduleCatalog
    from jobserver.store import Store


def schedule_catalog(store: Store) -> ScheduleCatalog:
    """``store.schedules``, typed."""
    return store.schedules
