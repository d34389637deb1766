"""What the planners' pages share: the colour family of their own states, and where
a form's "back" may lead.

The families are the dashboard's (:data:`jobserver.ui.pages.STATE_TONES`). A planner's
page module places the states the engine does not have in them with
:func:`add_tones` when it is imported (so that a view partition *transforming* looks
like a job *running* and one *receive* like a job *waiting*); the dashboard itself
knows no planner's states.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from flask import request, url_for

from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import STATE_TONES, safe_next

#: The colour family of a planner's state, by its upper-case name.
_BY_NAME: dict[str, str] = {}
#: The colour family of the members of an enum whose colours its names do not say
#: (a view's *waiting* is in flight, an evaluation's is not), by (type, member).
_BY_MEMBER: dict[tuple[type, Enum], str] = {}


def add_tones(names: Mapping[str, str] | None = None,
              members: Mapping[Enum, str] | None = None) -> None:
    """Give planner states their colour family: ``names`` by upper-case name (any
    state or action of that name), ``members`` for these enum members only, ahead of
    any name. A later call for the same name or member wins."""
    _BY_NAME.update({name.upper(): tone for name, tone in (names or {}).items()})
    _BY_MEMBER.update({(type(member), member): tone
                       for member, tone in (members or {}).items()})


@blueprint.app_template_global("planner_tone")
def planner_tone(state: object) -> str:
    """The colour family of a planner's state, a job state or an action."""
    if isinstance(state, Enum) and (type(state), state) in _BY_MEMBER:
        return _BY_MEMBER[(type(state), state)]
    name = str(getattr(state, "value", state)).upper()
    return _BY_NAME.get(name) or STATE_TONES.get(name, "other")


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
