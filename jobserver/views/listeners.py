"""View scheduling listeners (Schedoscope's ``ViewSchedulingListener``).

``views.listeners`` names classes as ``"module:Class"``; each gets
``on_event(ViewSchedulingEvent)`` for every state change of every view partition, on
the node that tracks views (the planner node), in commit order. A listener runs
behind :class:`jobserver.listeners.ListenerWorker`, with the job listeners'
semantics: an exception restarts it and drops the event; a
:class:`~jobserver.exceptions.RetryableListenerError` restarts it and resends the last
event of each view partition; past ``views.listener_max_retries`` restarts it is
disabled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobserver.config import Config
from jobserver.exceptions import ConfigError
from jobserver.listeners import ListenerWorker, load_listener_class
from jobserver.loops import Loop
from jobserver.views.model import ViewAddress, ViewState

log = logging.getLogger(__name__)

DEFAULT_LISTENER = "jobserver.views.listeners:ViewSchedulingMonitor"


@dataclass(frozen=True)
class ViewSchedulingEvent:
    """One view partition changing state."""

    previous: ViewState
    new: ViewState
    view: ViewAddress
    at: datetime
    job_id: int | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"view": self.view.path, "previous": self.previous.value,
                "new": self.new.value, "at": self.at.isoformat(), "job_id": self.job_id,
                "message": self.message}


class ViewSchedulingMonitor:
    """The default listener: one INFO line per state change."""

    def on_event(self, event: ViewSchedulingEvent) -> None:
        note = f": {event.message}" if event.message else ""
        log.info("view %s: %s -> %s%s", event.view, event.previous.value, event.new.value,
                 note, extra=_fields(event))


def _fields(event: ViewSchedulingEvent) -> dict[str, Any]:
    return {"view": event.view.path, "job_id": event.job_id}


class ViewListeners:
    """The view listeners of the node tracking views."""

    def __init__(self, workers: list[ListenerWorker]) -> None:
        self.workers = workers

    @classmethod
    def from_config(cls, config: Config, metrics: Any = None) -> ViewListeners:
        names = config.views.listeners or [DEFAULT_LISTENER]
        workers = []
        for index, name in enumerate(names):
            try:
                factory = load_listener_class(name)
            except ConfigError as exc:
                raise ConfigError(f"views.listeners[{index}]: "
                                  f"{exc.message.split(': ', 1)[-1]}") from None
            workers.append(ListenerWorker(f"view:{name}", factory,
                                          config.views.listener_max_retries,
                                          config.scheduler.listener_queue_size, metrics,
                                          key=lambda event: event.view, fields=_fields))
        return cls(workers)

    def publish(self, event: ViewSchedulingEvent) -> None:
        for worker in self.workers:
            worker.offer(event)  # type: ignore[arg-type]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def loops(self) -> list[Loop]:
        return list(self.workers)

    def stop(self, timeout: float = 5.0) -> None:
        import time

        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.drain(deadline)
