"""Breaks the scheduler loop of a real node process on demand, for the supervision tests.

A node imports this module through ``scheduler.listeners`` (``PYTHONPATH`` names the
repository), which wraps every scheduler's ``dispatch``: once the file named by
``$JSTEST_BREAK_FILE`` holds this node's id, the next dispatch raises an error that
no loop expects.
"""

from __future__ import annotations

import os
from pathlib import Path

from jobserver.events import StateChange
from jobserver.listeners import SchedulingListener
from locks.base import Lease
from schedulers.base import Scheduler

BREAK_ENV = "JSTEST_BREAK_FILE"
_dispatch = Scheduler.dispatch


def _breakable_dispatch(self: Scheduler, lease: Lease) -> int:
    trigger = Path(os.environ[BREAK_ENV])
    if trigger.exists() and trigger.read_text().strip() == self.ctx.node_id:
        raise RuntimeError("injected into the scheduler loop")
    return _dispatch(self, lease)


Scheduler.dispatch = _breakable_dispatch  # type: ignore[method-assign]


class SchedulerBreaker(SchedulingListener):
    """Does nothing with events: naming it in the config imports this module."""

    def on_event(self, event: StateChange) -> None:
        pass
