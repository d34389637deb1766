"""The job page: its step graph, each step's attempts, output, exit code and
measurements, the event trail with its actors, the upstream jobs it waits for, why
a READY job is not running, and the operator actions its state and the visitor's
scopes allow (through :meth:`JobRepository.apply`, as ``POST /api/v1/jobs/<id>/<op>``).

Reads per request: the job with its steps and upstreams (``JobRepository.get``, by
primary key and ``job_id`` indexes), its newest events (at most
:data:`EVENTS_SHOWN`, by ``ix_job_events_job_id_id``) and, for a READY job, the few
short reads of ``not_running``, and for each RUNNING step the newest chunks of its
live log (``StepLogRepository.tail``, by the ``step_logs`` primary key): the lines
``jobserver logs`` prints, shown while the step runs with the time it has run.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from markupsafe import Markup, escape
from pydantic import BaseModel, ConfigDict, Field

from jobserver.api import api
from jobserver.api.jobs import MAX_ID
from jobserver.api.logs import MAX_ATTEMPT, log_response
from jobserver.api.requests import parse_query
from jobserver.exceptions import Conflict
from jobserver.exits import exit_code_text
from jobserver.states import Operation, State
from jobserver.store import Store
from jobserver.store.logs import LogKey
from jobserver.store.not_running import NotRunning
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
#: How much of a running step's live log its card shows (its last bytes).
LIVE_TAIL_BYTES = 4096
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

    @property
    def seconds(self) -> float | None:
        """How long the attempt ran, from its start to the state it ended in (None
        while it runs): an earlier attempt's wall time, kept by its events."""
        running = State.RUNNING.value
        start = next((c.at for c in self.changes if c.to_state == running), None)
        end = next((c.at for c in self.changes if c.from_state == running), None)
        return None if start is None or end is None else (end - start).total_seconds()


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


blueprint.add_app_template_filter(exit_code_text, "exit_code")

#: What a why-not-running sentence links: "job 41" to its page, a node to the cluster page.
_MENTION = re.compile(r"\b(job) ([1-9][0-9]{0,18})\b|\b(node) ([^\s,;:()]+)")


def reason_html(not_running: NotRunning) -> Markup:
    """The sentence of :class:`NotRunning`, escaped, with each job it names linked to
    that job's page and each node to the cluster page: the one place the page says
    it (the facts behind it are the API's ``not_running.details``)."""
    text, parts, start = not_running.reason, [], 0
    for match in _MENTION.finditer(text):
        parts.append(escape(text[start:match.start()]))
        if match.group(1):
            href = url_for("ui.job", job_id=int(match.group(2)))
            parts.append(Markup('job <a href="{}" data-blocking-job="{}">{}</a>').format(
                href, match.group(2), match.group(2)))
        else:
            parts.append(Markup('node <a href="{}#node-{}" data-blocking-node="{}">{}</a>')
                         .format(url_for("ui.cluster"), match.group(4), match.group(4),
                                 match.group(4)))
        start = match.end()
    parts.append(escape(text[start:]))
    return Markup("").join(parts)


def live_tails(store: Store, job: JobRecord) -> dict[str, str]:
    """The end of each RUNNING step's live log, by step name: its current attempt's
    last :data:`LIVE_TAIL_BYTES`, from the first whole line on (empty before the
    attempt prints anything). Read from the store, as ``jobserver logs`` reads it, so
    every node shows every step's output a second behind the step."""
    tails = {}
    for step in job.steps or ():
        if step.state is State.RUNNING and step.attempt:
            data = store.step_logs.tail(LogKey(job.id, step.name, step.attempt),
                                        LIVE_TAIL_BYTES)
            if len(data) == LIVE_TAIL_BYTES and b"\n" in data[:-1]:
                data = data[data.index(b"\n") + 1:]
            tails[step.name] = data.decode("utf-8", errors="replace")
    return tails


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
            "not_running_html": reason_html(not_running) if not_running else None,
            "live": live_tails(ctx.store, job), "now": datetime.now(timezone.utc),
            "actions": actions(job), "active": _changing(job),
            "active_nav": "ui.jobs"}
