"""Scheduling listeners in real node processes (``jobserver serve``).

The listener classes live in :mod:`tests.listener_fixtures`; the node imports them
through ``scheduler.listeners`` and each writes what it got to a JSON-lines file.
Checked: every job and step change arrives with its old and new state (operator
pauses and discards included); a listener that raises is restarted and that event is
dropped; one that raises ``RetryableListenerError`` is restarted and gets the last
event of each job again; ``listener_max_retries`` disables a listener with an error
log; a slow listener does not delay jobs; the webhook listener POSTs each event's
JSON and retries a 500; a listener that cannot be imported stops start-up.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port, wait_for
from tests.integration.nodes import JOBSERVER, TOKEN, Api, Harness, Proc
from tests.integration.scrape import scrape, value
from tests.listener_fixtures import DIR_ENV, SLOW_ENV, TRIGGER

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = "tests.listener_fixtures"


class Node:
    """One ``jobserver serve`` with the given listeners; its API and its records."""

    def __init__(self, harness: Harness, tmp_path: Path, listeners: list[str],
                 **env: str) -> None:
        self.port = free_port()
        self.dir = tmp_path / "listeners"
        self.dir.mkdir(exist_ok=True)
        self.proc: Proc = harness.start_node(
            "node-1", self.port, tmp_path / "data", PYTHONPATH=str(ROOT),
            **{DIR_ENV: str(self.dir), "JOBSERVER_SCHEDULER__LISTENERS": json.dumps(listeners)},
            **env)
        self.base = f"http://127.0.0.1:{self.port}"
        self.api = Api(self.base, TOKEN)
        harness.wait_nodes_ready(self.api, [self.proc], self.port)

    def records(self, listener: str, kind: str | None = None) -> list[dict[str, Any]]:
        path = self.dir / f"{listener}.jsonl"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [row for row in rows if kind is None or row["kind"] == kind]

    def events(self, listener: str, job_id: int | None = None) -> list[dict[str, Any]]:
        return [row["event"] for row in self.records(listener, "event")
                if job_id is None or row["event"]["job_id"] == job_id]

    def wait_final_event(self, listener: str, job_id: int, timeout: float = 20) -> None:
        """Until ``listener`` got the job-level change that ended ``job_id``."""
        final = {"SUCCEED", "ERROR", "STOPPED", "DISCARDED"}
        wait_for(lambda: any(e["step"] is None and e["new"] in final
                             for e in self.events(listener, job_id)),
                 timeout, 0.05, f"{listener} to get the end of job {job_id}")

    def run(self, name: str, steps: list[dict[str, Any]] | None = None,
            states: tuple[str, ...] = ("SUCCEED",)) -> int:
        job_id = self.api.submit({"name": name,
                                  "steps": steps or [{"name": "s", "type": "noop"}]})
        self.api.wait_job(job_id, states)
        return job_id


def changes(events: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str]]:
    return [(e["step"], e["old"], e["new"]) for e in events]


def shell(name: str, script: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type": "shell", "argv": ["sh", "-c", script], **fields}


def sleeper() -> list[dict[str, Any]]:
    return [shell("s", "sleep 30")]


# -- every change -----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_listener_gets_every_job_and_step_change(harness: Harness, tmp_path: Path) -> None:
    node = Node(harness, tmp_path, [f"{FIXTURES}:Recorder", "jobserver.listeners:LoggingListener"])
    ok = node.run("two-steps", [{"name": "a", "type": "noop"}, shell("b", "true")])
    failed = node.run("fails", [shell("s", "false", retries=1, retry_backoff=0)],
                      states=("ERROR",))
    paused = node.api.submit({"name": "paused", "steps": sleeper()})
    discarded = node.api.submit({"name": "discarded", "steps": sleeper()})
    for job_id, action in ((paused, "pause"), (discarded, "discard")):
        wait_for(lambda: node.api.job(job_id)["steps"][0]["state"] == "RUNNING", 15, 0.05,
                 f"job {job_id}'s step to run")
        node.api.call("POST", f"/api/v1/jobs/{job_id}/{action}")
    for job_id in (ok, failed, paused, discarded):
        node.wait_final_event("Recorder", job_id)

    expected = {
        ok: [(None, "READY", "RUNNING"), ("a", "READY", "RUNNING"), ("a", "RUNNING", "SUCCEED"),
             ("b", "READY", "RUNNING"), ("b", "RUNNING", "SUCCEED"),
             (None, "RUNNING", "SUCCEED")],
        failed: [(None, "READY", "RUNNING"), ("s", "READY", "RUNNING"), ("s", "RUNNING", "READY"),
                 ("s", "READY", "RUNNING"), ("s", "RUNNING", "ERROR"),
                 (None, "RUNNING", "ERROR")],
        paused: [(None, "READY", "RUNNING"), ("s", "READY", "RUNNING"),
                 ("s", "RUNNING", "STOPPED"), (None, "RUNNING", "STOPPED")],
        discarded: [(None, "READY", "RUNNING"), ("s", "READY", "RUNNING"),
                    ("s", "RUNNING", "DISCARDED"), (None, "RUNNING", "DISCARDED")],
    }
    names = {ok: "two-steps", failed: "fails", paused: "paused", discarded: "discarded"}
    for job_id, sequence in expected.items():
        events = node.events("Recorder", job_id)
        assert changes(events) == sequence, (job_id, events)
        for event in events:
            assert event["job_name"] == names[job_id] and event["node"] == "node-1", event
            assert isinstance(event["fence"], int) and event["attempt"] >= 1, event
            assert isinstance(event["at"], float), event
        # Everything the node wrote to the audit trail reached the listener.
        audit = node.api.get(f"/api/v1/jobs/{job_id}/events")
        audit = audit["events"] if isinstance(audit, dict) else audit
        by_node = {(row["step"], row["from_state"], row["to_state"])
                   for row in audit if row["node"]}
        assert by_node <= set(sequence), (job_id, audit)
    retry = [e for e in node.events("Recorder", failed) if e["step"] == "s"]
    assert [e["attempt"] for e in retry] == [1, 1, 2, 2], retry
    assert node.events("Recorder", paused)[-1]["message"] == "stopped by operator"

    # The default listener logged the changes with the job's fields.
    line = wait_for(lambda: [l for l in node.proc.output().splitlines()
                             if f"job {ok} (two-steps): RUNNING -> SUCCEED" in l], 10, 0.05,
                    "the logging listener's line")[0]
    assert f"job={ok}" in line and "node=node-1" in line and "fence=" in line, line
    assert "attempt=1" in line, line


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_listener_of_the_rescuing_node_gets_the_rescue(harness: Harness, tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    dirs = {name: tmp_path / name for name in ("node-1", "node-2")}
    procs = {}
    for name, folder in dirs.items():
        folder.mkdir()
        procs[name] = harness.start_node(
            name, port, data_dir, PYTHONPATH=str(ROOT),
            **{DIR_ENV: str(folder),
               "JOBSERVER_SCHEDULER__LISTENERS": json.dumps([f"{FIXTURES}:Recorder"])})
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    active = harness.wait_nodes_ready(api, list(procs.values()), port)["active"]
    survivor = next(name for name in procs if name != active)
    job_id = api.submit({"name": "rescued", "steps": [shell("s", "sleep 2")]})
    wait_for(lambda: api.job(job_id)["steps"][0]["state"] == "RUNNING", 15, 0.05,
             "the job to run on the active node")
    harness.kill9(procs[active])
    api.wait_job(job_id, timeout=30)

    def events() -> list[dict[str, Any]]:
        path = dirs[survivor] / "Recorder.jsonl"
        rows = [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []
        return [r["event"] for r in rows if r["kind"] == "event"
                and r["event"]["job_id"] == job_id]

    wait_for(lambda: (e := events()) and e[-1]["new"] == "SUCCEED", 15, 0.05,
             "the survivor's listener to get the job's end")
    got = events()
    assert changes(got) == [(None, "RUNNING", "READY"), (None, "READY", "RUNNING"),
                            ("s", "READY", "RUNNING"), ("s", "RUNNING", "SUCCEED"),
                            (None, "RUNNING", "SUCCEED")], got
    rescue = got[0]
    assert rescue["node"] == survivor and rescue["attempt"] == 1, rescue
    assert rescue["message"].startswith(f"node {active} died ("), rescue
    assert rescue["message"].endswith("); now READY"), rescue
    assert got[1]["attempt"] == 2 and got[1]["fence"] > rescue["fence"], got


# -- failures ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_raising_listener_is_restarted_and_the_event_dropped(harness: Harness,
                                                             tmp_path: Path) -> None:
    node = Node(harness, tmp_path, [f"{FIXTURES}:RaisesOnce"])
    before = node.run("before")
    node.wait_final_event("RaisesOnce", before)
    trigger = node.run(TRIGGER)
    after = node.run("after")
    node.wait_final_event("RaisesOnce", after)

    raised = node.records("RaisesOnce", "raised")
    assert len(raised) == 1 and raised[0]["instance"] == 1, raised
    dropped = (None, "READY", "RUNNING")
    assert (raised[0]["event"]["job_id"], *changes([raised[0]["event"]])[0]) == (trigger,
                                                                                 *dropped)
    created = [r["instance"] for r in node.records("RaisesOnce", "created")]
    assert created == [1, 2], created
    assert [r["instance"] for r in node.records("RaisesOnce", "closed")] == [1]
    events = node.records("RaisesOnce", "event")
    # Before the failure, instance 1; after it, instance 2, without the dropped event.
    assert {r["instance"] for r in events if r["event"]["job_id"] == before} == {1}
    trigger_events = [r for r in events if r["event"]["job_id"] == trigger]
    assert {r["instance"] for r in trigger_events} == {2}, trigger_events
    assert changes([r["event"] for r in trigger_events]) == [
        ("s", "READY", "RUNNING"), ("s", "RUNNING", "SUCCEED"), (None, "RUNNING", "SUCCEED")]
    assert changes(node.events("RaisesOnce", after))[0] == (None, "READY", "RUNNING")

    log = node.proc.output()
    assert "listener tests.listener_fixtures:RaisesOnce raised RuntimeError" in log, log
    assert "the event is dropped" in log
    samples = scrape(node.base, TOKEN)
    label = f"{FIXTURES}:RaisesOnce"
    assert value(samples, "jobserver_listener_restarts_total", listener=label) == 1
    assert value(samples, "jobserver_listener_events_dropped_total", listener=label,
                 reason="failed") == 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_retryable_error_restarts_and_redelivers_the_last_event_of_each_job(
        harness: Harness, tmp_path: Path) -> None:
    node = Node(harness, tmp_path, [f"{FIXTURES}:RetriesOnce"])
    first = node.run("first", [{"name": "a", "type": "noop"}, {"name": "b", "type": "noop"}])
    node.wait_final_event("RetriesOnce", first)
    second = node.run("second")
    node.wait_final_event("RetriesOnce", second)
    trigger = node.run(TRIGGER)
    node.wait_final_event("RetriesOnce", trigger)

    assert [r["instance"] for r in node.records("RetriesOnce", "created")] == [1, 2]
    events = node.records("RetriesOnce", "event")
    one = [r["event"] for r in events if r["instance"] == 1]
    two = [r["event"] for r in events if r["instance"] == 2]
    assert {e["job_id"] for e in one} == {first, second}, one
    # Instance 2 first gets again the last event of each job seen (oldest first), the
    # one it failed on included, then goes on with the trigger job.
    last_first = [e for e in one if e["job_id"] == first][-1]
    last_second = [e for e in one if e["job_id"] == second][-1]
    raised = node.records("RetriesOnce", "raised")[0]["event"]
    assert two[:3] == [last_first, last_second, raised], two
    assert changes([last_first, last_second]) == [(None, "RUNNING", "SUCCEED")] * 2
    assert [e["job_id"] for e in two[3:]] == [trigger] * 3, two
    assert changes(two[3:]) == [("s", "READY", "RUNNING"), ("s", "RUNNING", "SUCCEED"),
                                (None, "RUNNING", "SUCCEED")]
    assert "it receives the last event of each job again" in node.proc.output()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_max_retries_disables_the_listener_with_an_error_log(harness: Harness,
                                                           tmp_path: Path) -> None:
    node = Node(harness, tmp_path, [f"{FIXTURES}:AlwaysFails", f"{FIXTURES}:Recorder"],
                JOBSERVER_SCHEDULER__LISTENER_MAX_RETRIES="2")
    steps = [{"name": f"s{i}", "type": "noop"} for i in range(3)]
    first = node.run("many-events", steps)
    message = f"listener {FIXTURES}:AlwaysFails disabled after 2 restarts"
    line = wait_for(lambda: [l for l in node.proc.output().splitlines() if message in l],
                    15, 0.05, "the disabled listener's error line")[0]
    assert " ERROR " in line, line
    # Later jobs run, the other listener gets them, the disabled one is not called again.
    later = node.run("later")
    node.wait_final_event("Recorder", later)
    node.wait_final_event("Recorder", first)
    assert len(node.records("AlwaysFails", "raised")) == 3
    assert [r["instance"] for r in node.records("AlwaysFails", "created")] == [1, 2, 3]
    assert len(node.events("Recorder", first)) == 2 + 2 * len(steps)
    samples = scrape(node.base, TOKEN)
    label = f"{FIXTURES}:AlwaysFails"
    assert value(samples, "jobserver_listener_enabled", listener=label) == 0
    assert value(samples, "jobserver_listener_enabled", listener=f"{FIXTURES}:Recorder") == 1
    assert value(samples, "jobserver_listener_restarts_total", listener=label) == 2


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_slow_listener_never_delays_scheduling(harness: Harness, tmp_path: Path) -> None:
    queue = 8
    node = Node(harness, tmp_path, [f"{FIXTURES}:Slow", f"{FIXTURES}:Recorder"],
                JOBSERVER_SCHEDULER__LISTENER_QUEUE_SIZE=str(queue), **{SLOW_ENV: "60"})
    started = time.monotonic()
    for i in range(5):  # each would wait 60 s per event if the listener were in the way
        job_id = node.api.submit({"name": f"quick-{i}", "steps": [{"name": "s", "type": "noop"}]})
        node.api.wait_job(job_id, timeout=10)
        node.wait_final_event("Recorder", job_id, timeout=10)
    print(f"\n5 jobs with a 60 s-per-event listener took {time.monotonic() - started:.2f} s")
    assert len(node.records("Slow", "slow")) == 1  # still on its first event
    samples = scrape(node.base, TOKEN)
    # 5 jobs x 4 events: one taken, `queue` waiting, the oldest of the rest dropped.
    assert value(samples, "jobserver_listener_events_dropped_total",
                 listener=f"{FIXTURES}:Slow", reason="queue_full") == 5 * 4 - 1 - queue
    assert value(samples, "jobserver_listener_events_dropped_total", 0.0,
                 listener=f"{FIXTURES}:Recorder", reason="queue_full") == 0
    # Stopping does not wait for it for ever either.
    assert harness.terminate(node.proc, timeout=30) == 0, node.proc.tail()
    assert f"listener {FIXTURES}:Slow is still busy" in node.proc.output()


# -- the webhook listener ---------------------------------------------------------------
class Hook:
    """A local HTTP endpoint that answers 500 to the first POST of each delivery."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                delivery = self.headers["X-Jobserver-Delivery"]
                first = not any(p["delivery"] == delivery for p in hook.posts)
                status = 500 if first else 200
                hook.posts.append({"delivery": delivery, "status": status,
                                   "type": self.headers["Content-Type"],
                                   "body": json.loads(body)})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    hook = Hook()
    yield hook
    hook.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_webhook_listener_posts_each_event_and_retries_a_500(harness: Harness, tmp_path: Path,
                                                            hook: Hook) -> None:
    node = Node(harness, tmp_path, ["jobserver.listeners:LoggingListener"],
                JOBSERVER_SCHEDULER__WEBHOOK_URLS=hook.url,
                JOBSERVER_SCHEDULER__WEBHOOK_RETRIES="2")
    job_id = node.run("hooked", [{"name": "a", "type": "noop"}, {"name": "b", "type": "noop"}])

    def delivered() -> list[dict[str, Any]]:
        done = [p["body"] for p in hook.posts if p["status"] == 200]
        return done if any(b["step"] is None and b["new"] == "SUCCEED" for b in done) else []

    bodies = wait_for(delivered, 20, 0.05, "the webhook to get the job's end")
    assert changes(bodies) == [
        (None, "READY", "RUNNING"), ("a", "READY", "RUNNING"), ("a", "RUNNING", "SUCCEED"),
        ("b", "READY", "RUNNING"), ("b", "RUNNING", "SUCCEED"), (None, "RUNNING", "SUCCEED")]
    for body in bodies:
        assert body["job_id"] == job_id and body["job_name"] == "hooked", body
        assert body["node"] == "node-1" and isinstance(body["fence"], int), body
    # Each event: one 500, then the same body again, accepted.
    by_delivery: dict[str, list[dict[str, Any]]] = {}
    for post in hook.posts:
        by_delivery.setdefault(post["delivery"], []).append(post)
    assert len(by_delivery) == 6, hook.posts
    for posts in by_delivery.values():
        assert [p["status"] for p in posts] == [500, 200], posts
        assert posts[0]["body"] == posts[1]["body"]
        assert posts[0]["type"] == "application/json"


# -- configuration ----------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_listener_that_cannot_be_imported_stops_start_up(harness: Harness,
                                                           tmp_path: Path) -> None:
    env = harness.node_env("node-1", free_port(), tmp_path / "data",
                           JOBSERVER_SCHEDULER__LISTENERS="no_such_module:Listener")
    result = subprocess.run(JOBSERVER + ["serve"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=45)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "scheduler.listeners" in result.stderr, result.stderr
    assert "no_such_module:Listener" in result.stderr, result.stderr
    assert not harness.leftovers(), harness.leftovers()
