"""Typed accessors of the views planner's repositories
(:meth:`jobserver.planners.base.Planner.repositories` says why)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobserver.store import Store
    from jobserver.views.store import ViewRepository


def view_repository(store: Store) -> ViewRepository:
    """``store.views``, typed."""
    return store.views
