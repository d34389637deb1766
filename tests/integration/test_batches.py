"""Batches with real stage jobs, on SQLite and PostgreSQL: the seed's catch-up, reruns
and resume, concurrent runs, and the runtime audit. A runner in-process runs the stage
jobs; the tracker's rounds are driven by the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import pytest

from jobserver.batches.audit import AuditFilter
from jobserver.batches.planner import RunRequest, plan_run
from jobserver.batches.records import RunRecord, RunStatus, Status
from jobserver.batches.spec import parse_batch_config
from jobserver.batches.store import BatchFilter
from jobserver.batches.tracker import BatchTracker
from jobserver.exceptions import InvalidRequest
from jobserver.spec import Policy, parse_model
from jobserver.store import Store
from tests.helpers import wait_for
from tests.integration.test_runner import PYTHON_STEPS, Harness

RAN: list[tuple[str, str, str]] = []  # (business_date, stage, step) in the order run
FAIL: set[tuple[str, str]] = set()  # (stage, step) that fail while present
LOCK = threading.Lock()


def _step(ctx: Any) -> dict[str, Any]:
    with LOCK:
        RAN.append((ctx.params["business_date"], ctx.params["stage"], ctx.step))
    if (ctx.params["stage"], ctx.step) in FAIL:
        raise RuntimeError(f"{ctx.step} failed")
    return {"records_out": 10}


PYTHON_STEPS.register("test.batch_step", _step)
POLICY = Policy(PYTHON_STEPS.is_registered, None)
DAY0 = date(2024, 1, 1)


def _jobs(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{i}", "type": "python", "callable": "test.batch_step"}
            for i in range(1, count + 1)]


def config(**overrides: Any) -> dict[str, Any]:
    """ORDER: STG -> FND+SNAPSHOT (a pair), ten jobs in FND."""
    body = {
        "valid_systems": ["ORDER"], "valid_stages": ["STG", "FND", "SNAPSHOT"],
        "valid_locations": ["IN", "US"],
        "system_stage_mapping": [{"system": "ORDER", "stages": ["STG", "FND", "SNAPSHOT"],
                                  "start_date": DAY0.isoformat()}],
        "job_group_mapping": [
            {"system": "ORDER", "stage": "STG", "job_group": ["STG_GROUP"]},
            {"system": "ORDER", "stage": "FND", "job_group": ["FND_GROUP"]},
            {"system": "ORDER", "stage": "SNAPSHOT", "job_group": ["SNAP_GROUP"]}],
        "job_groups": [{"name": "STG_GROUP", "jobs": _jobs("stg", 2)},
                       {"name": "FND_GROUP", "jobs": _jobs("fnd", 10)},
                       {"name": "SNAP_GROUP", "jobs": _jobs("snap", 1)}],
        "stage_pairs": [["FND", "SNAPSHOT"]], "catch_up_limit": 3}
    body.update(overrides)
    return body


@pytest.fixture
def harness(store: Store) -> Iterator[Harness]:
    RAN.clear()
    FAIL.clear()
    h = Harness(store)
    yield h
    h.close()


def put(store: Store, **overrides: Any) -> None:
    store.batch_configs.put(parse_batch_config(config(**overrides)))


def finish(harness: Harness, run: RunRecord, timeout: float = 30) -> RunRecord:
    """Drive the tracker and the runner until the run ends."""
    tracker = BatchTracker(harness.store, None, POLICY)

    def done() -> RunRecord | None:
        tracker.settle()
        harness.claim()
        found = harness.store.batches.run(run.id)
        return found if found.status is not RunStatus.RUNNING else None
    return wait_for(done, timeout, 0.05, f"batch run {run.id} to end")


def run(harness: Harness, stage: str | None = None, **fields: Any) -> RunRecord:
    request = parse_model(RunRequest, {"system": "ORDER", "location": "IN", "stage": stage,
                                         **fields})
    return finish(harness, plan_run(harness.store, request, POLICY))


def statuses(store: Store) -> dict[str, dict[str, str]]:
    return {b.business_date.isoformat(): {s.stage: s.status.value for s in b.stages}
            for b in store.batches.list(BatchFilter(system="ORDER", location="IN"))}


def day(n: int) -> str:
    return (DAY0 + timedelta(days=n - 1)).isoformat()


def test_catch_up_ten_days_behind_three_periods_per_run(harness: Harness) -> None:
    put(harness.store)
    watermark = day(10)
    for first, last in ((1, 3), (4, 6), (7, 9), (10, 10)):
        RAN.clear()
        stg = run(harness, "STG", watermark=watermark)
        assert stg.status is RunStatus.SUCCESS
        assert [d for d, _s, step in RAN if step == "stg1"] == [day(n) for n in
                                                                range(first, last + 1)]
        RAN.clear()
        fnd = run(harness, "FND")
        assert fnd.status is RunStatus.SUCCESS
        # FND then SNAPSHOT for a date, before the next date
        order = [(d, s) for d, s, step in RAN if step in ("fnd1", "snap1")]
        assert order == [(day(n), s) for n in range(first, last + 1)
                         for s in ("FND", "SNAPSHOT")]
    table = statuses(harness.store)
    assert len(table) == 10 and all(set(row.values()) == {"SUCCESS"} for row in table.values())
    assert all(b.status is Status.SUCCESS
               for b in harness.store.batches.list(BatchFilter(system="ORDER")))
    RAN.clear()
    nothing = run(harness, "STG", watermark=watermark)
    assert nothing.status is RunStatus.NOTHING and "no new business date" in nothing.message
    assert RAN == []


def test_a_whole_system_run_goes_stage_by_stage(harness: Harness) -> None:
    put(harness.store)
    done = run(harness, watermark=day(2))
    assert done.status is RunStatus.SUCCESS
    stages = [(d, s) for d, s, step in RAN if step in ("stg1", "fnd1", "snap1")]
    assert stages == [(day(1), "STG"), (day(2), "STG"), (day(1), "FND"),
                      (day(1), "SNAPSHOT"), (day(2), "FND"), (day(2), "SNAPSHOT")]


def test_rerun_after_failure_starts_the_stage_over(harness: Harness) -> None:
    put(harness.store)
    assert run(harness, "STG", watermark=day(1)).status is RunStatus.SUCCESS
    FAIL.add(("FND", "fnd5"))
    failed = run(harness, "FND")
    assert failed.status is RunStatus.FAILED and "fnd5 failed" in failed.message
    assert statuses(harness.store)[day(1)]["FND"] == "FAILED"
    FAIL.clear()
    RAN.clear()
    assert run(harness, "FND").status is RunStatus.SUCCESS
    assert [step for _d, s, step in RAN if s == "FND"] == [f"fnd{i}" for i in range(1, 11)]
    assert statuses(harness.store)[day(1)] == {"STG": "SUCCESS", "FND": "SUCCESS",
                                               "SNAPSHOT": "SUCCESS"}


def test_resume_from_failure_resumes_from_the_fifth_of_ten_jobs(harness: Harness) -> None:
    put(harness.store, stage_settings={"FND": {"resume_from_failure": True}})
    run(harness, "STG", watermark=day(1))
    FAIL.add(("FND", "fnd5"))
    assert run(harness, "FND").status is RunStatus.FAILED
    first_job = harness.store.batches.list(BatchFilter())[0].stage("FND").job_id
    FAIL.clear()
    RAN.clear()
    assert run(harness, "FND").status is RunStatus.SUCCESS
    assert [step for _d, s, step in RAN if s == "FND"] == [f"fnd{i}" for i in range(5, 11)]
    stage = harness.store.batches.list(BatchFilter())[0].stage("FND")
    assert stage.job_id == first_job and stage.runs == 2  # the engine's resume
    # The batch is named as the job's submitter and as the one who resumed it.
    assert harness.store.jobs.get(first_job).submitted_by == "batch ORDER/IN"
    assert [event.actor for event in harness.store.jobs.events(first_job)
            if event.message == "resume" and event.step is None] == ["batch ORDER/IN"]


def test_a_resumed_stage_keeps_its_failed_launch_in_the_audit(harness: Harness) -> None:
    """A resume runs the same engine job's steps again in place: the failed launch's
    jobs were copied when it ended, so the audit still shows fnd5 FAILED in launch 1."""
    put(harness.store, stage_settings={"FND": {"resume_from_failure": True}})
    run(harness, "STG", watermark=day(1))
    FAIL.add(("FND", "fnd5"))
    assert run(harness, "FND").status is RunStatus.FAILED
    FAIL.clear()
    assert run(harness, "FND").status is RunStatus.SUCCESS
    rows = harness.store.batch_audit.rows(AuditFilter(system="ORDER", stage="FND"))
    launches = [r for r in rows if r.work_unit == "stage"]
    assert [(r.instance_id.split("-", 1)[1], r.status, r.launch) for r in launches] == [
        ("FND-1", "FAILED", 1), ("FND-2", "SUCCESS", 2)]
    assert launches[0].job_id == launches[1].job_id and "fnd5 failed" in launches[0].message
    assert launches[0].end_time <= launches[1].start_time
    jobs = {r.instance_id.split("-", 1)[1]: (r.status, r.message)
            for r in rows if r.work_unit == "job"}
    assert jobs["FND-1-fnd5"][0] == "FAILED" and "fnd5 failed" in jobs["FND-1-fnd5"][1]
    assert (jobs["FND-1-fnd4"], jobs["FND-1-fnd6"]) == (("SUCCESS", None),
                                                          ("NOT_STARTED", None))
    assert jobs["FND-2-fnd5"] == ("SUCCESS", None)
    assert launches[0].metrics["records_out"] == 40  # fnd1..fnd4, 10 records each
    failed = harness.store.batch_audit.rows(AuditFilter(system="ORDER", status="FAILED"))
    assert [r.instance_id.split("-", 1)[1] for r in failed] == ["FND-1", "FND-1-fnd5"]


def test_two_runs_at_once_launch_a_stage_once(harness: Harness) -> None:
    put(harness.store)
    request = parse_model(RunRequest, {"system": "ORDER", "location": "IN", "stage": "STG",
                                         "watermark": day(1)})
    first = plan_run(harness.store, request, POLICY)
    second = plan_run(harness.store, request, POLICY)
    assert finish(harness, first).status is RunStatus.SUCCESS
    assert finish(harness, second).status is RunStatus.SUCCESS
    assert [step for _d, _s, step in RAN] == ["stg1", "stg2"]
    assert harness.store.batches.list(BatchFilter())[0].stage("STG").runs == 1


def test_runtime_audit_has_a_row_per_batch_stage_and_job(harness: Harness) -> None:
    put(harness.store)
    run(harness, "STG", watermark=day(1))
    rows = harness.store.batch_audit.rows(AuditFilter(system="ORDER"))
    batch = next(r for r in rows if r.work_unit == "batch")
    stage = next(r for r in rows if r.work_unit == "stage" and r.work_unit_name == "STG")
    jobs = [r for r in rows if r.work_unit == "job" and r.parent_id == stage.instance_id]
    assert stage.parent_id == batch.instance_id and stage.status == "SUCCESS"
    assert [j.work_unit_name for j in jobs] == ["stg1", "stg2"]
    assert jobs[0].instance_id == f"{stage.instance_id}-stg1"
    assert jobs[0].metrics["records_out"] == 10 and "cpu_milliseconds" in jobs[0].metrics
    assert all(j.status == "SUCCESS" and j.start_time and j.end_time for j in jobs)
    assert (jobs[0].system, jobs[0].location, jobs[0].business_date) == ("ORDER", "IN", DAY0)


@pytest.mark.parametrize("fields, field", [
    ({"system": "NOPE"}, "system"), ({"location": "XX"}, "location"),
    ({"stage": "PLP"}, "stage"), ({"stage": "SNAPSHOTS"}, "stage"),
    ({"context": {"colour": "red"}}, "context.colour"),
    ({"business_date": day(5), "watermark": day(3)}, "business_date")])
def test_bad_input_names_the_field_and_stores_nothing(store: Store, fields: dict[str, Any],
                                                      field: str) -> None:
    put(store, valid_stages=["STG", "FND", "SNAPSHOT", "PLP"])
    body = {"system": "ORDER", "location": "IN", "stage": "STG", "watermark": day(3),
            **fields}
    with pytest.raises(InvalidRequest) as caught:
        plan_run(store, parse_model(RunRequest, body), POLICY)
    assert caught.value.details[0]["field"] == field
    assert store.batches.list(BatchFilter()) == []
