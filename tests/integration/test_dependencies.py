"""Job dependencies (``after``) on SQLite and PostgreSQL: a job waits, unclaimable,
until its upstreams are final for its purpose, whichever write makes them so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobserver.api import create_app
from jobserver.cli import waits_for
from jobserver.config import load_config
from jobserver.exceptions import Conflict, InvalidRequest
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.store import Store
from jobserver.store.jobs import KeyedSubmit
from jobserver.store.records import Completion, StepOutcome
from tests.helpers import FakeLease, job_spec

POLICY = Policy(lambda name: False, None)
TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def submit(store: Store, *after: tuple[int, str], **fields: Any) -> int:
    spec = parse_job(json.dumps(job_spec(after=[{"job": job, "when": when}
                                                for job, when in after], **fields)))
    job, _ = store.jobs.submit(spec, validate_job(spec, POLICY))
    return job.id


def claimable(store: Store) -> list[int]:
    return [job_id for job_id, _key in store.runs.peek("n1", 100)]


def finish(store: Store, job_id: int, state: State) -> None:
    """Claim ``job_id`` and end it through the group commit (the runners' path)."""
    [job] = store.runs.claim("n1", FakeLease(store), 1, job_ids=[job_id])
    outcome = StepOutcome(state, error=None if state is State.SUCCEED else "boom")
    assert store.runs.complete([Completion(job.token(), job.steps[0], 1, outcome,
                                           state)]) == [True]


def test_a_job_waits_until_its_upstream_is_done(store: Store) -> None:
    upstream = submit(store)
    done, succeeded = submit(store, (upstream, "done")), submit(store, (upstream, "succeeded"))
    assert claimable(store) == [upstream]
    assert store.jobs.get(done).waiting_on == 1
    assert store.runs.claim("n1", FakeLease(store), 10, job_ids=[done]) == []
    finish(store, upstream, State.ERROR)
    assert claimable(store) == [done]  # ERROR is done; it is not success
    failed = store.jobs.get(succeeded)
    assert failed.state is State.ERROR and failed.error == f"upstream job {upstream} ended ERROR"
    events = [(e.from_state, e.to_state, e.message) for e in store.jobs.events(succeeded)]
    assert events[-1] == ("READY", "ERROR", f"upstream job {upstream} ended ERROR")
    lease = FakeLease(store)
    [claimed] = store.runs.claim("n1", lease, 10)
    assert (claimed.id, claimed.fence, claimed.state) == (done, lease.fence, State.RUNNING)


def test_succeeded_waits_for_success_and_every_upstream(store: Store) -> None:
    first, second = submit(store), submit(store)
    job = submit(store, (first, "succeeded"), (second, "done"))
    finish(store, first, State.SUCCEED)
    assert store.jobs.get(job).waiting_on == 1 and claimable(store) == [second]
    finish(store, second, State.SUCCEED)
    assert claimable(store) == [job]
    shown = store.jobs.get(job)
    assert [(up.job, up.when, up.state, up.met) for up in shown.after or []] == [
        (first, "succeeded", State.SUCCEED, True), (second, "done", State.SUCCEED, True)]


def test_a_failure_cascades_down_succeeded_edges(store: Store) -> None:
    root = submit(store)
    child = submit(store, (root, "succeeded"))
    grandchild = submit(store, (child, "succeeded"))
    tolerant = submit(store, (child, "done"))
    store.jobs.apply(root, Operation.DISCARD)
    assert store.jobs.get(child).error == f"upstream job {root} ended DISCARDED"
    assert store.jobs.get(grandchild).error == f"upstream job {child} ended ERROR"
    assert store.jobs.get(grandchild).state is State.ERROR
    assert claimable(store) == [tolerant]


def test_rescue_to_error_and_single_writes_release_dependents(store: Store) -> None:
    fatal = submit(store, steps=[{"name": "s1", "type": "noop", "retryable": False}])
    single = submit(store)
    waits = submit(store, (fatal, "done"), (single, "done"))
    jobs = {job.id: job for job in store.runs.claim("n9", FakeLease(store), 10)}
    assert set(jobs) == {fatal, single}
    assert store.servers.requeue_orphans("n9", "n1", only=None) in (
        [(fatal, State.ERROR), (single, State.READY)], [(single, State.READY),
                                                        (fatal, State.ERROR)])
    assert store.jobs.get(waits).waiting_on == 1
    [job] = store.runs.claim("n1", FakeLease(store), 1, job_ids=[single])
    assert store.runs.finish_job(job.token(), State.SUCCEED) is True
    assert claimable(store) == [waits]


def test_upstreams_already_final_at_submit(store: Store) -> None:
    good, bad = submit(store), submit(store)
    finish(store, good, State.SUCCEED)
    finish(store, bad, State.ERROR)
    assert store.jobs.get(submit(store, (good, "succeeded"), (bad, "done"))).waiting_on == 0
    doomed = store.jobs.get(submit(store, (bad, "succeeded")))
    assert doomed.state is State.ERROR and doomed.error == f"upstream job {bad} ended ERROR"


def test_unknown_upstreams_and_cycles_are_refused(store: Store) -> None:
    known = submit(store)
    with pytest.raises(InvalidRequest) as caught:
        submit(store, (known, "done"), (known + 1000, "done"))
    assert caught.value.details == [{"field": "after[1].job",
                                     "message": f"job {known + 1000} does not exist"}]
    # A job naming itself names an id that does not exist yet: no cycle can form.
    with pytest.raises(InvalidRequest):
        submit(store, (known + 1, "done"))
    assert [job.id for job in store.jobs.list()[0]] == [known]
    assert store.jobs.get(known).error is None


def test_rerun_and_resume_recount_what_a_job_waits_for(store: Store) -> None:
    upstream = submit(store)
    job = submit(store, (upstream, "succeeded"))
    finish(store, upstream, State.ERROR)
    assert store.jobs.get(job).state is State.ERROR
    with pytest.raises(Conflict, match=f"resume or rerun job {upstream} first"):
        store.jobs.apply(job, Operation.RESUME)
    store.jobs.apply(upstream, Operation.RESUME)
    finish(store, upstream, State.SUCCEED)
    assert store.jobs.apply(job, Operation.RESUME).waiting_on == 0
    store.jobs.apply(upstream, Operation.RERUN)  # the upstream runs again: job waits
    assert store.jobs.get(job).waiting_on == 1 and claimable(store) == [upstream]


def test_keyed_submits_in_one_transaction_link_to_each_other(store: Store) -> None:
    def item(key: str, *after: int) -> KeyedSubmit:
        spec = parse_job(json.dumps(job_spec(key, after=[{"job": job} for job in after])))
        return KeyedSubmit(spec, validate_job(spec, POLICY), key, None)

    with store.tx.write() as conn:
        first = store.jobs.submit_keyed([item("a"), item("b")], conn=conn)
        second = store.jobs.submit_keyed([item("c", first["a"], first["b"]), item("d")],
                                         conn=conn)
        third = store.jobs.submit_keyed([item("e", second["c"])], conn=conn)
    again = store.jobs.submit_keyed([item("c", first["a"], first["b"]), item("e", 1)])
    assert again == {"c": second["c"], "e": third["e"]}
    assert store.jobs.get(second["c"]).waiting_on == 2
    assert sorted(claimable(store)) == sorted([first["a"], first["b"], second["d"]])
    finish(store, first["a"], State.SUCCEED)
    finish(store, first["b"], State.DISCARDED)
    assert second["c"] in claimable(store) and third["e"] not in claimable(store)
    with pytest.raises(InvalidRequest) as caught:
        store.jobs.submit_keyed([item("f"), item("g", 10**9)])
    assert caught.value.details[0]["field"] == "items[1].after[0].job"


def test_leader_mode_assigns_no_waiting_job(store: Store) -> None:
    upstream = submit(store)
    waiting = submit(store, (upstream, "done"))
    assert [job_id for job_id, _servers in store.runs.unassigned(10)] == [upstream]
    leader = FakeLease(store, "election/scheduler")
    assert store.runs.assign(leader, {"n1": [upstream, waiting]}) == 1
    [job] = store.runs.claim_assigned("n1", 10)
    assert job.id == upstream and store.runs.claim_assigned("n1", 10) == []
    assert store.runs.complete([Completion(job.token(), job.steps[0], 1,
                                           StepOutcome(State.SUCCEED), State.SUCCEED)])
    assert [job_id for job_id, _servers in store.runs.unassigned(10)] == [waiting]


def test_the_cli_says_what_a_job_waits_for() -> None:
    job = {"waiting_on": 1, "after": [
        {"job": 41, "when": "done", "state": "RUNNING", "met": False},
        {"job": 42, "when": "succeeded", "state": "SUCCEED", "met": True}]}
    assert waits_for(job) == ("waits for: job 41 (done, RUNNING), "
                              "job 42 (succeeded, SUCCEED, met); 1 not yet met")


def test_the_api_shows_what_a_job_waits_for(store: Store, tmp_path: Path) -> None:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN}
    client = create_app(load_config(environ=environ), store=store).test_client()
    upstream = submit(store)

    def post(after: list[dict[str, Any]]) -> Any:
        return client.post("/api/v1/jobs", data=json.dumps(job_spec(after=after)),
                           content_type="application/json", headers=AUTH)

    created = post([{"job": upstream}, {"job": upstream, "when": "succeeded"}])
    assert created.status_code == 201, created.get_data(as_text=True)
    shown = client.get(f"/api/v1/jobs/{created.get_json()['id']}", headers=AUTH).get_json()
    assert shown["waiting_on"] == 1
    assert shown["after"] == [{"job": upstream, "when": "succeeded", "state": "READY",
                               "met": False}]
    refused = post([{"job": upstream}, {"job": upstream + 99}])
    assert refused.status_code == 422
    assert refused.get_json()["error"]["details"] == [
        {"field": "after[1].job", "message": f"job {upstream + 99} does not exist"}]
    assert post([{"job": upstream, "when": "always"}]).status_code == 422
    listed = client.get("/api/v1/jobs", headers=AUTH).get_json()["jobs"]
    assert [job["waiting_on"] for job in listed] == [1, 0]
