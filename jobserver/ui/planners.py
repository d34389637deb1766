"""What the planners' pages (schedules, datasets, views, batches) share: the colour
family of their own states, and where a form's "back" may lead.

The families are the dashboard's (:data:`jobserver.ui.pages.STATE_TONES`); the
planners' states that the engine does not have are placed in them here, so that a
view partition *transforming* looks like a job *running* and one *receive* like a job
*waiting*.
"""

from __future__ import annotations

from typing import Any

from flask import request, url_for

from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import STATE_TONES, safe_next
from jobserver.views.model import ViewState

PLANNER_TONES: dict[str, str] = {
    # schedule-jobs and evaluations
    "PENDING_TRIGGER": "waiting", "PENDING_CONSTRAINTS": "waiting",
    "PENDING_LAUNCH": "running", "FIRED": "running", "SKIPPED": "stopped",
    # consumers' working sets
    "NEW": "waiting", "IN_PROGRESS": "running",
    # planned actions
    "TRANSFORM": "running", "JOIN": "running", "SET": "ok", "SKIP": "gone",
    "NO-DATA": "gone",
}
#: A view partition's states: *waiting* is its job waiting for its dependencies' jobs,
#: so it reads as in flight, unlike a schedule's evaluation that waits.
VIEW_TONES: dict[ViewState, str] = {
    ViewState.RECEIVE: "waiting", ViewState.WAITING: "running",
    ViewState.TRANSFORMING: "running", ViewState.RETRYING: "running",
    ViewState.MATERIALIZED: "ok", ViewState.FAILED: "failed", ViewState.NO_DATA: "gone",
}


@blueprint.app_template_global("planner_tone")
def planner_tone(state: object) -> str:
    """The colour family of a planner's state, a job state or an action."""
    if isinstance(state, ViewState):
        return VIEW_TONES[state]
    name = str(getattr(state, "value", state)).upper()
    return PLANNER_TONES.get(name) or STATE_TONES.get(name, "other")


def column_groups(columns: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """A grid's column headings: dates as their day under their month, ("2015-05",
    [("2015-05-03", "03"), …]); other values under no heading, as they are."""
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    for column in columns:
        group, dash, short = column.rpartition("-")
        if not dash or not short.isdigit():
            group, short = "", column
        if not groups or groups[-1][0] != group:
            groups.append((group, []))
        groups[-1][1].append((column, short))
    return groups


def back_to(default_endpoint: str, **values: Any) -> str:
    """Where a form posted from a page returns: its ``back`` field when that is a
    dashboard path, else ``default_endpoint``."""
    return safe_next(request.form.get("back")) or url_for(default_endpoint, **values)
