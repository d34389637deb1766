"""Schedules on a real ``jobserver serve`` node, in each scheduler mode: created and
enabled through the API, evaluated by the node that holds the planner seat, their
jobs run; disabling stops them (discarding the jobs launched ahead of fire times
still to come); the evaluations say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import free_port, wait_for
from tests.integration.nodes import TOKEN, Api, Harness
from tests.integration.scrape import scrape, value

SCHEDULE = {"name": "tick", "trigger": {"type": "time", "interval": "1s"},
            "template": {"name": "ticked", "steps": [{"name": "s", "type": "noop"}]},
            "properties": {"source": "schedule"}}


def launched(api: Api) -> list[dict]:
    page = api.get("/api/v1/schedules/default/tick/jobs?limit=200")
    return [job for job in page["schedule_jobs"] if job["state"] == "LAUNCHED"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["single", "distributed", "leader"])
def test_a_schedule_runs_jobs_on_a_real_node(harness: Harness, tmp_path: Path,
                                             mode: str) -> None:
    port = free_port()
    node = harness.start_node("n1", port, tmp_path / "data",
                              JOBSERVER_SCHEDULER__MODE=mode)
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    if mode == "distributed":  # every node schedules: none is "the active one"
        wait_for(lambda: any(n["alive"] for n in api.cluster()["nodes"]), 40, 0.1,
                 "the node registered")
    else:
        harness.wait_nodes_ready(api, [node], port)
    created = api.call("POST", "/api/v1/schedules", SCHEDULE, expect=(201,))
    assert created["enabled"] is False  # CDAP: created disabled
    api.call("POST", "/api/v1/schedules/default/tick/enable")
    runs = wait_for(lambda: len(launched(api)) >= 3 and launched(api), 30, 0.2,
                    "three launches")
    for run in runs[:3]:
        job = api.wait_job(run["job_id"])
        assert job["name"] == "ticked" and job["params"] == {"source": "schedule"}
    fire_times = [run["fire_time"] for run in launched(api)]
    assert len(fire_times) == len(set(fire_times))  # no fire time launched twice
    reasons = api.get("/api/v1/schedules/default/tick/evaluations")["evaluations"]
    assert any(e["outcome"] == "launched" for e in reasons)
    samples = scrape(api.base_url, TOKEN)
    assert value(samples, "jobserver_schedule_launches_total") >= 3
    api.call("POST", "/api/v1/schedules/default/tick/disable")
    settled = len(launched(api))
    wait_for(lambda: api.get("/api/v1/schedules/default/tick")["enabled"] is False, 5)
    jobs = api.jobs()
    discarded = [job for job in jobs if job["state"] == "DISCARDED"]
    assert all(job["not_before"] for job in discarded)  # only those launched ahead
    for job in jobs:
        if job["state"] != "DISCARDED":
            api.wait_job(job["id"])
    assert len(launched(api)) <= settled + 1  # at most one launch was under way
    harness.terminate(node)
