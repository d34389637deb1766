"""What ``make run``'s demo puts in place once, and how a later start knows it is there.

On the first start on a data directory (or store), :func:`place` submits the example
jobs (``examples/*.json``), applies the example views and datasets with their data
(:mod:`jobserver.demo.views`, :mod:`jobserver.demo.datasets`) and, last, puts the
demo schedule in place, enabled. The schedule is the mark: a start that finds it
(:func:`in_place`) submits nothing and changes nothing the user may have changed
since (a disabled schedule stays disabled, a changed definition stays changed), and
the banner says the demo was already in place. A start stopped before the schedule
was put places the demo again on the next one; the definitions and partitions are
applied idempotently, so only the example jobs can be there twice then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobserver.client import ApiError, Client
from jobserver.demo import datasets as demo_datasets
from jobserver.demo import views as demo_views
from jobserver.demo.examples import EXAMPLES

#: The schedule ``make run`` puts in place beside the example jobs: a job every minute.
DEMO_SCHEDULE: dict[str, Any] = {
    "namespace": "demo", "name": "every-minute",
    "description": "A demo: counts the words of a sentence every minute",
    "trigger": {"type": "time", "cron": "* * * * *"},
    "template": {"name": "demo-scheduled", "steps": [
        {"name": "count", "type": "python", "callable": "demo.count_words",
         "args": {"text": "the server starts this job on its own, every minute"}}]},
}
SCHEDULE_NAME = f"{DEMO_SCHEDULE['namespace']}/{DEMO_SCHEDULE['name']}"


@dataclass
class Placed:
    """What :func:`place` did: the jobs it submitted, its banner lines, and whether
    the demo was there already (then nothing was submitted or changed)."""

    job_ids: list[int] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    already: bool = False


def in_place(client: Client) -> bool:
    """Whether an earlier start put the demo in place: its schedule exists."""
    try:
        client.schedule(DEMO_SCHEDULE["namespace"], DEMO_SCHEDULE["name"])
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def place(client: Client, views_root: Path) -> Placed:
    """Put the demo in place unless it is; see the module's docstring."""
    if in_place(client):
        return Placed(already=True, lines=[
            f"  demo: already in place from an earlier start (schedule {SCHEDULE_NAME} "
            "and the example jobs, views and datasets kept as they are)"])
    ids = [client.submit(path.read_bytes())["id"] for path in sorted(EXAMPLES.glob("*.json"))]
    lines = [f"  demo jobs submitted: {', '.join(map(str, ids))}"]
    lines += demo_views.place(client, views_root)
    lines += demo_datasets.place(client)
    client.put_schedule(DEMO_SCHEDULE["namespace"], DEMO_SCHEDULE["name"],
                        dict(DEMO_SCHEDULE, enabled=True))
    lines.append(f"  demo schedule: {SCHEDULE_NAME} (every minute; .venv/bin/jobserver "
                 f"schedules show {SCHEDULE_NAME})")
    return Placed(job_ids=ids, lines=lines)


def commands(url: str) -> list[str]:
    """What to try with the demo's views and datasets, for the banner."""
    return demo_views.commands(url) + demo_datasets.commands(url)
