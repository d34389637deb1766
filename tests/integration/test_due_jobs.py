"""Jobs held back by ``not_before`` start at their time, not at the scheduler's poll.

The store tells an idle scheduler how long until the earliest such job is due; the
scheduler sleeps that long. A node polling once a minute must still start a job due
in two seconds within a fraction of a second of its time, in every mode.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobserver.spec import Policy, parse_job, validate_job
from jobserver.store import Store
from tests.helpers import free_port, job_spec, wait_for
from tests.integration.nodes import TOKEN, Api, Harness

#: How late a due job may start in these tests: it measures the machine (a loaded CI
#: runner), not the product; without the timer the lateness is the 60 s poll.
LATENESS_BOUND = 1.0


def _submit(store: Store, name: str, **fields: object) -> int:
    spec = parse_job(json.dumps({**job_spec(name=name), **fields}, default=str))
    job, _ = store.jobs.submit(spec, validate_job(spec, Policy(lambda _name: True, None)))
    return job.id


def _roles(api: Api) -> list[str] | None:
    try:
        return [node["role"] for node in api.cluster()["nodes"] if node["alive"]]
    except Exception:  # noqa: BLE001 - not serving yet
        return None


def _in(seconds: float) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).isoformat()


def test_no_held_back_job_means_no_due_time(store: Store) -> None:
    _submit(store, "due-now")
    _submit(store, "due-already", not_before=_in(-60))
    assert store.runs.seconds_until_due("node-1") is None


def test_the_earliest_held_back_job_sets_the_due_time(store: Store) -> None:
    _submit(store, "later", not_before=_in(300))
    _submit(store, "sooner", not_before=_in(30))
    due = store.runs.seconds_until_due("node-1")
    assert due is not None and 25 < due <= 30, due


def test_jobs_waiting_for_upstreams_have_no_due_time_yet(store: Store) -> None:
    upstream = _submit(store, "upstream")
    _submit(store, "waits", not_before=_in(30), after=[{"job": upstream, "when": "done"}])
    assert store.runs.seconds_until_due("node-1") is None


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["single", "distributed", "leader"])
def test_an_idle_node_starts_a_due_job_at_its_time_not_at_its_poll(
        tmp_path: Path, mode: str) -> None:
    harness = Harness(tmp_path)
    try:
        port = free_port()
        node = harness.start_node("node-1", port, tmp_path / "data",
                                  JOBSERVER_SCHEDULER__MODE=mode,
                                  JOBSERVER_SCHEDULER__POLL_INTERVAL="60")
        api = Api(f"http://127.0.0.1:{port}", TOKEN)
        if mode == "distributed":  # every node schedules; none is "the" active one
            wait_for(lambda: _roles(api) == ["active"], 40, 0.1, "the node to schedule")
        else:
            harness.wait_nodes_ready(api, [node], port)
        due_at = datetime.now(timezone.utc) + timedelta(seconds=2)
        job_id = api.submit({"name": "due", "not_before": due_at.isoformat(),
                             "steps": [{"name": "s", "type": "noop"}]})
        job = api.wait_job(job_id, timeout=10)
        started = datetime.fromisoformat(job["started_at"])
        late = (started - due_at).total_seconds()
        print(f"\n{mode}: started {late * 1000:.1f} ms after its not_before")
        assert 0 <= late < LATENESS_BOUND, (started, due_at)
    finally:
        harness.cleanup()
