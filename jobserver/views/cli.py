"""``jobserver materialize|invalidate|views -v PATTERN``: Schedoscope's commands.

``-v`` is also ``--view-url-path`` (and Schedoscope's ``--viewUrlPath``, which works
but is not listed).

Client commands over the API (:mod:`jobserver.views.api`). ``materialize --plan``
prints every view partition's action and why, and runs nothing; without it, the
same table with the job each partition's transformation runs as. A pattern or mode
the server refuses (422) exits 2 with where it failed; other refusals exit 1.
View definitions are created and changed with ``jobserver apply`` (``kind: View``:
:class:`ViewResource`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any

from jobserver.apply import DocumentResource, refuse
from jobserver.cli.views import table
from jobserver.client import ApiError, Client
from jobserver.views.model import Mode, ViewState

EXIT_USAGE = 2
#: Schedoscope's name of ``-v`` (its command client's ``--viewUrlPath``).
SCHEDOSCOPE_OPTION = "--viewUrlPath"
#: A materialize of a large lattice plans and writes for longer than a page read.
TIMEOUT = 300.0


def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``materialize``, ``invalidate`` and ``views``."""
    materialize = sub.add_parser("materialize", help="materialize the view partitions a "
                                                     "pattern addresses, with their "
                                                     "dependencies")
    materialize.add_argument("-m", "--mode", choices=[mode.value for mode in Mode],
                             default=Mode.DEFAULT.value,
                             help=f"how to materialize (default {Mode.DEFAULT.value})")
    materialize.add_argument("--plan", action="store_true",
                             help="print each partition's action and why; run nothing")
    invalidate = sub.add_parser("invalidate", help="put view partitions back to receive: "
                                                   "the next materialize transforms them")
    views = sub.add_parser("views", help="view partitions and their states")
    views.add_argument("-s", "--status", choices=[state.value for state in ViewState],
                       help="only partitions in this state")
    views.add_argument("-o", "--overview", action="store_true",
                       help="only how many partitions are in each state")
    views.add_argument("-d", "--dependencies", action="store_true",
                       help="also the partitions they depend on, recursively")
    views.add_argument("--limit", type=int, default=1000,
                       help="at most this many partitions (default 1000)")
    for command in (materialize, invalidate, views):
        pattern = command.add_argument(
            "-v", "--view-url-path", "--view", dest="pattern", required=command is not views,
            help="a view pattern, e.g. app.eci.datamart/SearchExport/SHOP10/2015/05")
        # Schedoscope's own spelling, kept working but out of --help: the alias names
        # the same action, so -v's required check holds for either spelling.
        command._option_string_actions[SCHEDOSCOPE_OPTION] = pattern
        client_options(command)
        command.set_defaults(run=run)


def run(args: argparse.Namespace, client: Client) -> int:
    client.timeout = max(client.timeout, TIMEOUT)
    try:
        if args.command == "materialize":
            reply = client.materialize(args.pattern, args.mode, args.plan)
            print(decisions_view(reply))
        elif args.command == "invalidate":
            reply = client.invalidate(args.pattern)
            print(f"{reply['invalidated']} of {reply['addressed']} view partition(s) "
                  "invalidated")
        else:
            reply = client.views(pattern=args.pattern, status=args.status,
                                 overview=args.overview, dependencies=args.dependencies,
                                 limit=args.limit)
            print(views_view(reply))
    except ApiError as exc:
        if exc.status not in (400, 422):
            raise
        print(f"jobserver: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def decisions_view(reply: dict[str, Any]) -> str:
    """One row per partition, dependencies first; then the counts per action."""
    rows = [("VIEW", "ACTION", "JOB", "REASON")]
    for item in reply["decisions"]:
        job = item.get("job_id")
        rows.append((item["view"], item["action"], "-" if job is None else str(job),
                     item["reason"]))
    counts = ", ".join(f"{action} {count}" for action, count in sorted(reply["counts"].items()))
    head = "plan only: nothing run" if reply["plan"] else "submitted"
    summary = f"{head} ({reply['mode']}): {counts or 'nothing addressed'}"
    return (table(rows) + "\n" + summary) if reply["decisions"] else summary


def views_view(reply: dict[str, Any]) -> str:
    overview = ", ".join(f"{state} {count}" for state, count in sorted(reply["overview"].items()))
    if "views" not in reply:
        return overview or "(no view partitions)"
    rows = [("VIEW", "STATUS", "TRANSFORMED", "JOB", "RETRIES")]
    for item in reply["views"]:
        job = item.get("job_id")
        rows.append((item["path"], item["status"], item.get("transformed_at") or "-",
                     "-" if job is None else str(job), str(item["retries"])))
    more = "\n(more not listed; narrow the pattern or raise --limit)" if reply["truncated"] else ""
    body = table(rows) if reply["views"] else "(no view partitions)"
    return f"{body}\n{overview}{more}"


_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,1000}/[A-Za-z_][A-Za-z0-9_]{0,99}$")


class ViewResource(DocumentResource):
    """A ``kind: View`` document (:mod:`jobserver.views.spec`): ``PUT
    /api/v1/view-definitions/<package>/<View>`` with the document as the body. A view
    must come after the views it depends on: the dry run accepts a dependency on a view
    not stored yet, the apply in file order does not."""

    def locate(self) -> tuple[str, str]:
        name = self.body.get("name")
        if not isinstance(name, str) or not _VIEW_NAME.match(name):
            refuse("name", "required: package/View, e.g. app.eci.datamart/SearchExport")
        return f"view {name}", f"/api/v1/view-definitions/{name}"

    def changed(self, reply: dict[str, Any]) -> tuple[str, ...]:
        return ("structure",) if reply["structure_changed"] else ()
