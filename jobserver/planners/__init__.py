"""The composition root of the planners: which are installed, in which order.

The built-in planners are listed here, and only here; a package adds one of its own
with an entry point in the group :data:`ENTRY_POINT_GROUP` naming a
:class:`~jobserver.planners.base.Planner` subclass::

    [project.entry-points."jobserver.planners"]
    reports = "acme_reports.planner:ReportsPlanner"

Installed planners come in a fixed order (the built-in ones, then the others by
entry-point name), which is the order of their routes, documentation paths and
navigation entries. The interface and its invariants: :mod:`jobserver.planners.base`.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from importlib.metadata import entry_points

from jobserver.exceptions import ConfigError
from jobserver.planners.base import NodeContext, NodeParts, OpenApiPart, Page, Planner, Route

__all__ = ["ENTRY_POINT_GROUP", "BUILT_IN", "NodeContext", "NodeParts", "OpenApiPart", "Page",
           "Planner", "Route", "define_tables", "installed"]

ENTRY_POINT_GROUP = "jobserver.planners"

#: ``module:class`` of each built-in planner, in order.
BUILT_IN: tuple[str, ...] = (
    "jobserver.schedules.plugin:SchedulesPlanner",
    "jobserver.datasets.plugin:DatasetsPlanner",
    "jobserver.views.plugin:ViewsPlanner",
    "jobserver.batches.plugin:BatchesPlanner",
)


@lru_cache(maxsize=1)
def installed() -> tuple[Planner, ...]:
    """Every installed planner, built once per process."""
    classes = [_load(path) for path in BUILT_IN]
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        loaded = entry.load()
        if not (isinstance(loaded, type) and issubclass(loaded, Planner)):
            raise ConfigError(f"entry point {entry.name} = {entry.value} of group "
                              f"{ENTRY_POINT_GROUP} is not a Planner subclass")
        classes.append(loaded)
    planners = tuple(cls() for cls in classes)
    _check_names(planners)
    return planners


def define_tables() -> None:
    """Put every installed planner's tables in the store's metadata (for Alembic's
    comparisons; a :class:`~jobserver.store.Store` does it when built)."""
    for planner in installed():
        planner.define_tables()


def _load(path: str) -> type[Planner]:
    module, _, name = path.partition(":")
    loaded: type[Planner] = getattr(importlib.import_module(module), name)
    return loaded


def _check_names(planners: tuple[Planner, ...]) -> None:
    seen: dict[str, Planner] = {}
    for planner in planners:
        if not planner.name:
            raise ConfigError(f"planner {type(planner).__qualname__} has no name")
        if planner.name in seen:
            raise ConfigError(f"two planners are named {planner.name!r}: "
                              f"{type(seen[planner.name]).__module__} and "
                              f"{type(planner).__module__}")
        seen[planner.name] = planner
