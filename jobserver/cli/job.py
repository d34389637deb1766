"""What ``jobserver job ID`` prints: the job in a few lines (state, node, attempt,
when it was submitted, started and ended, how long it ran, who submitted it, why a
READY job is not running), its steps with their states and durations, its audit
trail with who (or which node) made each change, and its dashboard page.
``--json`` prints the API's JSON instead."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from jobserver.cli.views import ago, clip, moment, printable, run_time, table
from jobserver.exits import exit_code_text

#: Longer event messages (errors, mostly) are cut to this many characters.
MESSAGE_WIDTH = 100


def actor_text(actor: dict[str, Any] | None) -> str:
    """``ci-bot (token 7)``, ``config token #1``, ``schedule default/nightly``; ``-``
    for nobody recorded."""
    if not actor:
        return "-"
    token = actor.get("token_id")
    return f"{actor['name']} (token {token})" if token is not None else actor["name"]


def job_summary(job: dict[str, Any], events: list[dict[str, Any]], url: str,
                now: datetime | None = None) -> str:
    """The whole of ``jobserver job ID``'s answer; ``url``: the API's base, which also
    serves the dashboard."""
    now = now or datetime.now(timezone.utc)
    lines = [f"job {job['id']}: {printable(job['name'])}", *_facts(job, now)]
    if job.get("steps"):
        lines += ["", "steps:", _indent(steps_table(job["steps"], now))]
    lines += ["", f"events ({len(events)}):", events_table(events), "",
              f"dashboard: {url.rstrip('/')}/ui/jobs/{job['id']}"]
    return "\n".join(lines)


def _facts(job: dict[str, Any], now: datetime) -> list[str]:
    """State, times and reasons, one ``label: value`` line each."""
    where = [f"attempt {job['attempt']}"] + ([f"node {job['node']}"] if job.get("node")
                                             else [])
    progress = job.get("progress") or {}
    where.append(f"{progress.get('done', 0)}/{progress.get('total', 0)} steps done")
    facts = [("state", f"{job['state']} ({', '.join(where)})"),
             ("submitted", f"{_when(job.get('created_at'), now)} by "
                           f"{actor_text(job.get('submitted_by'))}")]
    if job.get("not_before") and job["state"] == "READY":
        facts.append(("not before", _when(job["not_before"], now)))
    facts += [("started", _when(job.get("started_at"), now)),
              ("finished", _when(job.get("finished_at"), now) if job["state"] != "RUNNING"
               else "-"),
              ("duration", run_time(job, now) + (" so far" if job["state"] == "RUNNING"
                                                 else ""))]
    if job.get("error"):
        facts.append(("error", _message(job["error"])))
    why = job.get("not_running")
    if why:
        facts.append(("not running", f"{why['reason']} [{why['code']}]"))
    lines = [f"{label + ':':<12} {value}" for label, value in facts]
    if job.get("after"):
        lines.append(waits_for(job))
    return lines


def _when(text: str | None, now: datetime) -> str:
    """``2026-11-29T10:03:12Z (3 min ago)``: to the second, and how long ago."""
    return f"{clock(text)} ({ago(text, now)})" if moment(text) else "-"


def clock(text: str | None) -> str:
    """An API time to the second, in UTC (``2026-11-29T10:03:12Z``); ``-`` for none."""
    when = moment(text)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if when else "-"


def steps_table(steps: list[dict[str, Any]], now: datetime) -> str:
    """One row per step, in the job's order: its state, attempt, how long it ran (so
    far, while RUNNING), its exit code (a signal's named: ``-15 (SIGTERM)``) and its
    error, cut to one line."""
    rows = [("STEP", "STATE", "ATTEMPT", "DURATION", "EXIT", "ERROR")]
    for step in steps:
        code = step.get("exit_code")
        rows.append((clip(step["name"], 40), step["state"], str(step.get("attempt") or "-"),
                     run_time(step, now), exit_code_text(code),
                     _message(step.get("error"))))
    return table(rows)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def waits_for(job: dict[str, Any]) -> str:
    """``waits for: job 41 (done, RUNNING), job 42 (succeeded, SUCCEED, met)``: the
    job's upstreams, what it waits for of each and their states now."""
    parts = [f"job {up['job']} ({up['when']}, {up['state']}{', met' if up['met'] else ''})"
             for up in job["after"]]
    return (f"waits for: {', '.join(parts)}; {job['waiting_on']} not yet met"
            if job["waiting_on"] else f"waited for: {', '.join(parts)}")


def events_table(events: list[dict[str, Any]]) -> str:
    """One line per event, oldest first: when, job or step, the change, by whom (the
    actor; for the engine's own changes, the node with its fence and attempt), and
    the message."""
    rows = [("AT", "WHAT", "CHANGE", "BY", "MESSAGE")]
    for event in events:
        change = (f"{event['from_state']} -> {event['to_state']}" if event["from_state"]
                  else event["to_state"])
        rows.append((clock(event["at"]), f"step {event['step']}" if event["step"] else "job",
                     change, _by(event), _message(event["message"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)),
                                       row[-1]]).rstrip()
                     for row in rows)


def _by(event: dict[str, Any]) -> str:
    if event.get("actor"):
        return actor_text(event["actor"])
    if event["node"]:
        return f"node {event['node']} (fence {event['fence']}, attempt {event['attempt']})"
    return "-"


def _message(message: str | None) -> str:
    text = " ".join((message or "").split())
    return text if len(text) <= MESSAGE_WIDTH else text[:MESSAGE_WIDTH - 1] + "…"
