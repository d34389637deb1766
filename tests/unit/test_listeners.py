"""Scheduling listeners in-process: queueing, restarts, redelivery, config errors, the
webhook's retries. (Real node processes: tests/integration/test_listeners.py.)"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jobserver import listeners as listeners_module
from jobserver.config import load_config
from jobserver.events import NodeEvent, StateChange
from jobserver.exceptions import ConfigError, RetryableListenerError
from jobserver.listeners import (ListenerWorker, Listeners, LoggingListener, WebhookListener,
                                 load_listener_class)
from jobserver.metrics import NodeMetrics
from jobserver.states import State
from tests.helpers import wait_for


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listeners_module, "RESTART_BACKOFF", 0.0)
    monkeypatch.setattr(WebhookListener, "BACKOFF", 0.01)


def change(job_id: int, old: State | None = State.READY, new: State = State.RUNNING,
           step: str | None = None) -> StateChange:
    return StateChange(job_id, f"job-{job_id}", old, new, "n1", step=step, fence=3, attempt=1)


class Script:
    """A listener factory whose instances follow ``fail``: {event index: exception}."""

    def __init__(self, fail: dict[int, Exception] | None = None) -> None:
        self.fail = fail or {}
        self.instances = 0
        self.got: list[tuple[int, StateChange]] = []
        self.calls = 0
        self.closed = 0

    def __call__(self) -> Any:
        self.instances += 1
        script, instance = self, self.instances

        class Instance:
            def on_event(self, event: StateChange) -> None:
                script.calls += 1
                error = script.fail.pop(script.calls, None)
                if error is not None:
                    raise error
                script.got.append((instance, event))

            def close(self) -> None:
                script.closed += 1

        return Instance()


def run(worker: ListenerWorker, events: list[StateChange]) -> None:
    worker.start()
    for event in events:
        worker.offer(event)
    worker.drain(time.monotonic() + 10)


def metrics() -> NodeMetrics:
    return NodeMetrics(CollectorRegistry())


def sample(m: NodeMetrics, attribute: str, **labels: str) -> float:
    return getattr(m, attribute).labels(**labels)._value.get()


def test_every_event_in_order() -> None:
    script = Script()
    events = [change(1), change(1, State.READY, State.RUNNING, "s"), change(2)]
    run(ListenerWorker("x", script), events)
    assert [event for _, event in script.got] == events
    assert script.instances == 1 and script.closed == 1


def test_a_plain_exception_restarts_the_listener_and_drops_the_event() -> None:
    script, m = Script({2: RuntimeError("boom")}), metrics()
    events = [change(1), change(2), change(3)]
    run(ListenerWorker("x", script, metrics=m), events)
    assert script.got == [(1, events[0]), (2, events[2])]
    assert script.instances == 2
    assert sample(m, "listener_restarts", listener="x") == 1
    assert sample(m, "listener_dropped", listener="x", reason="failed") == 1


def test_a_retryable_error_redelivers_the_last_event_of_each_job() -> None:
    script = Script({4: RetryableListenerError("again")})
    a1, a2 = change(1), change(1, State.RUNNING, State.SUCCEED)
    b1, c1 = change(2), change(3)
    run(ListenerWorker("x", script), [a1, b1, a2, c1])
    # Instance 1 got a1, b1, a2 and failed on c1; instance 2 gets the last event of
    # each job, least recently changed first (b1, a2, c1), then nothing is repeated.
    assert script.got == [(1, a1), (1, b1), (1, a2), (2, b1), (2, a2), (2, c1)]


def test_max_retries_disables_the_listener(caplog: pytest.LogCaptureFixture) -> None:
    script, m = Script({i: RuntimeError(f"fail {i}") for i in range(1, 100)}), metrics()
    worker = ListenerWorker("x", script, max_retries=2, metrics=m)
    with caplog.at_level(logging.WARNING, "jobserver.listeners"):
        run(worker, [change(i) for i in range(1, 6)])
    assert not worker.enabled and worker.restarts == 2
    assert script.instances == 3 and script.calls == 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "x disabled after 2 restarts" in errors[0].getMessage()
    assert sample(m, "listener_enabled", listener="x") == 0
    worker.offer(change(9))  # ignored from now on
    assert script.calls == 3


def test_max_retries_zero_disables_at_the_first_failure() -> None:
    script = Script({1: RuntimeError("no")})
    worker = ListenerWorker("x", script, max_retries=0)
    run(worker, [change(1), change(2)])
    assert not worker.enabled and script.instances == 1 and script.got == []


def test_unlimited_retries_keep_restarting() -> None:
    script = Script({i: RuntimeError("no") for i in range(1, 30)})
    worker = ListenerWorker("x", script, max_retries=-1)
    run(worker, [change(i) for i in range(1, 41)])
    assert worker.enabled and worker.restarts == 29
    assert [event.job_id for _, event in script.got] == list(range(30, 41))


def test_a_full_queue_drops_the_oldest_event() -> None:
    m = metrics()
    release = threading.Event()
    got: list[int] = []

    class Blocking:
        def on_event(self, event: StateChange) -> None:
            release.wait(10)
            got.append(event.job_id)

    worker = ListenerWorker("slow", Blocking, queue_size=3, metrics=m)
    worker.start()
    worker.offer(change(1))
    wait_for(lambda: not worker._queue, 5, what="the first event to be taken")
    started = time.monotonic()
    for job_id in range(2, 8):  # never blocks the publisher
        worker.offer(change(job_id))
    assert time.monotonic() - started < 0.5
    release.set()
    worker.drain(time.monotonic() + 5)
    assert got == [1, 5, 6, 7]
    assert sample(m, "listener_dropped", listener="slow", reason="queue_full") == 3


def test_listeners_get_state_changes_only() -> None:
    script = Script()
    hub = Listeners([ListenerWorker("x", script)])
    hub.start()
    hub.publish(NodeEvent("claimed", "n1"))
    hub.publish(change(1))
    hub.stop(5)
    assert [event.job_id for _, event in script.got] == [1]


# -- configuration ------------------------------------------------------------------------
def test_default_is_the_logging_listener() -> None:
    hub = Listeners.from_config(load_config(environ={}))
    assert [w.name for w in hub.workers] == ["jobserver.listeners:LoggingListener"]
    assert Listeners.from_config(load_config(
        environ={"JOBSERVER_SCHEDULER__LISTENERS": "[]"})).workers == []


def test_webhook_urls_add_the_webhook_listener() -> None:
    config = load_config(environ={"JOBSERVER_SCHEDULER__WEBHOOK_URLS": "http://127.0.0.1:9/x"})
    names = [w.name for w in Listeners.from_config(config).workers]
    assert names == ["jobserver.listeners:LoggingListener", "jobserver.listeners:WebhookListener"]


@pytest.mark.parametrize("name,fragment", [
    ("no_such_module_xyz:Listener", "ModuleNotFoundError"),
    ("jobserver.listeners:NoSuchClass", "AttributeError"),
    ("jobserver.listeners:event_fields", "is not a class with an on_event"),
    ("jobserver.states:State", "is not a class with an on_event"),
])
def test_bad_listener_names_are_config_errors(name: str, fragment: str) -> None:
    config = load_config(environ={"JOBSERVER_SCHEDULER__LISTENERS": name})
    with pytest.raises(ConfigError) as info:
        Listeners.from_config(config)
    assert "scheduler.listeners" in info.value.message and name in info.value.message
    assert fragment in info.value.message


def test_config_validates_names_and_urls() -> None:
    for environ, key in (({"JOBSERVER_SCHEDULER__LISTENERS": "not a name"}, "scheduler.listeners"),
                         ({"JOBSERVER_SCHEDULER__WEBHOOK_URLS": "ftp://x"},
                          "scheduler.webhook_urls"),
                         ({"JOBSERVER_SCHEDULER__LISTENER_MAX_RETRIES": "-2"},
                          "scheduler.listener_max_retries")):
        with pytest.raises(ConfigError) as info:
            load_config(environ=environ)
        assert key in info.value.message


def test_webhook_listener_without_urls_is_a_config_error() -> None:
    config = load_config(environ={"JOBSERVER_SCHEDULER__LISTENERS":
                                  "jobserver.listeners:WebhookListener"})
    with pytest.raises(ConfigError) as info:
        Listeners.from_config(config)
    assert "scheduler.webhook_urls" in info.value.message


def test_load_listener_class() -> None:
    assert load_listener_class("jobserver.listeners:LoggingListener") is LoggingListener


def test_logging_listener_logs_the_job_fields(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "jobserver.listeners"):
        LoggingListener().on_event(change(7, State.RUNNING, State.SUCCEED, "load"))
    record = caplog.records[-1]
    assert record.getMessage() == "job 7 (job-7) step load: RUNNING -> SUCCEED"
    assert (record.job_id, record.step, record.node, record.fence, record.attempt) == (
        7, "load", "n1", 3, 1)


# -- the webhook ----------------------------------------------------------------------------
class Endpoint:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                endpoint.bodies.append(json.loads(self.rfile.read(
                    int(self.headers["Content-Length"]))))
                status = endpoint.statuses.pop(0) if endpoint.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("statuses,posts,delivered", [
    ([], 1, True),
    ([500, 503], 3, True),
    ([500, 500, 500], 3, False),  # retries=2: three attempts, then given up
    ([429, 200], 2, True),
    ([400], 1, False),  # a client error is not retried
])
def test_webhook_retries(statuses: list[int], posts: int, delivered: bool,
                         caplog: pytest.LogCaptureFixture) -> None:
    endpoint = Endpoint(list(statuses))
    try:
        with caplog.at_level(logging.ERROR, "jobserver.listeners"):
            WebhookListener([endpoint.url], retries=2, timeout=2).on_event(change(5))
    finally:
        endpoint.close()
    assert len(endpoint.bodies) == posts
    assert all(body == endpoint.bodies[0] for body in endpoint.bodies)
    assert endpoint.bodies[0]["job_id"] == 5 and endpoint.bodies[0]["new"] == "RUNNING"
    failures = [r for r in caplog.records if "not delivered" in r.getMessage()]
    assert bool(failures) is not delivered, caplog.text


def test_webhook_unreachable_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, "jobserver.listeners"):
        WebhookListener(["http://127.0.0.1:9/nothing"], retries=1, timeout=1).on_event(change(1))
    assert "not delivered" in caplog.text
