"""What ``jobserver job ID`` prints after the job's JSON: who submitted it, why a
READY job is not running, and its audit trail with who (or which node) made each
change."""

from __future__ import annotations

from typing import Any

#: Longer event messages (errors, mostly) are cut to this many characters.
MESSAGE_WIDTH = 100


def actor_text(actor: dict[str, Any] | None) -> str:
    """``ci-bot (token 7)``, ``config token #1``, ``schedule default/nightly``; ``-``
    for nobody recorded."""
    if not actor:
        return "-"
    token = actor.get("token_id")
    return f"{actor['name']} (token {token})" if token is not None else actor["name"]


def job_story(job: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """The lines shown below the job's JSON."""
    lines = [f"submitted by: {actor_text(job.get('submitted_by'))}"]
    why = job.get("not_running")
    if why:
        lines.append(f"not running: {why['reason']} [{why['code']}]")
    lines.append(f"events ({len(events)}):")
    lines.append(events_table(events))
    return "\n".join(lines)


def events_table(events: list[dict[str, Any]]) -> str:
    """One line per event, oldest first: when, job or step, the change, by whom (the
    actor; for the engine's own changes, the node with its fence and attempt), and
    the message."""
    rows = [("AT", "WHAT", "CHANGE", "BY", "MESSAGE")]
    for event in events:
        change = (f"{event['from_state']} -> {event['to_state']}" if event["from_state"]
                  else event["to_state"])
        rows.append((event["at"] or "", f"step {event['step']}" if event["step"] else "job",
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
