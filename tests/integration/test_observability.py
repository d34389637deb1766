"""Observability of real node processes: ``/metrics`` under gunicorn's workers, JSON
logs, and the ``jobserver cluster`` / ``jobserver jobs --watch`` views.

The metrics test runs a node with two API workers, lets jobs run, and scrapes
``/metrics`` many times (concurrently, so that both workers answer): every scrape must
agree with the store and with what was submitted, whichever worker served it, also
after a worker was killed and replaced.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jobserver.store import Store
from tests.helpers import free_port, wait_for
from tests.integration.nodes import JOBSERVER, TOKEN, Api, Harness, Proc, descendants
from tests.integration.scrape import Samples, scrape, value

STATES = ("READY", "RUNNING", "SUCCEED", "ERROR", "STOPPED", "DISCARDED")


def gunicorn_workers(node: Proc) -> set[int]:
    tree = descendants(node.pid)
    arbiters = {info.pid for info in tree if info.ppid == node.pid and "gunicorn" in info.cmdline}
    return {info.pid for info in tree if info.ppid in arbiters}


def store_counts(data_dir: Path) -> dict[str, int]:
    store = Store(f"sqlite:///{data_dir / 'jobserver.db'}")
    try:
        return store.jobs.count_by_state()
    finally:
        store.dispose()


# -- metrics ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_metrics_under_gunicorn_workers_match_the_store(harness: Harness,
                                                        tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    # A metrics file left by an earlier life of this node: `serve` must clear it.
    stale = data_dir / "metrics" / "node-1" / "counter_99999.db"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"not a metrics file")
    node = harness.start_node("node-1", port, data_dir, JOBSERVER_API__WORKERS="2")
    base = f"http://127.0.0.1:{port}"
    api = Api(base, TOKEN)
    harness.wait_nodes_ready(api, [node], port)
    assert not stale.exists()
    workers = wait_for(lambda: len(w := gunicorn_workers(node)) == 2 and w, 20, 0.1,
                       "two gunicorn workers")

    # Before any job: the labelled counters a dashboard or an alert reads are there at
    # 0, not absent ("No data" in Grafana, and an increase() that misses the first one).
    fresh = scrape(base, TOKEN)
    for state in ("SUCCEED", "ERROR", "STOPPED", "DISCARDED"):
        assert value(fresh, "jobserver_jobs_finished_total", state=state) == 0, state
    for step_type in ("noop", "shell", "python"):
        assert value(fresh, "jobserver_step_retries_total", type=step_type) == 0, step_type

    ok = [{"name": f"ok-{i}", "steps": [{"name": "s", "type": "noop"}]} for i in range(7)]
    bad = [{"name": f"bad-{i}", "steps": [{"name": "s", "type": "shell", "argv": ["false"]}]}
           for i in range(3)]
    with ThreadPoolExecutor(8) as pool:  # concurrent submits land on both workers
        ids = list(pool.map(api.submit, ok + bad))
    key = uuid.uuid4().hex  # an idempotent replay is not a second submission
    for _ in range(2):
        replayed = api.call("POST", "/api/v1/jobs", ok[0], {"Idempotency-Key": key},
                            expect=(200, 201))
    ids.append(int(replayed["id"]))
    for job_id in ids[:7] + ids[10:]:
        api.wait_job(job_id)
    for job_id in ids[7:10]:
        api.wait_job(job_id, ("ERROR",))
    submitted = len(ids)
    counts = store_counts(data_dir)
    assert counts == {"SUCCEED": 8, "ERROR": 3}, counts

    def check(samples: Samples) -> None:
        assert value(samples, "jobserver_jobs_submitted_total") == submitted
        assert value(samples, "jobserver_jobs_finished_total", state="SUCCEED") == 8
        assert value(samples, "jobserver_jobs_finished_total", state="ERROR") == 3
        assert value(samples, "jobserver_jobs_claimed_total") == submitted
        for state in STATES:
            assert value(samples, "jobserver_jobs", state=state) == counts.get(state, 0), state
        assert value(samples, "jobserver_dispatch_latency_seconds_count") == submitted
        steps = sum(v for (name, labels), v in samples.items()
                    if name == "jobserver_step_duration_seconds_count")
        assert steps == submitted
        assert value(samples, "jobserver_running_jobs") == 0
        assert value(samples, "jobserver_scheduler_active") == 1
        assert value(samples, "jobserver_failovers_total") == 1
        assert value(samples, "jobserver_node_alive", node="node-1") == 1
        assert value(samples, "jobserver_node_dead", node="node-1") == 0

    # The running gauge is sampled at each heartbeat: let one pass after the last job.
    wait_for(lambda: value(scrape(base, TOKEN), "jobserver_running_jobs") == 0, 10, 0.1,
             "the running-jobs gauge to drop to 0 at the next heartbeat")

    # Scrape in concurrent bursts until both workers have served (each writes its own
    # files under the node's metrics directory, named by pid); every scrape must agree.
    metrics_dir = data_dir / "metrics" / "node-1"
    served: set[int] = set()
    scrapes = 0

    def burst() -> bool:
        nonlocal scrapes
        with ThreadPoolExecutor(6) as pool:
            for samples in pool.map(lambda _: scrape(base, TOKEN), range(6)):
                check(samples)
                scrapes += 1
        served.update(int(p.stem.rsplit("_", 1)[1]) for p in metrics_dir.glob("counter_*.db"))
        return workers <= served

    wait_for(burst, 30, 0.05, f"both API workers {workers} to serve /metrics")
    print(f"\n{scrapes} scrapes, served by {sorted(served & workers)}, all consistent")

    # Sequential scrapes count each other exactly, summed over both workers.
    previous = None
    for _ in range(6):
        samples = scrape(base, TOKEN)
        check(samples)
        seen = value(samples, "jobserver_api_requests_total", 0.0, route="/metrics",
                     method="GET", status="200")
        if previous is not None:
            assert seen == previous + 1, (previous, seen)
        previous = seen

    # A worker killed and replaced: its counts stay (dead workers are marked, not lost).
    victim = sorted(workers)[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(w := gunicorn_workers(node)) == 2 and victim not in w, 30, 0.1,
             "gunicorn to replace the killed worker")
    for _ in range(6):
        check(wait_for(lambda: _try_scrape(base), 10, 0.1, "a scrape after the kill"))


def _try_scrape(base: str) -> Samples | None:
    try:
        return scrape(base, TOKEN)
    except OSError:
        return None


# -- JSON logs --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_json_logs_one_object_per_line_with_the_job_fields(harness: Harness,
                                                           tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    node = harness.spawn("node-1", ["--log-format", "json", "serve"],
                         harness.node_env("node-1", port, data_dir))
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    harness.wait_nodes_ready(api, [node], port)
    good = api.submit({"name": "logged", "steps": [{"name": "s", "type": "noop"}]})
    bad = api.submit({"name": "failing", "steps": [
        {"name": "boom", "type": "shell", "argv": ["false"], "retries": 1,
         "retry_backoff": 0}]})
    api.wait_job(good)
    api.wait_job(bad, ("ERROR",))
    # gunicorn's own lines are JSON too: a killed worker makes its arbiter log an error.
    worker = wait_for(lambda: sorted(gunicorn_workers(node)), 20, 0.1, "a gunicorn worker")[0]
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: f"(pid:{worker}) was sent SIGKILL" in node.output(), 20, 0.1,
             "gunicorn's error line about the killed worker")
    assert harness.terminate(node) == 0, node.tail()

    lines = [line for line in node.output().splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    for body in records:
        assert {"time", "level", "logger", "message"} <= body.keys(), body
        assert body["node"] == "node-1", body  # every line of a node names it
    killed = [r for r in records if f"(pid:{worker}) was sent SIGKILL" in r["message"]]
    assert killed and killed[0]["logger"] == "gunicorn.error", killed
    assert killed[0]["level"] == "ERROR" and killed[0]["pid"] != node.pid, killed
    about = {job: [r for r in records if r.get("job_id") == job] for job in (good, bad)}
    for job, found in about.items():
        assert found, f"no line about job {job}"
        for body in found:
            assert isinstance(body["fence"], int) and isinstance(body["attempt"], int), body
    claimed = [r for r in about[good] if r["message"].startswith(f"claimed job {good}")]
    assert claimed and claimed[0]["attempt"] == 1, about[good]
    step_lines = [r for r in about[bad] if r.get("step") == "boom"]
    assert {(r["attempt"], r["message"].split(": ")[1]) for r in step_lines} >= {
        (1, "READY -> RUNNING"), (2, "RUNNING -> ERROR")}, step_lines
    assert any(r["message"].startswith(f"job {bad} (failing): RUNNING -> ERROR")
               for r in about[bad])
    assert Counter(r["pid"] for r in records)[node.pid] >= len(about[good])


# -- the CLI views ----------------------------------------------------------------------
def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
    return subprocess.run(JOBSERVER + list(args), env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cluster_view_and_jobs_watch(harness: Harness, tmp_path: Path) -> None:
    port = free_port()
    node = harness.start_node("node-1", port, tmp_path / "data")
    base = f"http://127.0.0.1:{port}"
    api = Api(base, TOKEN)
    harness.wait_nodes_ready(api, [node], port)
    job = api.submit({"name": "viewed", "steps": [{"name": "s", "type": "noop"}]})
    api.wait_job(job)
    auth = ["--url", base, "--token", TOKEN]

    result = cli("cluster", *auth)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("mode: single") and "active: node-1" in lines[0], lines
    assert "READY 0" in lines[1] and "SUCCEED 1" in lines[1], lines
    header = lines[3].split()
    assert header[:5] == ["NODE", "ROLE", "STATE", "HEARTBEAT", "RUNNING"], lines
    row = lines[4].split()
    assert row[:3] == ["node-1", "active", "alive"] and row[3].endswith("s"), lines
    assert row[4] == "0" and row[7] == str(node.pid), lines

    result = cli("jobs", "--watch", "--interval", "0.1", "--count", "3", *auth)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Every 0.1s: jobserver jobs") == 3, result.stdout
    rows = re.findall(rf"^{job}\s+viewed\s+SUCCEED\s+1/1\s", result.stdout, re.M)
    assert len(rows) == 3, result.stdout

    result = cli("cluster", "--watch", "--interval", "0.1", "--count", "2", *auth)
    assert result.returncode == 0 and result.stdout.count("active: node-1") == 2, result

    result = cli("cluster", "--url", base, "--token", "wrong-token-0123456789")
    assert result.returncode == 1 and "invalid token" in result.stderr, result
