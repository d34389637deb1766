"""Live views of the command line: ``jobserver cluster`` and ``jobserver jobs --watch``.

``jobserver cluster`` (without ``--nodes``) prints the cluster as ``GET /api/v1/cluster``
reports it: the mode, the active node, the planner (the node whose planner loops act;
``-`` while none does), the jobs by state, and every node with its role, heartbeat age
and running jobs. With ``--watch`` either view is redrawn every
``--interval`` seconds until Ctrl-C (or ``--count`` frames); a refresh that cannot reach
the API shows the error and tries again at the next tick.
"""

from __future__ import annotations

import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from jobserver.client import ApiError
from jobserver.exceptions import JobServerError

STATES = ("READY", "RUNNING", "SUCCEED", "ERROR", "STOPPED", "DISCARDED")
CLEAR = "\x1b[H\x1b[2J"


def table(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` (the first is the heading) in columns two spaces apart, aligned on a
    terminal: a wide character (CJK, most emoji) takes two columns, a combining mark
    none, and a control character is shown escaped so that it cannot break a row."""
    cells = [[printable(cell) for cell in row] for row in rows]
    widths = [max(width(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(pad(cell, w) for cell, w in zip(row, widths)).rstrip()
                     for row in cells)


def width(text: str) -> int:
    """The columns ``text`` takes on a terminal."""
    return sum(_char_width(char) for char in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0  # combining marks, zero-width joiners and variation selectors
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def pad(text: str, columns: int) -> str:
    """``text`` with spaces after it to fill ``columns``."""
    return text + " " * max(0, columns - width(text))


def clip(text: str, columns: int) -> str:
    """``text`` cut to at most ``columns`` (ending in "…" when cut)."""
    if width(text) <= columns:
        return text
    kept, used = [], 0
    for char in text:
        used += _char_width(char)
        if used > columns - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


def printable(text: str, keep: str = "") -> str:
    """Control characters (a newline, an escape sequence, C1's CSI) as Python escapes,
    but for those in ``keep``: a terminal then shows them and acts on none."""
    return "".join(char.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(char) == "Cc" and char not in keep else char
                   for char in text)


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d"


def moment(text: str | None) -> datetime | None:
    """An API time (ISO 8601, ``Z`` for UTC) as an aware datetime; None for none or
    for text that is not a time."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def ago(text: str | None, now: datetime | None = None) -> str:
    """``3 min ago``, ``12 s ago``, ``2 h ago``, ``4 days ago`` (``in 5 min`` for a time
    ahead); ``-`` for none. What a reader scanning a list wants, not the timestamp."""
    when = moment(text)
    if when is None:
        return "-"
    seconds = ((now or datetime.now(timezone.utc)) - when).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    size = abs(int(seconds))
    words = (f"{size} s" if size < 60 else f"{size // 60} min" if size < 3600
             else f"{size // 3600} h" if size < 48 * 3600 else f"{size // 86400} days")
    return f"{words} ago" if seconds > 0 else f"in {words}"


def took(start: str | None, end: str | None, now: datetime | None = None) -> str:
    """How long from ``start`` to ``end`` (to now while ``end`` is none) as :func:`age`
    writes it; ``-`` before a start."""
    begun = moment(start)
    if begun is None:
        return "-"
    ended = moment(end) or now or datetime.now(timezone.utc)
    return age(max(0.0, (ended - begun).total_seconds()))


def run_time(record: dict[str, Any], now: datetime | None = None) -> str:
    """How long a job or step ran: to now while RUNNING, start to end once it ended
    (a step's own wall time when it has one); ``-`` while it waits to (re)run."""
    if record.get("state") == "RUNNING":
        return took(record.get("started_at"), None, now)
    if record.get("state") == "READY" or not record.get("finished_at"):
        return "-"
    wall = record.get("wall_seconds")
    return age(wall) if isinstance(wall, (int, float)) else took(
        record.get("started_at"), record.get("finished_at"), now)


def cluster_view(cluster: dict[str, Any]) -> str:
    jobs = cluster.get("jobs") or {}
    nodes = cluster.get("nodes") or []
    alive = sum(1 for node in nodes if node.get("alive"))
    header = (f"mode: {cluster.get('mode')}   lock backend: {cluster.get('lock_backend')}   "
              f"active: {cluster.get('active') or '-'}   nodes alive: {alive}/{len(nodes)}")
    if "planner" in cluster:  # a server that names it
        header += f"   planner: {_planner(cluster['planner'])}"
    counts = "jobs:  " + "  ".join(f"{state} {jobs.get(state, 0)}" for state in STATES)
    rows = [("NODE", "ROLE", "STATE", "HEARTBEAT", "RUNNING", "CAPACITY", "HOST", "PID",
             "STARTED")]
    for node in nodes:
        state = "alive" if node.get("alive") else (
            "dead" if node.get("state") == "alive" else node.get("state") or "?")
        rows.append((str(node["id"]), str(node.get("role") or "-"), state,
                     age(node.get("heartbeat_age_seconds")), str(node.get("running", 0)),
                     str(node.get("capacity", "-")), str(node.get("host") or "-"),
                     str(node.get("pid") or "-"), str(node.get("started_at") or "-")))
    body = table(rows) if nodes else "(no node has registered yet)"
    return "\n".join([header, counts, "", body])


def _planner(planner: dict[str, Any] | None) -> str:
    """The planner seat's holder and since when, or ``-`` while nobody holds it."""
    if not planner:
        return "-"
    since = planner.get("since")
    if since:
        try:  # to the second: the banner is one line
            since = datetime.fromisoformat(since).strftime("%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            since = printable(str(since))
    return printable(str(planner.get("node"))) + (f" (since {since})" if since else "")


def jobs_view(page: dict[str, Any], now: datetime | None = None) -> str:
    """The jobs table: DURATION runs from the job's start to its end (to now while it
    runs), SUBMITTED is how long ago it was submitted."""
    rows = [("ID", "NAME", "STATE", "PROGRESS", "ATTEMPT", "NODE", "DURATION", "SUBMITTED")]
    for job in page["jobs"]:
        progress = f"{job['progress']['done']}/{job['progress']['total']}"
        rows.append((str(job["id"]), clip(job["name"], 30), job["state"], progress,
                     str(job["attempt"]), job["node"] or "-",
                     run_time(job, now),
                     ago(job.get("created_at"), now)))
    return table(rows)


def watch(render: Callable[[], str], title: str, interval: float = 2.0,
          count: int | None = None, out: TextIO | None = None) -> int:
    """Redraw ``render()`` every ``interval`` seconds (``count`` times, or until Ctrl-C).

    A frame that cannot reach the API shows the error; an API refusal (a bad token, a
    bad filter) ends the watch with exit code 1 like any client command.
    """
    out = out or sys.stdout
    clear = out.isatty()
    frame = 0
    try:
        while count is None or frame < count:
            if frame:
                time.sleep(interval)
            frame += 1
            try:
                body = render()
            except ApiError:
                raise
            except JobServerError as exc:
                body = f"(refresh failed: {exc.message})"
            stamp = datetime.now().strftime("%H:%M:%S")
            heading = f"Every {interval:g}s: {title}   {stamp}"
            out.write((CLEAR if clear else ("\n" if frame > 1 else "")) + heading + "\n\n"
                      + body + "\n")
            out.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def cluster_command(client: Any, watching: bool, interval: float,
                    count: int | None) -> int:
    render = lambda: cluster_view(client.cluster())  # noqa: E731
    if watching:
        return watch(render, "jobserver cluster", interval, count)
    print(render())
    return 0


def jobs_watch(client: Any, query: dict[str, Any], interval: float,
               count: int | None) -> int:
    return watch(lambda: jobs_view(client.jobs(**query)), "jobserver jobs", interval, count)
