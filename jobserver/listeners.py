"""Scheduling listeners (Schedoscope's): operator classes told of every state change.

``scheduler.listeners`` names classes as ``"module:Class"`` (trusted operator config,
imported when the node starts; a name that cannot be imported stops start-up with a
:class:`~jobserver.exceptions.ConfigError` naming the key). Each listener receives a
:class:`~jobserver.events.StateChange` for every job and step state change this node
makes or observes: claims, steps, finishes, rescues of dead nodes' jobs, re-queues on
drain, and operator pauses and discards of the jobs it runs. Changes made elsewhere
reach the listeners of the node that made them.

A listener class needs one method, ``on_event(event)``; optionally a classmethod
``from_config(config)`` to build it (otherwise it is called with no arguments) and
``close()``. :class:`SchedulingListener` is a base class with those defaults.

Each listener runs in a thread of its own behind a bounded queue
(``scheduler.listener_queue_size``), fed from the node's event bus by a quick append:
a slow listener never delays scheduling; when its queue is full the oldest event is
dropped and counted (``jobserver_listener_events_dropped_total{reason="queue_full"}``).

When ``on_event`` raises:

* :class:`~jobserver.exceptions.RetryableListenerError`: the listener is restarted
  (closed and built again) and receives again the last event of each job it has seen
  (the newest :data:`LAST_EVENTS_KEPT` jobs), oldest first, the failed one included;
* anything else: the listener is restarted and that event is dropped.

Restarts are counted over the listener's life; past ``scheduler.listener_max_retries``
(-1: no limit) it is disabled with an error log. Consecutive restarts back off
(0.1 s doubling, at most 30 s). Setting ``scheduler.webhook_urls`` adds the
:class:`WebhookListener`; the default listener list is ``[LoggingListener]``.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any

from jobserver.config import Config
from jobserver.events import NodeEvent, StateChange
from jobserver.exceptions import ConfigError, RetryableListenerError
from jobserver.logs import job_fields
from jobserver.loops import Loop

log = logging.getLogger(__name__)

#: Jobs whose last event a listener keeps for a retry (least recently changed go first).
LAST_EVENTS_KEPT = 10_000
RESTART_BACKOFF = 0.1
RESTART_BACKOFF_MAX = 30.0
#: How long a stopping node lets its listeners work off their queues.
DRAIN_TIMEOUT = 5.0
WEBHOOK_LISTENER = "jobserver.listeners:WebhookListener"


def event_fields(event: StateChange) -> dict[str, Any]:
    """``extra=`` for a log line about ``event``."""
    return job_fields(event.job_id, event.step, event.attempt, event.node, event.fence)


class SchedulingListener:
    """Base class of scheduling listeners (subclassing it is optional)."""

    @classmethod
    def from_config(cls, config: Config) -> SchedulingListener:
        return cls()

    def on_event(self, event: StateChange) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Called when the listener is restarted or the node stops."""


class LoggingListener(SchedulingListener):
    """The default listener: one INFO line per state change, with the job's fields."""

    def on_event(self, event: StateChange) -> None:
        what = (f"job {event.job_id} ({event.job_name})" if event.step is None
                else f"job {event.job_id} ({event.job_name}) step {event.step}")
        old = event.old.value if event.old else "-"
        note = f": {event.message}" if event.message else ""
        log.info("%s: %s -> %s%s", what, old, event.new.value, note,
                 extra=event_fields(event))


class WebhookListener(SchedulingListener):
    """POSTs each event's JSON (:meth:`StateChange.to_json`) to every configured URL.

    A connection error, a timeout, a 408, 429 or 5xx answer is retried up to
    ``scheduler.webhook_retries`` times (0.5 s doubling, at most 30 s); any other 4xx is
    not. Every attempt of one event carries the same ``X-Jobserver-Delivery`` id, so a
    receiver can drop duplicates. An event that cannot be delivered is logged and
    dropped; the listener itself does not fail.
    """

    BACKOFF = 0.5
    BACKOFF_MAX = 30.0

    def __init__(self, urls: list[str], retries: int = 3, timeout: float = 5.0) -> None:
        if not urls:
            raise ConfigError("scheduler.webhook_urls: the webhook listener needs a URL")
        self.urls = list(urls)
        self.retries = retries
        self.timeout = timeout
        self._closed = threading.Event()

    @classmethod
    def from_config(cls, config: Config) -> WebhookListener:
        return cls(config.scheduler.webhook_urls, config.scheduler.webhook_retries,
                   config.scheduler.webhook_timeout)

    def close(self) -> None:
        self._closed.set()

    def on_event(self, event: StateChange) -> None:
        body = json.dumps(event.to_json()).encode()
        delivery = uuid.uuid4().hex
        for url in self.urls:
            self._post(url, body, delivery, event)

    def _post(self, url: str, body: bytes, delivery: str, event: StateChange) -> None:
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = min(self.BACKOFF * 2 ** (attempt - 1), self.BACKOFF_MAX)
                if self._closed.wait(delay):
                    break
            request = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/json", "User-Agent": "jobserver-webhook",
                "X-Jobserver-Delivery": delivery})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read()
                return
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}"
                if exc.code < 500 and exc.code not in (408, 429):
                    break
            except (urllib.error.URLError, OSError) as exc:
                error = str(getattr(exc, "reason", exc))
        log.error("webhook %s: event not delivered (%s): job %s %s -> %s", url, error,
                  event.job_id, event.old.value if event.old else "-", event.new.value,
                  extra=event_fields(event))


# -- running listeners -------------------------------------------------------------------
class _NoMetrics:
    def __getattr__(self, name: str) -> Any:
        return self

    def labels(self, *args: Any) -> _NoMetrics:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass


class ListenerWorker(Loop):
    """One listener: its loop, its bounded queue, its restarts.

    The loop is not a required one: what a listener raises is handled by its restart
    policy, and should the machinery itself fail, only this listener's deliveries
    end (logged), not the node.
    """

    thread_prefix = "listener:"

    def __init__(self, name: str, factory: Callable[[], Any], max_retries: int = -1,
                 queue_size: int = 10000, metrics: Any = None,
                 key: Callable[[Any], Hashable] = lambda event: event.job_id,
                 fields: Callable[[Any], dict[str, Any]] = event_fields) -> None:
        """``key`` names what an event is about (a job; a view partition for the view
        listeners): a retry resends the last event of each; ``fields`` gives a log
        line's ``extra=``."""
        super().__init__(name, required=False)
        self._key = key
        self._fields = fields
        self._factory = factory
        self.max_retries = max_retries
        self._queue: deque[StateChange] = deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._last: OrderedDict[Hashable, StateChange] = OrderedDict()
        self._instance: Any = None
        self._metrics = metrics or _NoMetrics()
        self._drain_until = float("inf")
        self._consecutive = 0
        self.restarts = 0
        self.enabled = True

    # -- the publisher's side (must be quick) ------------------------------------------
    def offer(self, event: StateChange) -> None:
        if not self.enabled:
            return
        dropped = False
        with self._cond:
            if len(self._queue) >= self._queue_size:
                self._queue.popleft()
                dropped = True
            self._queue.append(event)
            self._cond.notify()
        if dropped:
            self._metrics.listener_dropped.labels(self.name, "queue_full").inc()

    def start(self) -> None:
        self._metrics.listener_enabled.labels(self.name).set(1)
        super().start()

    def stop(self) -> None:
        """End after working off the queue until the drain deadline (see :meth:`drain`;
        without one, the whole queue)."""
        with self._cond:
            self.stopping.set()
            self._cond.notify()

    def drain(self, deadline: float) -> bool:
        """Work off the queue until ``deadline`` (monotonic), then stop; False, with a
        warning, if the listener is still busy then."""
        with self._cond:
            self._drain_until = deadline
        self.stop()
        if self.join(max(0.0, deadline - time.monotonic()) + 0.5):
            return True
        log.warning("listener %s is still busy; %d event(s) not delivered", self.name,
                    len(self._queue))
        return False

    # -- the listener's thread ----------------------------------------------------------
    def run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self.stopping.is_set():
                    self._cond.wait()
                if not self._queue or time.monotonic() > self._drain_until:
                    break
                event = self._queue.popleft()
            if not self.enabled:
                break
            self._deliver(event)
        self._close_instance()

    def _remember(self, event: StateChange) -> None:
        key = self._key(event)
        self._last[key] = event
        self._last.move_to_end(key)
        while len(self._last) > LAST_EVENTS_KEPT:
            self._last.popitem(last=False)

    def _deliver(self, event: StateChange) -> None:
        self._remember(event)
        pending: deque[StateChange] = deque([event])
        while pending and self.enabled:
            current = pending.popleft()
            try:
                if self._instance is None:
                    self._instance = self._factory()
                self._instance.on_event(current)
                self._consecutive = 0
            except RetryableListenerError as exc:
                if self._restart(current, exc, "it receives the last event of each job again"):
                    pending = deque(self._last.values())
            except Exception as exc:  # noqa: BLE001 - a listener may raise anything
                if self._restart(current, exc, "the event is dropped"):
                    self._metrics.listener_dropped.labels(self.name, "failed").inc()

    def _restart(self, event: StateChange, exc: Exception, consequence: str) -> bool:
        """Close the failed instance; False if the listener is now disabled."""
        self._close_instance()
        if 0 <= self.max_retries <= self.restarts:
            self._disable(exc)
            return False
        self.restarts += 1
        self._consecutive += 1
        self._metrics.listener_restarts.labels(self.name).inc()
        log.warning("listener %s raised %s: %s; restarting it (restart %d), %s", self.name,
                    type(exc).__name__, exc, self.restarts, consequence,
                    exc_info=exc, extra=self._fields(event))
        delay = min(RESTART_BACKOFF * 2 ** (self._consecutive - 1), RESTART_BACKOFF_MAX)
        if self.stopping.wait(delay) and time.monotonic() > self._drain_until:
            return False
        return True

    def _disable(self, exc: Exception) -> None:
        self.enabled = False
        with self._cond:
            left = len(self._queue)
            self._queue.clear()
        self._metrics.listener_enabled.labels(self.name).set(0)
        self._metrics.listener_dropped.labels(self.name, "disabled").inc(left + 1)
        log.error("listener %s disabled after %d restarts (scheduler.listener_max_retries = "
                  "%d); last error: %s: %s", self.name, self.restarts, self.max_retries,
                  type(exc).__name__, exc, exc_info=exc)

    def _close_instance(self) -> None:
        instance, self._instance = self._instance, None
        close = getattr(instance, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001
                log.warning("listener %s: close() raised", self.name, exc_info=True)


class Listeners:
    """The node's listeners; subscribe :meth:`publish` to the node's event bus."""

    def __init__(self, workers: list[ListenerWorker]) -> None:
        self.workers = workers

    @classmethod
    def from_config(cls, config: Config, metrics: Any = None) -> Listeners:
        names = list(config.scheduler.listeners)
        if config.scheduler.webhook_urls and WEBHOOK_LISTENER not in names:
            names.append(WEBHOOK_LISTENER)
        workers: list[ListenerWorker] = []
        seen: dict[str, int] = {}
        for name in names:
            factory = listener_factory(name, config)
            seen[name] = seen.get(name, 0) + 1
            label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            workers.append(ListenerWorker(label, factory, config.scheduler.listener_max_retries,
                                          config.scheduler.listener_queue_size, metrics))
        return cls(workers)

    def publish(self, event: StateChange | NodeEvent) -> None:
        if isinstance(event, StateChange):
            for worker in self.workers:
                worker.offer(event)

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def loops(self) -> list[Loop]:
        return list(self.workers)

    def stop(self, timeout: float = DRAIN_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.drain(deadline)


def load_listener_class(name: str) -> type:
    """Import ``"module:Class"``; a :class:`ConfigError` naming the key if that fails."""
    module_name, _, attribute = name.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:  # noqa: BLE001 - any import failure is a config error
        raise ConfigError(f"scheduler.listeners: cannot import {name!r}: "
                          f"{type(exc).__name__}: {exc}") from None
    if not isinstance(target, type) or not callable(getattr(target, "on_event", None)):
        raise ConfigError(f"scheduler.listeners: {name!r} is not a class with an "
                          "on_event(event) method")
    return target


def listener_factory(name: str, config: Config) -> Callable[[], Any]:
    listener_class = load_listener_class(name)
    if listener_class is WebhookListener and not config.scheduler.webhook_urls:
        raise ConfigError("scheduler.webhook_urls: the webhook listener needs at least one "
                          "URL")
    from_config = getattr(listener_class, "from_config", None)
    if callable(from_config):
        return lambda: from_config(config)
    return listener_class
