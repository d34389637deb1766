"""State-change events inside a node: published after the store accepted a change.

The runner, the schedulers and orphan rescue publish; metrics and scheduling
listeners subscribe. Subscribers are called in the publisher's thread, so each must
be quick and must not raise (a raising subscriber is logged and skipped); anything
slow — a webhook — queues the event and works on it in a thread of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from jobserver.states import State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateChange:
    """One job or step state change (``step`` is None for the job itself)."""

    job_id: int
    job_name: str
    old: State | None
    new: State
    node: str
    step: str | None = None
    step_type: str | None = None
    fence: int | None = None
    attempt: int | None = None
    message: str | None = None
    #: Seconds the job or step spent before this change (run time, or queue time for
    #: READY -> RUNNING).
    seconds: float | None = None
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["old"] = self.old.value if self.old else None
        body["new"] = self.new.value
        return body


@dataclass(frozen=True)
class NodeEvent:
    """Something about the node rather than a job: ``kind`` is one of
    ``became_active``, ``lost_active``, ``orphan_rescued``, ``fenced_off``,
    ``claimed`` (``count`` jobs in one statement), ``lock_acquired``."""

    kind: str
    node: str
    count: int = 1
    seconds: float | None = None
    detail: str | None = None


Subscriber = Callable[[StateChange | NodeEvent], None]


class EventBus:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.append(subscriber)

    def publish(self, event: StateChange | NodeEvent) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r failed on %r", subscriber, event)
