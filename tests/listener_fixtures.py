"""Scheduling listeners for the listener tests, loaded by real node processes.

The nodes import this module through ``scheduler.listeners`` (``PYTHONPATH`` names the
repository). Every listener appends one JSON object per line to
``$JSTEST_LISTENER_DIR/<ClassName>.jsonl``::

    {"kind": "created" | "event" | "raised" | "closed" | "slow", "instance": N,
     "event": {...StateChange.to_json()...}}

``instance`` counts the objects of that class built in the node process, so a restart
(a new object) is visible. The failing listeners fail on the claim (job-level
READY -> RUNNING) of the job named :data:`TRIGGER`.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from jobserver.events import StateChange
from jobserver.exceptions import RetryableListenerError
from jobserver.listeners import SchedulingListener

TRIGGER = "trigger"
DIR_ENV = "JSTEST_LISTENER_DIR"
SLOW_ENV = "JSTEST_SLOW_SECONDS"

_lock = threading.Lock()
_counts: dict[str, int] = {}


def is_trigger(event: StateChange) -> bool:
    return (event.step is None and event.job_name == TRIGGER
            and event.new.value == "RUNNING")


class Recorder(SchedulingListener):
    """Records every event it gets."""

    def __init__(self) -> None:
        with _lock:
            name = type(self).__name__
            _counts[name] = _counts.get(name, 0) + 1
            self.instance = _counts[name]
        self._write("created")

    def _write(self, kind: str, event: StateChange | None = None) -> None:
        record: dict[str, Any] = {"kind": kind, "instance": self.instance}
        if event is not None:
            record["event"] = event.to_json()
        path = Path(os.environ[DIR_ENV]) / f"{type(self).__name__}.jsonl"
        with _lock, path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")

    def on_event(self, event: StateChange) -> None:
        self._write("event", event)

    def close(self) -> None:
        self._write("closed")


class RaisesOnce(Recorder):
    """Raises RuntimeError on the trigger's claim, the first time only (per process)."""

    fired = False

    def on_event(self, event: StateChange) -> None:
        if is_trigger(event) and not RaisesOnce.fired:
            RaisesOnce.fired = True
            self._write("raised", event)
            raise RuntimeError("listener fixture: plain failure")
        super().on_event(event)


class RetriesOnce(Recorder):
    """Raises RetryableListenerError on the trigger's claim, the first time only."""

    fired = False

    def on_event(self, event: StateChange) -> None:
        if is_trigger(event) and not RetriesOnce.fired:
            RetriesOnce.fired = True
            self._write("raised", event)
            raise RetryableListenerError("listener fixture: retry me")
        super().on_event(event)


class AlwaysFails(Recorder):
    """Raises on every event."""

    def on_event(self, event: StateChange) -> None:
        self._write("raised", event)
        raise RuntimeError("listener fixture: always fails")


class Slow(Recorder):
    """Takes ``$JSTEST_SLOW_SECONDS`` (default 60) over every event."""

    def on_event(self, event: StateChange) -> None:
        self._write("slow", event)
        threading.Event().wait(float(os.environ.get(SLOW_ENV, "60")))
        super().on_event(event)
