"""``jobserver batch run|status|audit``: client commands over the batch API
(``jobserver batch`` alone shows the control table, as ``batch status`` does).

``batch run`` asks the cluster to run a system's stage (or every stage) for its new
business dates and waits, printing each stage of its plan as it starts and as it ends,
in order: every one, also a stage that started and ended between two polls. Exit codes:
0 the run succeeded (or had nothing to do), 2 bad input (unknown system, location or
stage, a stage not mapped to the system, a business date after the watermark: nothing
was stored), 3 a stage FAILED (the run stopped there; running ``batch run`` again
reruns it), 1 another error of the API. With ``--no-wait`` it exits 0 once the run is
planned. SIGTERM or Ctrl-C stops the waiting only (exit 143 or 130): the run goes on in
the cluster — the tracker, not this command, moves it on and sets the stages' statuses
from their engine jobs, so killing this command never leaves a stage RUNNING for ever.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from datetime import date
from typing import Any

from jobserver.apply import DocumentResource, checked_name
from jobserver.cli.views import table
from jobserver.client import ApiError, Client
from jobserver.exceptions import ConfigError

EXIT_OK, EXIT_API, EXIT_BAD_INPUT, EXIT_FAILED = 0, 1, 2, 3
EXIT_SIGTERM, EXIT_INTERRUPT = 143, 130
STATUSES = ("NOT_STARTED", "RUNNING", "SUCCESS", "FAILED")
AUDIT_STATUSES = STATUSES + ("STOPPED", "DISCARDED")


def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    batch = sub.add_parser("batch", help="run batches; show the control table and the "
                                         "runtime audit (configs: apply kind BatchConfig)")
    actions = batch.add_subparsers(dest="batch_action", metavar="ACTION",
                                   help="run, status or audit (default: status)")
    start = actions.add_parser("run", help="run a system's stage for its new business "
                                           "dates and wait (exit 0 success, 2 bad input, "
                                           "3 failed)")
    _filters(start, required=True)
    start.add_argument("--stage", help="the stage (default: every stage of the system)")
    start.add_argument("--context", action="append", default=[], metavar="NAME=VALUE",
                       help="a context value of the run; repeat for more")
    start.add_argument("--business-date", type=_date, help="run this business date only")
    start.add_argument("--watermark", type=_date,
                       help="the source's newest business date (systems with watermark "
                            "{given: true})")
    start.add_argument("--no-wait", action="store_true", help="exit once the run is planned")
    start.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    status = actions.add_parser("status", help="the control table, newest first")
    audit = actions.add_parser("audit", help="the runtime audit: a row per batch, per launch "
                                             "of a stage (a failed one stays after its "
                                             "rerun) and per job of a launch")
    for command in (status, audit):
        _filters(command, required=False)
        command.add_argument("--from", dest="since", type=_date, metavar="DATE",
                             help="business dates from this one (YYYY-MM-DD)")
        command.add_argument("--to", dest="until", type=_date, metavar="DATE",
                             help="business dates up to this one (YYYY-MM-DD)")
        command.add_argument("--limit", type=int, default=50,
                             help="at most this many rows (default 50)")
    status.add_argument("--status", choices=STATUSES, help="only batches with this status")
    audit.add_argument("--stage", help="only this stage's rows")
    audit.add_argument("--status", choices=AUDIT_STATUSES, help="only rows with this status")
    audit.add_argument("--work-unit", choices=("batch", "stage", "job"),
                       help="only rows of this kind")
    for command in (batch, start, status, audit):  # `batch` alone: the control table
        client_options(command)
    batch.set_defaults(run=run, system=None, location=None, since=None, until=None,
                       limit=50, status=None)


def _filters(command: argparse.ArgumentParser, required: bool) -> None:
    which = "the" if required else "only this"
    command.add_argument("--system", required=required, help=f"{which} system")
    command.add_argument("--location", required=required, help=f"{which} location")


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def context_of(pairs: list[str]) -> dict[str, str]:
    context = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name or not value:
            raise ConfigError(f"--context {pair!r}: expected NAME=VALUE")
        context[name] = value
    return context


def run(args: argparse.Namespace, client: Client) -> int:
    if args.batch_action == "run":
        return run_command(args, client)
    query = {"system": args.system, "location": args.location, "from": args.since,
             "to": args.until, "limit": args.limit}
    if args.batch_action in ("status", None):
        page = client.request("GET", "/api/v1/batches", query=dict(query, status=args.status))
        print(batches_view(page["batches"]))
    else:
        page = client.request("GET", "/api/v1/batches/audit", query=dict(
            query, stage=args.stage, work_unit=args.work_unit, status=args.status))
        print(audit_view(page["audit"]))
    return EXIT_OK


def run_command(args: argparse.Namespace, client: Client) -> int:
    body = {"system": args.system, "location": args.location, "stage": args.stage,
            "context": context_of(args.context),
            "business_date": args.business_date.isoformat() if args.business_date else None,
            "watermark": args.watermark.isoformat() if args.watermark else None}
    try:
        planned = client.request("POST", "/api/v1/batches/run", body)
    except ApiError as exc:
        if exc.status not in (400, 422):
            raise
        print(f"jobserver: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if planned["status"] == "NOTHING":
        print(planned["message"])
        return EXIT_OK
    print(f"batch run {planned['id']}: {len(planned['plan'])} stage run(s) planned")
    if args.no_wait:
        return EXIT_OK
    return _wait(client, planned, args.interval)


class _Terminated(Exception):
    pass


def _terminated(_signum: int, _frame: object) -> None:
    raise _Terminated


def _wait(client: Client, run: dict[str, Any], interval: float) -> int:
    """Poll the run until it ends, printing what moved since the last poll."""
    previous = signal.signal(signal.SIGTERM, _terminated)
    shown: dict[int, int] = {}
    try:
        while True:
            _show(run, shown)
            if run["status"] != "RUNNING":
                return _ended(run)
            time.sleep(interval)
            run = client.request("GET", f"/api/v1/batches/runs/{run['id']}")
    except (_Terminated, KeyboardInterrupt) as exc:
        print(f"stopped waiting; batch run {run['id']} goes on in the cluster "
              f"(jobserver batch status --system {run['system']})", file=sys.stderr)
        return EXIT_SIGTERM if isinstance(exc, _Terminated) else EXIT_INTERRUPT
    finally:
        signal.signal(signal.SIGTERM, previous)


def _show(run: dict[str, Any], shown: dict[int, int]) -> None:
    """Print each plan item's steps not printed yet (``shown``: index -> how many), in
    plan order. The tracker moves a run past an item only once its stage is SUCCESS, so
    every item before ``position`` ran and succeeded, however fast: it is printed
    ``running`` then ``SUCCESS``, even when no poll saw it run. The item at
    ``position`` is running, or FAILED once the run is."""
    plan, position = run["plan"], run["position"]
    for index, item in enumerate(plan[:position + 1]):
        if index < position:
            steps = ["running", "SUCCESS"]
        else:
            steps = ["running"] + (["FAILED"] if run["status"] == "FAILED" else [])
        for step in steps[shown.get(index, 0):]:
            print(f"[{index + 1}/{len(plan)}] {item['business_date']} {item['stage']}: "
                  f"{step}", flush=True)
        shown[index] = max(shown.get(index, 0), len(steps))


def _ended(run: dict[str, Any]) -> int:
    if run["status"] == "SUCCESS":
        print(f"batch run {run['id']}: SUCCESS ({len(run['plan'])} stage run(s))")
        return EXIT_OK
    print(f"batch run {run['id']}: {run['status']}: {run['message']}", file=sys.stderr)
    return EXIT_FAILED


def batches_view(batches: list[dict[str, Any]]) -> str:
    rows = [("ID", "SYSTEM", "LOCATION", "BUSINESS DATE", "CONTEXT", "STATUS", "STAGES")]
    for batch in batches:
        context = ",".join(f"{k}={v}" for k, v in sorted(batch["context"].items())) or "-"
        stages = " ".join(f"{s['stage']}={s['status']}" for s in batch["stages"])
        rows.append((str(batch["id"]), batch["system"], batch["location"],
                     batch["business_date"], context, batch["status"], stages))
    return table(rows) if batches else "(no batches)"


def audit_view(rows: list[dict[str, Any]]) -> str:
    lines = [("INSTANCE", "UNIT", "NAME", "STATUS", "JOB", "START", "END", "CPU MS",
              "RECORDS OUT", "MESSAGE")]
    for row in rows:
        metrics = row["metrics"]
        lines.append((row["instance_id"], row["work_unit"], row["work_unit_name"],
                       row["status"], str(row["job_id"] or "-"), row["start_time"] or "-",
                       row["end_time"] or "-",
                       str(metrics.get("cpu_milliseconds", "-")),
                       str(metrics.get("records_out", "-")), (row["message"] or "")[:60]))
    return table(lines) if rows else "(no audit rows)"


class BatchConfigResource(DocumentResource):
    """A ``kind: BatchConfig`` document (:mod:`jobserver.batches.spec`; ``name``
    defaults to ``default``): PUT to ``/api/v1/batches/configs/<name>``. Deleting a
    config keeps its batches."""

    def locate(self) -> tuple[str, str]:
        name = checked_name(self.body, "name", "default")
        return f"batch config {name}", f"/api/v1/batches/configs/{name}"

    def changed(self, reply: dict[str, Any]) -> tuple[str, ...]:
        return tuple(reply["changed"])
