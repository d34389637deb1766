"""The jobs page: jobs newest first, filtered by state, name (exact, or a part of it in
any case), node and creation time,
paginated by the API's cursor (an id: the next page holds the jobs below it), with
counts by state; its list refreshes itself without reloading the page.

Reads per request (see :mod:`jobserver.store.browse`): one page of jobs by an index
range scan (at most :data:`~jobserver.store.browse.SCAN_WINDOW` jobs examined for the
filters no index serves, and about 40 primary-key probes to turn a time range into
ids), the page's step progress, each state's count up to a cap, and the node ids.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flask import render_template, url_for
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobserver.api import api
from jobserver.api.requests import ID_CURSOR, id_cursor, parse_query
from jobserver.states import State
from jobserver.store.browse import SCAN_WINDOW, JobFilter
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import ui_page

PAGE_SIZE = 50


class JobsQuery(BaseModel):
    """The page's query string; empty form fields count as absent."""

    model_config = ConfigDict(extra="forbid")

    state: State | None = None
    name: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    name_contains: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    node: str | None = Field(default=None, max_length=100, pattern=r"^[^\x00]*$")
    since: datetime | None = None
    until: datetime | None = None
    before: str | None = Field(default=None, pattern=ID_CURSOR)
    limit: int = Field(default=PAGE_SIZE, ge=1, le=200)

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """A time without an offset is UTC (the page's script sends UTC with ``Z``)."""
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value

    def filter(self) -> JobFilter:
        return JobFilter(self.state, self.name, self.node, self.since, self.until,
                         self.name_contains)

    def args(self, **changes: Any) -> dict[str, Any]:
        """The query string of this view with ``changes`` (None drops a parameter)."""
        values: dict[str, Any] = {
            "state": self.state.value if self.state else None, "name": self.name,
            "name_contains": self.name_contains,
            "node": self.node, "since": _iso(self.since), "until": _iso(self.until),
            "limit": None if self.limit == PAGE_SIZE else self.limit}
        values.update(changes)
        return {key: value for key, value in values.items() if value is not None}


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if value else None


@blueprint.get("/jobs")
@ui_page(READ)
def jobs() -> ResponseReturnValue:
    query = parse_query(JobsQuery, blank_is_absent=True)
    return render_template("ui/jobs.html", **_context(query))


@blueprint.get("/jobs/live")
@ui_page(READ)
def jobs_live() -> ResponseReturnValue:
    """The page's list, counts and pager, which the page asks for every few seconds."""
    query = parse_query(JobsQuery, blank_is_absent=True)
    return render_template("ui/jobs_live.html", **_context(query))


def _context(query: JobsQuery) -> dict[str, Any]:
    store = api().store
    page = store.browse.page(query.filter(), query.limit, id_cursor(query.before))
    next_url = (url_for("ui.jobs", **query.args(before=str(page.next_before)))
                if page.next_before else None)
    return {"query": query, "page": page, "counts": store.browse.counts(),
            "states": [state.value for state in State], "next_url": next_url,
            "first_url": url_for("ui.jobs", **query.args()) if query.before else None,
            "live_url": url_for("ui.jobs_live", **query.args(before=query.before)),
            "nodes": [server.id for server in store.servers.list()],
            "filtered": bool(query.args(limit=None)), "scan_window": SCAN_WINDOW}
