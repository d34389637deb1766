"""The job page: its step graph, each step's attempts, output, exit code and
measurements, the event trail with its actors, the upstream jobs it waits for, why
a READY job is not running, and the operator actions its state and the visitor's
scopes allow (through :meth:`JobRepository.apply`, as ``POST /api/v1/jobs/<id>/<op>``).

Reads per request: the job with its steps and upstreams (``JobRepository.get``, by
primary key and ``job_id`` indexes), its newest events (at most
:data:`EVENTS_SHOWN`, by ``ix_job_events_job_id_id``) and, for a READY job, the few
short reads of ``not_running``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.jobs import MAX_ID
from jobserver.api.logs import MAX_ATTEMPT, log_response
from jobserver.api.requests import parse_query
from jobserver.exceptions import Conflict
from jobserver.states import Operation, State
from jobserver.store.records import EventRecord, JobRecord
from jobserver.store.tokens import OPERATE, READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.graph import layout
from jobserver.ui.pages import actor, can, ui_action, ui_page

JOB = f"/jobs/<int(max={MAX_ID}):job_id>"
EVENTS_SHOWN = 500
#: What each action's confirmation asks.
CONFIRM = {
    Operation.PAUSE: "Pause job #{id}? A running step is stopped within a second.",
    Operation.RESUME: "Resume job #{id} from its first step that did not succeed?",
    Operation.RERUN: "Rerun job #{id} from scratch? Its steps' logs are deleted.",
    Operation.DISCARD: "Discard job #{id}? It will never run again.",
}
#: What the page says after each action.
DONE = {"pause": "Paused.", "resume": "Resumed: the job is READY again.",
        "rerun": "Rerun: the job is READY and starts from its first step.",
        "discard": "Discarded."}
#: The job states a page goes on refreshing in.
ACTIVE = frozenset({State.READY, State.RUNNING})


@dataclass
class Attempt:
    """One attempt of a step, as its events tell it."""

    number: int
    changes: list[EventRecord] = field(default_factory=list)

    @property
    def started_at(self) -> datetime | None:
        return self.changes[0].at if self.changes else None

    @property
    def outcome(self) -> str | None:
        return self.changes[-1].to_state if self.changes else None


def attempts_by_step(events: list[EventRecord]) -> dict[str, list[Attempt]]:
    """Each step's attempts (those its events name, oldest first)."""
    found: dict[str, dict[int, Attempt]] = defaultdict(dict)
    for event in events:
        if event.step is None or not event.attempt:
            continue
        attempts = found[event.step]
        attempts.setdefault(event.attempt, Attempt(event.attempt)).changes.append(event)
    return {step: [attempts[n] for n in sorted(attempts)] for step, attempts in found.items()}


class LogQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int | None = Field(default=None, ge=1, le=MAX_ATTEMPT)


@blueprint.get(JOB)
@ui_page(READ)
def job(job_id: int) -> ResponseReturnValue:
    done = request.args.get("done")
    return render_template("ui/job.html", done=DONE.get(done or ""), **_context(job_id))


@blueprint.get(f"{JOB}/live")
@ui_page(READ)
def job_live(job_id: int) -> ResponseReturnValue:
    """The page's body, which the page asks for every few seconds while the job may
    change by itself (:func:`_changing`)."""
    return render_template("ui/job_live.html", **_context(job_id))


@blueprint.post(f"{JOB}/<any(pause, resume, rerun, discard):action>")
@ui_action(OPERATE)
def operate(job_id: int, action: str) -> ResponseReturnValue:
    try:
        api().store.jobs.apply(job_id, Operation(action), actor())
    except Conflict as exc:
        return render_template("ui/job.html", refused=exc.message, **_context(job_id)), 409
    return redirect(url_for("ui.job", job_id=job_id, done=action), 303)


@blueprint.get(f"{JOB}/steps/<name>/log")
@ui_page(READ)
def step_log(job_id: int, name: str) -> ResponseReturnValue:
    """A step attempt's whole log as text (the API's log route, by session)."""
    return log_response(api().store, job_id, name, parse_query(LogQuery).attempt)


def actions(job: JobRecord) -> list[tuple[str, str, str]]:
    """``(operation, label, confirmation)`` of each action the job's state and the
    visitor's scopes allow."""
    if not can(OPERATE):
        return []
    return [(op.value, op.value.capitalize(), CONFIRM[op].format(id=job.id))
            for op in Operation if job.state in op.accepted_from]


def _changing(job: JobRecord) -> bool:
    """Whether the job may change without anyone asking: it is READY or RUNNING, or a
    step still runs (a paused job's step is stopped, and recorded so, a moment later)."""
    return job.state in ACTIVE or any(step.state is State.RUNNING for step in job.steps or ())


def _context(job_id: int) -> dict[str, Any]:
    ctx = api()
    job = ctx.store.jobs.get(job_id)
    events = ctx.store.browse.recent_events(job_id, EVENTS_SHOWN)
    not_running = (ctx.store.jobs.not_running(job, ctx.config.scheduler.mode.value,
                                              ctx.config.server.dead_after)
                   if job.state is State.READY else None)
    return {"job": job, "steps": job.steps or [], "graph": layout(job.steps or []),
            "events": events, "events_cut": len(events) == EVENTS_SHOWN,
            "attempts": attempts_by_step(events), "not_running": not_running,
            "actions": actions(job), "active": _changing(job),
            "active_nav": "ui.jobs"}
