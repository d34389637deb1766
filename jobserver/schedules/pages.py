"""The schedules pages: every schedule with its trigger in words, next fire time and
pending schedule-job; one schedule's constraints, schedule-jobs and evaluations; and
the enabled switch.

Reads (:mod:`jobserver.schedules.page_board`): a page of 50 schedules by their
(namespace, name) index and their pending schedule-jobs; for one schedule its row,
its newest 20 schedule-jobs and evaluations by (schedule_id, id), the states of the
jobs those launched by primary key. The switch is the catalog's enable or disable,
the call the API's ``POST …/enable|disable`` makes, with the API's scope
(``operate``).
"""

from __future__ import annotations

import re

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.schedules.api import NAME_CURSOR
from jobserver.schedules.page_board import schedule_detail, schedule_rows
from jobserver.schedules.repos import schedule_catalog
from jobserver.store.tokens import OPERATE, READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import ui_action, ui_page
from jobserver.ui.planners import add_tones, back_to

SCHEDULE = "/schedules/<namespace>/<name>"

# The states of schedule-jobs and the outcomes of evaluations.
add_tones({"PENDING_TRIGGER": "waiting", "PENDING_CONSTRAINTS": "waiting",
           "PENDING_LAUNCH": "running", "FIRED": "running", "SKIPPED": "stopped"})


def met_words(reason: str | None) -> str:
    """A trigger's explanation as a page shows it: each leaf's ``[x]`` / ``[ ]`` mark
    (the API's and the CLI's form) said in words, "✓ met" / "✗ not met"."""
    return (reason or "").replace(" [x]", " ✓ met").replace(" [ ]", " ✗ not met")


blueprint.add_app_template_filter(met_words, "met_words")


def _after() -> tuple[str, str] | None:
    """The page's start (``?after=namespace/name``); anything else starts at the top."""
    text = request.args.get("after", "")
    if not re.fullmatch(NAME_CURSOR, text):
        return None
    namespace, _, name = text.partition("/")
    return namespace, name


@blueprint.get("/schedules")
@ui_page(READ)
def schedules() -> ResponseReturnValue:
    rows, following = schedule_rows(api().store, after=_after())
    next_url = url_for("ui.schedules", after="/".join(following)) if following else None
    return render_template("ui/schedules.html", rows=rows, next_url=next_url)


@blueprint.get(SCHEDULE)
@ui_page(READ)
def schedule(namespace: str, name: str) -> ResponseReturnValue:
    detail = schedule_detail(api().store, namespace, name)
    return render_template("ui/schedule.html", detail=detail, record=detail.row.record,
                           active_nav="ui.schedules")


@blueprint.get(f"{SCHEDULE}/live")
@ui_page(READ)
def schedule_live(namespace: str, name: str) -> ResponseReturnValue:
    """The page's live part, which the page asks for again every few seconds."""
    detail = schedule_detail(api().store, namespace, name)
    return render_template("ui/schedule_live.html", detail=detail, record=detail.row.record)


@blueprint.post(f"{SCHEDULE}/<any(enable, disable):action>")
@ui_action(OPERATE)
def schedule_switch(namespace: str, name: str, action: str) -> ResponseReturnValue:
    """Enable or disable, then back to the page the switch was on."""
    catalog = schedule_catalog(api().store)
    (catalog.enable if action == "enable" else catalog.disable)(namespace, name)
    return redirect(back_to("ui.schedule", namespace=namespace, name=name), 303)
