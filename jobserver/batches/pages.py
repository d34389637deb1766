"""The batches pages: the control table as a grid (system × location rows, business
dates as columns, each cell the stages' statuses) and one batch's runtime audit.

Reads (:mod:`jobserver.batches.page_grid`): the newest 14 distinct business dates
(``DISTINCT … ORDER BY business_date DESC LIMIT``), the batches of those dates (at
most 500) with their stage rows; for a batch, its row, its stage rows and the steps
of its stages' engine jobs by job id. Nothing scans the jobs table.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from flask import render_template, request, url_for
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.api.requests import MAX_ID
from jobserver.batches.page_grid import batch_audit, batch_grid
from jobserver.names import IDENT
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import ui_page
from jobserver.ui.planners import column_groups


def _name(field: str) -> str | None:
    value = request.args.get(field, "").strip()
    return value if re.fullmatch(IDENT, value) else None


def _before() -> date | None:
    try:
        return date.fromisoformat(request.args.get("before", ""))
    except ValueError:
        return None


def _grid() -> dict[str, Any]:
    system, location, before = _name("system"), _name("location"), _before()
    grid = batch_grid(api().store, system, location, before)
    given: dict[str, Any] = {name: value for name, value in
                             (("system", system), ("location", location)) if value}
    return {"grid": grid, "filters": {"system": system, "location": location},
            "groups": column_groups([day.isoformat() for day in grid.dates]),
            "older_url": (url_for("ui.batches", before=grid.older.isoformat(), **given)
                          if grid.older else None),
            "newest_url": url_for("ui.batches", **given) if before else None,
            "live_url": url_for("ui.batches_grid", **given, before=before)}


@blueprint.get("/batches")
@ui_page(READ)
def batches() -> ResponseReturnValue:
    return render_template("ui/batches.html", **_grid())


@blueprint.get("/batches/grid")
@ui_page(READ)
def batches_grid() -> ResponseReturnValue:
    """The grid alone, which the page asks for again every few seconds."""
    return render_template("ui/batches_grid.html", **_grid())


@blueprint.get(f"/batches/<int(max={MAX_ID}):batch_id>")
@ui_page(READ)
def batch(batch_id: int) -> ResponseReturnValue:
    page = batch_audit(api().store, batch_id)
    return render_template("ui/batch.html", batch=page.batch, units=page.units,
                           active_nav="ui.batches")
