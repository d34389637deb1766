"""The views page: the status grid of a pattern (rows: views, columns: days), with
every cell's state, last transformation and the planner's ``--plan`` decision; and
``materialize`` and ``invalidate`` of a pattern, each shown before it runs.

Reads (:mod:`jobserver.views.page_grid`): the definitions (one statement, parsed once
per version by the app's materializer), the stored partitions the pattern addresses
and those they depend on (one statement per view), never the jobs table; a pattern
addressing more than 1,000 partitions is refused by the parser before any is
built. Scopes as the API's: the plan and the run of ``materialize`` need ``submit``,
``invalidate`` needs ``operate``. A refused pattern (malformed, too wide, an unknown
view) answers 422 with the page and the parser's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.exceptions import InvalidRequest
from jobserver.store.tokens import OPERATE, READ, SUBMIT
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import requester, ui_action, ui_page
from jobserver.ui.planners import add_tones, column_groups
from jobserver.views.api import materializer
from jobserver.views.model import Mode, ViewState
from jobserver.views.page_grid import (LISTED, Invalidation, Plan, invalidate, invalidation_of,
                                      materialize, plan_of, view_grid)
from jobserver.views.repos import view_repository
from jobserver.views.spec import load_view

#: Cells a grid also lists as rows of a table, with their reasons in full.
DETAILED = 100
#: Decisions a plan page lists at most (all are counted).
MAX_SHOWN = 500

# A view partition's states: *waiting* is its job waiting for its dependencies' jobs,
# so it reads as in flight, unlike a schedule's evaluation that waits. The planned
# actions by name.
add_tones({"TRANSFORM": "running", "JOIN": "running", "SET": "ok", "SKIP": "gone",
           "NO-DATA": "gone"},
          {ViewState.RECEIVE: "waiting", ViewState.WAITING: "running",
           ViewState.TRANSFORMING: "running", ViewState.RETRYING: "running",
           ViewState.MATERIALIZED: "ok", ViewState.FAILED: "failed",
           ViewState.NO_DATA: "gone"})


def _pattern(source: Mapping[str, str]) -> str:
    return (source.get("pattern") or "").strip()


def _mode(text: str | None) -> Mode:
    try:
        return Mode(text or Mode.DEFAULT.value)
    except ValueError:
        choices = ", ".join(mode.value for mode in Mode)
        raise InvalidRequest(f"mode: {text!r} is not a mode; expected one of {choices}",
                             [{"field": "mode", "message": f"one of {choices}"}]) from None


def _grid(pattern: str) -> dict[str, Any]:
    grid = view_grid(materializer(), api().store, pattern) if pattern else None
    return {"pattern": pattern, "grid": grid, "detailed": DETAILED,
            "groups": column_groups(grid.columns) if grid else []}


@blueprint.get("/views")
@ui_page(READ)
def views() -> ResponseReturnValue:
    found = _grid(_pattern(request.args))
    definitions = [load_view(d.spec) for d in view_repository(api().store).definitions()]
    invalidated = request.args.get("invalidated", "")
    refused = found["grid"] is not None and found["grid"].problem
    return render_template(
        "ui/views.html", definitions=definitions, **found,
        invalidated=int(invalidated) if invalidated.isdigit() else None,
        modes=list(Mode)), 422 if refused else 200


@blueprint.get("/views/grid")
@ui_page(READ)
def views_grid() -> ResponseReturnValue:
    """The grid alone, which the page asks for again every few seconds."""
    found = _grid(_pattern(request.args))
    if found["grid"] is None or found["grid"].problem:
        problem = found["grid"].problem if found["grid"] else "pattern: required"
        return render_template("ui/views_refused.html", problem=problem), 422
    return render_template("ui/views_grid.html", **found)


def _plan_page(plan: Plan | None, pattern: str, mode: Mode, status: int = 200,
               problem: str | None = None, notice: str | None = None,
               jobs: dict[str, int] | None = None) -> ResponseReturnValue:
    return render_template("ui/view_plan.html", plan=plan, pattern=pattern, mode=mode,
                           problem=problem, notice=notice, jobs=jobs, max_shown=MAX_SHOWN,
                           modes=list(Mode), active_nav="ui.views"), status


@blueprint.get("/views/materialize")
@ui_page(SUBMIT)
def views_plan() -> ResponseReturnValue:
    """What materializing the pattern would do, with the button that does it."""
    pattern, mode = _pattern(request.args), _mode(request.args.get("mode"))
    try:
        return _plan_page(plan_of(materializer(), pattern, mode), pattern, mode)
    except InvalidRequest as exc:
        return _plan_page(None, pattern, mode, 422, problem=exc.message)


@blueprint.post("/views/materialize")
@ui_action(SUBMIT)
def views_materialize() -> ResponseReturnValue:
    """Run the plan that was shown; a plan that changed meanwhile is shown again."""
    pattern, mode = _pattern(request.form), _mode(request.form.get("mode"))
    try:
        plan, outcome = materialize(materializer(), pattern, mode,
                                    request.form.get("digest", ""), requester())
    except InvalidRequest as exc:
        return _plan_page(None, pattern, mode, 422, problem=exc.message)
    if outcome is None:
        return _plan_page(plan, pattern, mode, 409, notice=(
            "The plan changed since it was shown (another request or a job moved "
            "things on): this is the plan now. Nothing has run; confirm again to run it."))
    jobs = {address.path: job for address, job in outcome.jobs.items()}
    return _plan_page(plan, pattern, mode, jobs=jobs)


def _invalidation_page(pattern: str, preview: Invalidation | None = None,
                       problem: str | None = None) -> ResponseReturnValue:
    return render_template("ui/view_invalidate.html", preview=preview, pattern=pattern,
                           listed=LISTED, problem=problem,
                           active_nav="ui.views"), 422 if problem else 200


@blueprint.get("/views/invalidate")
@ui_page(OPERATE)
def views_invalidation() -> ResponseReturnValue:
    """What invalidating the pattern would change, with the button that does it."""
    pattern = _pattern(request.args)
    try:
        return _invalidation_page(pattern, invalidation_of(materializer(), api().store,
                                                           pattern))
    except InvalidRequest as exc:
        return _invalidation_page(pattern, problem=exc.message)


@blueprint.post("/views/invalidate")
@ui_action(OPERATE)
def views_invalidate() -> ResponseReturnValue:
    pattern = _pattern(request.form)
    try:
        changed = invalidate(materializer(), api().store, pattern)
    except InvalidRequest as exc:
        return _invalidation_page(pattern, problem=exc.message)
    return redirect(url_for("ui.views", pattern=pattern, invalidated=changed), 303)
