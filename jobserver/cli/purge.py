"""``jobserver purge --before DATE [--state S ...] [--dry-run]``: delete old finished
jobs now, with their steps and events.

An admin command for the server host, like ``token``: it opens the store named by the
config's ``database.url`` directly (bringing its schema up to date first, as a
starting node would), never the API. It deletes what retention would
(:mod:`jobserver.store.retention`: the same batches, pauses and kept references), for
the cutoff and states given instead of ``retention.finished_jobs``; nodes may run
meanwhile. ``--dry-run`` counts, deleting nothing.
"""

from __future__ import annotations

import argparse
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from jobserver.deletable import DEFAULT_STATES, DELETABLE
from jobserver.exceptions import ConfigError
from jobserver.states import State

if TYPE_CHECKING:  # the store is imported when the command runs, not to parse it
    from jobserver.config import Config
    from jobserver.store.retention import Tally

log = logging.getLogger(__name__)

#: Batches between two progress lines in the log.
PROGRESS_EVERY = 100


def add_parser(sub: Any) -> None:
    """Add ``purge`` to the CLI's subparsers."""
    purge = sub.add_parser("purge", help="delete finished jobs older than a date, with their "
                                         "steps and events (admin, on the server host)")
    purge.add_argument("--before", required=True, metavar="DATE",
                       help="jobs finished before this: 2026-01-31 (midnight UTC) or "
                            "2026-01-31T12:00:00[+02:00] (UTC unless it names a zone)")
    purge.add_argument("--state", action="append", metavar="S",
                       help="a state to delete, repeated or comma-separated: "
                            f"{', '.join(s.value for s in DELETABLE)} (default: "
                            f"{', '.join(s.value for s in DEFAULT_STATES)})")
    purge.add_argument("--dry-run", action="store_true",
                       help="count what would be deleted; delete nothing")


def parse_before(text: str) -> datetime:
    """``--before``: an ISO date (midnight UTC) or date and time (UTC unless zoned)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--before: {text!r} is not a date such as 2026-01-31 or "
                          "2026-01-31T12:00:00+00:00") from None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def parse_states(values: list[str] | None) -> tuple[State, ...]:
    """``--state``: the states named (each at most once, in the order named)."""
    if not values:
        return DEFAULT_STATES
    names = [name.strip().upper() for value in values for name in value.split(",")
             if name.strip()]
    allowed = {state.value: state for state in DELETABLE}
    for name in names:
        if name not in allowed:
            raise ConfigError(f"--state: {name!r} is not a state purge deletes; use "
                              f"{', '.join(allowed)}")
    if not names:
        raise ConfigError("--state: name at least one state")
    return tuple(dict.fromkeys(allowed[name] for name in names))


def run(args: argparse.Namespace, config: Config) -> int:
    from jobserver.retention import Purge
    from jobserver.store import Store

    before, states = parse_before(args.before), parse_states(args.state)
    store = Store(config.database_url, pool_size=1, notify=False)
    try:
        store.upgrade()
        purge = Purge(store.retention, states, before, config.retention.batch_size,
                      dry_run=args.dry_run)
        began, batches = time.monotonic(), 0
        while purge.step() is not None:
            batches += 1
            if batches % PROGRESS_EVERY == 0:
                log.info("purge: %d jobs %s so far", purge.tally.jobs,
                         "counted" if args.dry_run else "deleted")
            if not args.dry_run:
                time.sleep(config.retention.pause)
        print(summary(purge.tally, len(purge.kept), before, states, args.dry_run,
                      time.monotonic() - began))
        return 0
    finally:
        store.dispose()


def summary(tally: Tally, kept: int, before: datetime, states: tuple[State, ...],
            dry_run: bool, seconds: float) -> str:
    verb = "would delete" if dry_run else "deleted"
    text = (f"{verb} {tally.jobs:,} jobs ({tally.steps:,} steps, {tally.events:,} events) "
            f"in {', '.join(s.value for s in states)} finished before "
            f"{before.isoformat()}")
    if kept:
        text += f"; kept {kept:,} that are still referenced"
    return text + ("" if dry_run else f" ({seconds:.1f} s)")
