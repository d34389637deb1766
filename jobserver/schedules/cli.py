"""``jobserver schedules list|show|enable|disable|delete|jobs|evaluations``.

``jobserver schedules`` without an action lists them, as ``schedules list`` does.
Client commands over the API. A schedule is named ``namespace/name``; a bare ``name``
is in the namespace ``default``. Schedules are created and changed declaratively with
``jobserver apply`` (:mod:`jobserver.apply`): ``kind: Schedule``
(:class:`ScheduleResource`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from jobserver.apply import PutResource
from jobserver.cli.parsing import split_name
from jobserver.cli.views import clip, table
from jobserver.client import Client
from jobserver.schedules.records import SCHEDULE_JOB_STATES

def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``schedules`` and its actions; ``client_options`` adds --url and --token."""
    schedules = sub.add_parser("schedules", help="list, show, enable, disable and delete "
                                                 "schedules (create them with apply)")
    actions = schedules.add_subparsers(dest="schedules_action", metavar="ACTION",
                                       help="what to do (default: list)")
    listing = actions.add_parser("list", help="schedules by namespace and name")
    listing.add_argument("--namespace", help="only schedules in this namespace")
    enabled = listing.add_mutually_exclusive_group()
    enabled.add_argument("--enabled", dest="enabled", action="store_const", const=True,
                         help="only enabled schedules")
    enabled.add_argument("--disabled", dest="enabled", action="store_const", const=False,
                         help="only disabled schedules")
    listing.add_argument("--limit", type=int, default=100, help="at most this many "
                                                                "(default 100)")
    commands = [listing]
    for action, text in (("show", "one schedule as JSON, with its pending schedule-job"),
                         ("enable", "enable: time triggers count from now"),
                         ("disable", "disable: abort what is pending; running jobs go on"),
                         ("delete", "disable, then delete with its history"),
                         ("jobs", "its schedule-jobs, newest first"),
                         ("evaluations", "why it did or did not run, newest first")):
        command = actions.add_parser(action, help=text)
        command.add_argument("schedule", help="NAMESPACE/NAME, or NAME in 'default'")
        commands.append(command)
        if action in ("jobs", "evaluations"):
            command.add_argument("--limit", type=int, default=20,
                                 help="at most this many (default 20)")
        if action == "jobs":
            command.add_argument("--state", choices=SCHEDULE_JOB_STATES,
                                 help="only schedule-jobs in this state")
    for command in [schedules, *commands]:  # `schedules` alone lists them
        client_options(command)
    schedules.set_defaults(run=run, namespace=None, enabled=None, limit=100)


def run(args: argparse.Namespace, client: Client) -> int:
    action = args.schedules_action or "list"
    if action == "list":
        page = client.schedules(namespace=args.namespace, enabled=args.enabled,
                                limit=args.limit)
        print(schedules_view(page["schedules"]))
        return 0
    namespace, name = split_name(args.schedule)
    if action == "show":
        print(json.dumps(client.schedule(namespace, name), indent=2))
    elif action in ("enable", "disable"):
        client.schedule_action(namespace, name, action)
        print(f"schedule {namespace}/{name}: {action}d")
    elif action == "delete":
        client.delete_schedule(namespace, name)
        print(f"schedule {namespace}/{name}: deleted")
    elif action == "jobs":
        page = client.schedule_jobs(namespace, name, state=args.state, limit=args.limit)
        print(schedule_jobs_view(page["schedule_jobs"]))
    else:
        page = client.schedule_evaluations(namespace, name, limit=args.limit)
        print(evaluations_view(page["evaluations"]))
    return 0


def schedules_view(schedules: list[dict[str, Any]]) -> str:
    rows = [("SCHEDULE", "ENABLED", "GEN", "NEXT FIRE", "PENDING", "TRIGGER")]
    for schedule in schedules:
        pending = schedule.get("pending")
        rows.append((f"{schedule['namespace']}/{schedule['name']}",
                     "yes" if schedule["enabled"] else "no", str(schedule["generation"]),
                     schedule.get("next_fire_time") or "-",
                     pending["state"] if pending else "-",
                     _clip(schedule.get("trigger_text") or "?", 60)))
    return table(rows) if schedules else "(no schedules)"


def schedule_jobs_view(jobs: list[dict[str, Any]]) -> str:
    rows = [("ID", "STATE", "FIRE TIME", "JOB", "CREATED", "REASON")]
    for job in jobs:
        rows.append((str(job["id"]), job["state"], job.get("fire_time") or "-",
                     str(job["job_id"]) if job.get("job_id") is not None else "-",
                     job.get("created_at") or "-", _clip(job.get("reason") or "", 60)))
    return table(rows) if jobs else "(no schedule-jobs)"


def evaluations_view(evaluations: list[dict[str, Any]]) -> str:
    rows = [("ID", "AT", "OUTCOME", "FIRE TIME", "REASON")]
    for item in evaluations:
        rows.append((str(item["id"]), item.get("at") or "-", item["outcome"],
                     item.get("fire_time") or "-", _clip(item.get("reason") or "", 80)))
    return table(rows) if evaluations else "(no evaluations)"


def _clip(text: str, width: int) -> str:
    return clip(" ".join(text.split()), width)  # one line per row


class ScheduleResource(PutResource):
    """A ``kind: Schedule`` document: a schedule spec's fields at the top level
    (``namespace`` defaults to ``default``), optionally ``enabled: true|false``, which
    travels in the body (left out: a new schedule is disabled, an existing one keeps
    its flag)."""

    collection, noun = "schedules", "schedule"
