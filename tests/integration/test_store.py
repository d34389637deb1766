"""The repository layer on SQLite and PostgreSQL: claims, compare-and-set, rescue."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from jobserver.exceptions import FencedOff
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State, StopReason
from jobserver.store import Store, pgclaim
from jobserver.store.records import Completion, NodeLoad, StepOutcome
from jobserver.store.runs import open_claim_params, ready_candidates
from jobserver.store.tables import jobs
from tests.conftest import open_store
from tests.helpers import FakeLease, job_spec

POLICY = Policy(lambda name: name.startswith("demo."), None)


@pytest.fixture(params=["sqlite", "postgres", "postgres-psycopg2"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    """The store contract on each dialect and each PostgreSQL driver."""
    yield from open_store(request, tmp_path)


def submit(store: Store, **fields) -> int:
    spec = parse_job(json.dumps(job_spec(**fields)))
    job, _ = store.jobs.submit(spec, validate_job(spec, POLICY))
    return job.id


def test_claim_orders_by_priority_then_age_and_respects_limit(store: Store) -> None:
    low, high, mid, high2 = (submit(store, priority=p) for p in (0, 9, 5, 9))
    claimed = store.runs.claim("n1", FakeLease(store), 3)
    assert [job.id for job in claimed] == [high, high2, mid]
    assert all(job.state is State.RUNNING and job.node == "n1" and job.fence == 1
               and job.attempt == 1 for job in claimed)
    assert [job.id for job in store.runs.claim("n1", FakeLease(store), 10)] == [low]
    assert store.runs.claim("n1", FakeLease(store), 10) == []


def test_claim_skips_future_and_foreign_jobs(store: Store) -> None:
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    submit(store, not_before=later)
    mine = submit(store, assigned_servers=["n2", "n1"])
    submit(store, assigned_servers=["n10"])
    anyone = submit(store)
    assert sorted(job.id for job in store.runs.claim("n1", FakeLease(store), 10)) == [mine, anyone]


def test_concurrent_claimers_never_share_a_job(store: Store) -> None:
    ids = {submit(store) for _ in range(60)}
    claims: dict[str, list[int]] = {"a": [], "b": [], "c": []}

    def claimer(node: str) -> None:
        lease = FakeLease(store, key=f"lock-of-{node}")
        while batch := store.runs.claim(node, lease, 4):
            claims[node].extend(job.id for job in batch)

    threads = [threading.Thread(target=claimer, args=(node,)) for node in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    everything = [job_id for batch in claims.values() for job_id in batch]
    assert sorted(everything) == sorted(ids)


def test_claim_starts_the_first_runnable_step_and_returns_every_step(store: Store) -> None:
    """The first runnable step is the lowest READY one whose dependencies all
    succeeded; after a resume that is the step after the ones already done."""
    job_id = submit(store, steps=[{"name": "a", "type": "noop"},
                                  {"name": "b", "type": "noop", "depends_on": ["a"]},
                                  {"name": "c", "type": "noop", "depends_on": ["a", "b"]}])
    job = store.runs.claim("n1", FakeLease(store), 5)[0]
    assert [(s.name, s.state, s.attempt) for s in job.steps] == [
        ("a", State.RUNNING, 1), ("b", State.READY, 0), ("c", State.READY, 0)]
    assert job.steps[0].started_at is not None and job.steps[0].depends_on == []
    assert job.steps[2].depends_on == ["a", "b"] and job.steps[0].spec == {}
    store.runs.finish_step(job.token(), job.steps[0], 1, StepOutcome(State.SUCCEED))
    store.jobs.apply(job_id, Operation.PAUSE)
    store.jobs.apply(job_id, Operation.RESUME)
    again = store.runs.claim("n1", FakeLease(store), 5)[0]
    assert (again.id, again.attempt) == (job_id, 2)
    assert [(s.name, s.state) for s in again.steps] == [
        ("a", State.SUCCEED), ("b", State.RUNNING), ("c", State.READY)]
    assert again.steps[0].finished_at is not None
    audit = [(e.step, e.from_state, e.to_state, e.attempt) for e in store.jobs.events(job_id)]
    assert audit[-2:] == [(None, "READY", "RUNNING", 2), ("b", "READY", "RUNNING", 1)]


def test_writes_are_fenced_by_the_claim_token(store: Store) -> None:
    submit(store, steps=[{"name": "s1", "type": "noop"}])
    job = store.runs.claim("n1", FakeLease(store), 1)[0]
    token = job.token()
    # The claim starts the first step in the same transaction.
    assert (job.steps[0].state, job.steps[0].attempt) == (State.RUNNING, 1)
    assert store.jobs.get(job.id).steps[0].state is State.RUNNING
    assert store.runs.start_step(token, job.steps[0]) is None  # not READY any more
    # n1 is declared dead; n2 takes the job over under a newer lease.
    assert store.servers.requeue_orphans("n1", "n2") == [(job.id, State.READY)]
    new = store.runs.claim("n2", FakeLease(store), 1)[0]
    assert (new.node, new.fence, new.attempt) == ("n2", 2, 2)
    with pytest.raises(FencedOff, match="now belongs to node n2"):
        store.runs.finish_step(token, job.steps[0], 1, StepOutcome(State.SUCCEED))
    with pytest.raises(FencedOff):
        store.runs.finish_job(token, State.SUCCEED)
    assert store.runs.watch([token]) == {job.id: StopReason.FENCED}
    assert store.runs.watch([new.token()]) == {}
    assert store.runs.finish_job(new.token(), State.SUCCEED)
    assert store.jobs.get(job.id).state is State.SUCCEED


def test_a_superseded_lease_cannot_claim(store: Store) -> None:
    submit(store)
    old = FakeLease(store)
    newer = FakeLease(store)
    assert store.runs.claim("n1", old, 10) == []
    assert len(store.runs.claim("n2", newer, 10)) == 1
    assert store.epochs.advance(newer.key, newer.fence - 1) is False
    assert store.epochs.advance(newer.key, newer.fence + 100) is True


def test_leader_assignments(store: Store) -> None:
    first, second = submit(store), submit(store, assigned_servers=["n2"])
    stale, leader = FakeLease(store, "election/scheduler"), FakeLease(store, "election/scheduler")
    assert store.runs.assign(stale, {"n1": [first]}) == 0
    assert store.runs.assign(leader, {"n1": [first], "n2": [second]}) == 2
    assert store.runs.claim("n3", FakeLease(store), 10) == []  # assigned jobs are taken
    assert [job.id for job in store.runs.claim_assigned("n1", 10)] == [first]
    assert store.runs.load_by_node() == {"n1": NodeLoad(running=1, assigned=0),
                                         "n2": NodeLoad(running=0, assigned=1)}
    store.servers.requeue_orphans("n2", "leader")  # n2 died before starting its job
    assert store.jobs.get(second).node is None and store.jobs.get(second).state is State.READY


@pytest.mark.parametrize("driver", ["postgresql", "postgresql+psycopg2"])
def test_a_submit_is_stamped_in_utc_whatever_the_sessions_time_zone(
        pg_store_session: Store, pg_url: str, driver: str) -> None:
    """PostgreSQL's one-statement submit reads the stored row back through the driver,
    which gives timestamps in the session's time zone; the store's sessions are UTC
    whatever the database's default, and the API answers in UTC."""
    database = pg_url.rsplit("/", 1)[1]
    with pg_store_session.engine.connect() as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET timezone TO \'Asia/Tokyo\'')
        conn.commit()
    store = Store(driver + "://" + pg_url.split("://", 1)[1])
    try:
        with store.tx.read() as conn:
            assert conn.exec_driver_sql("SHOW timezone").scalar() == "UTC"
        before = datetime.now(timezone.utc)
        spec = parse_job(json.dumps(job_spec(not_before=before.isoformat())))
        job, _ = store.jobs.submit(spec, validate_job(spec, POLICY))
        for stamp in (job.created_at, job.updated_at, job.not_before):
            assert stamp.utcoffset() == timedelta(0), stamp
        assert job.not_before == before
        assert before <= job.created_at <= datetime.now(timezone.utc)
    finally:
        store.dispose()
        with pg_store_session.engine.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" RESET timezone')
            conn.commit()


def test_group_commit_reports_each_completion(store: Store) -> None:
    ours, paused, taken = (submit(store) for _ in range(3))
    claimed = {job.id: job for job in store.runs.claim("n1", FakeLease(store), 3)}
    store.jobs.apply(paused, Operation.PAUSE)
    store.servers.requeue_orphans("n1", "n2")  # takes all three away from n1 ...
    store.runs.claim("n2", FakeLease(store), 3)  # ... and n2 claims them
    store.jobs.apply(ours, Operation.PAUSE)
    completions = [Completion(claimed[i].token(), claimed[i].steps[0], 1,
                              StepOutcome(State.SUCCEED), State.SUCCEED)
                   for i in (ours, paused, taken)]
    results = store.runs.complete(completions)
    # ours and taken now belong to n2; paused is still n1's but an operator stopped it:
    # its step outcome is kept, the job stays STOPPED.
    assert isinstance(results[0], FencedOff) and isinstance(results[2], FencedOff)
    assert results[1] is False
    stopped = store.jobs.get(paused)
    assert stopped.state is State.STOPPED and stopped.steps[0].state is State.SUCCEED
    fresh = submit(store)
    job = store.runs.claim("n3", FakeLease(store, "other"), 1)[0]
    assert job.id == fresh
    assert store.runs.complete([Completion(job.token(), job.steps[0], 1,
                                           StepOutcome(State.SUCCEED), State.SUCCEED)]) == [True]
    done = store.jobs.get(fresh)
    assert done.state is State.SUCCEED and done.steps[0].state is State.SUCCEED
    events = [(e.step, e.from_state, e.to_state) for e in store.jobs.events(fresh)]
    assert events[-2:] == [("s1", "RUNNING", "SUCCEED"), (None, "RUNNING", "SUCCEED")]


CHAIN = [{"name": "a", "type": "noop"}, {"name": "b", "type": "noop", "depends_on": ["a"]},
         {"name": "c", "type": "noop", "depends_on": ["a"]}]


def test_a_step_end_starts_its_successors_in_the_same_write(store: Store) -> None:
    """A chain's transition is one write: the step's SUCCEED and its successors'
    READY -> RUNNING (attempt 1), with an audit row each, in one group commit."""
    job_id = submit(store, steps=CHAIN)
    job = store.runs.claim("n1", FakeLease(store), 1)[0]
    first, *rest = job.steps
    assert store.runs.complete([Completion(job.token(), first, 1, StepOutcome(State.SUCCEED),
                                           start_next=tuple(rest))]) == [True]
    stored = store.jobs.get(job_id)
    assert [(s.name, s.state, s.attempt) for s in stored.steps] == [
        ("a", State.SUCCEED, 1), ("b", State.RUNNING, 1), ("c", State.RUNNING, 1)]
    assert stored.state is State.RUNNING
    events = [(e.step, e.from_state, e.to_state, e.attempt) for e in store.jobs.events(job_id)]
    assert events[-3] == ("a", "RUNNING", "SUCCEED", 1)
    assert sorted(events[-2:]) == [("b", "READY", "RUNNING", 1), ("c", "READY", "RUNNING", 1)]


def test_a_paused_job_gets_neither_the_step_end_nor_a_successor_start(store: Store) -> None:
    """With successors to start, the write needs the job RUNNING: after a pause it
    writes nothing (the runner then records the step alone), and a fenced-off run is
    told so."""
    paused, taken = submit(store, steps=CHAIN), submit(store, steps=CHAIN)
    claimed = {job.id: job for job in store.runs.claim("n1", FakeLease(store), 2)}
    store.jobs.apply(paused, Operation.PAUSE)
    store.servers.requeue_orphans("n1", "n2")  # takes the running one (not the paused)
    store.runs.claim("n2", FakeLease(store), 1)
    results = store.runs.complete([
        Completion(claimed[i].token(), claimed[i].steps[0], 1, StepOutcome(State.SUCCEED),
                   start_next=tuple(claimed[i].steps[1:])) for i in (paused, taken)])
    assert results[0] is False and isinstance(results[1], FencedOff)
    stopped = store.jobs.get(paused)
    assert stopped.state is State.STOPPED
    assert [s.state for s in stopped.steps] == [State.RUNNING, State.READY, State.READY]


def test_group_commit_keeps_every_outcome_column(store: Store) -> None:
    """The set-based write carries each step's audit through unchanged: exit code,
    output (quotes and newlines included), error, timings and metrics."""
    first, second = submit(store), submit(store)
    claimed = store.runs.claim("n1", FakeLease(store), 2)
    outcomes = {first: StepOutcome(State.SUCCEED, exit_code=0, output='say "hi"\n\tok',
                                   wall_seconds=0.25, cpu_seconds=0.125, peak_rss_kb=2048,
                                   metrics={"rows": 3, "ratio": 0.5}),
                second: StepOutcome(State.ERROR, exit_code=2, error="boom: 'x'")}
    completions = [Completion(job.token(), job.steps[0], 1, outcomes[job.id],
                              State.SUCCEED if job.id == first else State.ERROR,
                              None if job.id == first else "step s1 failed: boom")
                   for job in claimed]
    assert store.runs.complete(completions) == [True, True]
    done, failed = store.jobs.get(first), store.jobs.get(second)
    step = done.steps[0]
    assert (done.state, step.state, step.exit_code, step.output, step.wall_seconds,
            step.cpu_seconds, step.peak_rss_kb, step.metrics) == (
        State.SUCCEED, State.SUCCEED, 0, 'say "hi"\n\tok', 0.25, 0.125, 2048,
        {"rows": 3, "ratio": 0.5})
    assert step.finished_at is not None and done.finished_at is not None
    assert (failed.state, failed.error, failed.steps[0].exit_code,
            failed.steps[0].error) == (State.ERROR, "step s1 failed: boom", 2, "boom: 'x'")
    events = [(e.step, e.to_state, e.attempt, e.message) for e in store.jobs.events(second)]
    assert events[-2:] == [("s1", "ERROR", 1, "boom: 'x'"),
                           (None, "ERROR", 1, "step s1 failed: boom")]


def test_release_puts_job_and_started_steps_back(store: Store) -> None:
    job_id = submit(store, steps=[{"name": "a", "type": "noop"}, {"name": "b", "type": "noop"}])
    job = store.runs.claim("n1", FakeLease(store), 1)[0]
    assert store.runs.release(job.token(), "node stopping") is True
    assert store.runs.release(job.token(), "again") is False
    released = store.jobs.get(job_id)
    assert released.state is State.READY and released.node is None
    assert [s.state for s in released.steps] == [State.READY, State.READY]
    again = store.runs.claim("n2", FakeLease(store), 1)[0]
    assert (again.attempt, again.steps[0].state, again.steps[0].attempt) == (
        2, State.RUNNING, 2)


def test_operator_pause_is_not_a_fence_violation(store: Store) -> None:
    job_id = submit(store)
    token = store.runs.claim("n1", FakeLease(store), 1)[0].token()
    store.jobs.apply(job_id, Operation.PAUSE)
    assert store.runs.watch([token]) == {job_id: StopReason.PAUSED}
    assert store.runs.finish_job(token, State.SUCCEED) is False
    assert store.jobs.get(job_id).state is State.STOPPED


def test_rescue_happens_exactly_once_and_honours_retryable(store: Store) -> None:
    retryable = submit(store, steps=[{"name": "a", "type": "sleep", "seconds": 9}])
    fragile = submit(store, steps=[{"name": "b", "type": "sleep", "seconds": 9,
                                    "retryable": False}])
    assert all(job.steps[0].state is State.RUNNING
               for job in store.runs.claim("dead", FakeLease(store), 10))
    moved = dict(store.servers.requeue_orphans("dead", "rescuer"))
    assert moved == {retryable: State.READY, fragile: State.ERROR}
    assert store.servers.requeue_orphans("dead", "rescuer") == []
    failed = store.jobs.get(fragile)
    assert failed.steps[0].state is State.ERROR and "non-retryable" in failed.error
    requeued = store.jobs.get(retryable)
    assert requeued.steps[0].state is State.READY and requeued.node is None
    assert [e.to_state for e in store.jobs.events(retryable)][-2:] == ["READY", "READY"]


def test_stale_nodes_use_the_store_clock(store: Store) -> None:
    store.servers.register("alive", "h", 1, "single", 10)
    store.servers.register("gone", "h", 2, "single", 10)
    store.servers.mark_stopped("gone")
    assert store.servers.stale({"alive", "gone", "never"}, dead_after=5) == {
        "gone": "marked stopped", "never": "not registered"}
    ages = {server.id: server.heartbeat_age for server in store.servers.list()}
    assert 0 <= ages["alive"] < 5


def test_resume_skips_succeeded_steps_and_rerun_resets_all(store: Store) -> None:
    job_id = submit(store, steps=[{"name": "a", "type": "noop"}, {"name": "b", "type": "noop"}])
    job = store.runs.claim("n1", FakeLease(store), 1)[0]
    token = job.token()
    for step, state in zip(job.steps, (State.SUCCEED, State.ERROR)):
        attempt = step.attempt if step.state is State.RUNNING else store.runs.start_step(
            token, step)
        store.runs.finish_step(token, step, attempt, StepOutcome(state, error="x"))
    store.runs.finish_job(token, State.ERROR, "step b failed")
    resumed = store.jobs.apply(job_id, Operation.RESUME)
    assert resumed.state is State.READY
    assert [(s.state, s.attempt) for s in resumed.steps] == [(State.SUCCEED, 1),
                                                            (State.READY, 1)]
    store.jobs.apply(job_id, Operation.DISCARD)
    assert {s.state for s in store.jobs.get(job_id).steps} == {State.SUCCEED, State.DISCARDED}


def test_claim_is_an_index_scan_in_claim_order(store: Store) -> None:
    """No sort of the READY backlog: the claim index already holds claim order."""
    compiled = ready_candidates("n1", 5).compile(store.engine)
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled),
                                        tuple(compiled.params.values())).all()
        else:  # an empty table would be seq-scanned; ask whether the index can serve
            conn.exec_driver_sql("SET enable_seqscan = off")
            literal = ready_candidates("n1", 5).compile(
                store.engine, compile_kwargs={"literal_binds": True})
            plan = conn.exec_driver_sql("EXPLAIN " + str(literal).replace("%", "%%")).all()
    text = " ".join(str(row) for row in plan)
    assert "ix_jobs_queue" in text, plan
    assert "TEMP B-TREE" not in text and "Sort" not in text, plan


@pytest.mark.slow  # about 4 s: a million rows
def test_claim_never_sorts_the_backlog_behind_a_long_history(
        store_on_postgres: Store) -> None:
    """A million finished jobs, then a burst of 10,000 READY ones, analyzed. READY jobs
    are exactly the unassigned ones, but PostgreSQL multiplies the two fractions: with
    separate (state, node) and (state, priority, id) indexes it estimated a few hundred
    rows and read and sorted the whole READY backlog on every claim."""
    store = store_on_postgres
    template = submit(store)
    columns = ", ".join(c.name for c in jobs.c if c.name not in ("id", "state", "node"))
    copy = (f"INSERT INTO jobs ({columns}, state, node) SELECT {columns}, %s, %s "
            f"FROM jobs, generate_series(1, %s) WHERE id = %s")
    lease = FakeLease(store)
    with store.tx.write() as conn:
        conn.exec_driver_sql(copy, ("SUCCEED", "gone", 1_000_000, template))
        conn.exec_driver_sql(copy, ("READY", None, 10_000, template))
    with store.tx.statement() as conn:
        conn.exec_driver_sql("ANALYZE jobs")
    params = open_claim_params("n1", lease, 32)
    with store.tx.read() as conn:
        cursor = conn.connection.cursor()
        cursor.execute("EXPLAIN " + pgclaim.statement(), params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "ix_jobs_queue" in plan, plan
    assert "Sort Key: jobs." not in plan, plan  # the outer sort orders only claimed rows


@pytest.mark.parametrize("session", ["pg_store_session", "psycopg2_store_session"])
def test_postgres_plans_each_statement_for_the_tables_as_they_are(
        request: pytest.FixtureRequest, session: str) -> None:
    """A generic plan kept from when the tables were small made claims slower and
    slower as a new database filled up under load (see ``make_engine``)."""
    pg_store: Store = request.getfixturevalue(session)
    with pg_store.tx.read() as conn:
        assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == "force_custom_plan"


def test_submit_keyed_inserts_each_key_once(store: Store) -> None:
    from jobserver.store.jobs import KeyedSubmit

    def item(key: str, name: str = "keyed") -> KeyedSubmit:
        spec = parse_job(json.dumps(job_spec(name=name, steps=[
            {"name": "a", "type": "noop"}, {"name": "b", "type": "noop"}])))
        return KeyedSubmit(spec, validate_job(spec, POLICY), key, "digest")

    first = store.jobs.submit_keyed([item("k1"), item("k2")])
    assert set(first) == {"k1", "k2"} and len(set(first.values())) == 2
    again = store.jobs.submit_keyed([item("k2"), item("k3")])  # a retried batch
    assert again["k2"] == first["k2"] and again["k3"] not in first.values()
    job = store.jobs.get(again["k3"])
    assert job.state is State.READY and [s.name for s in job.steps] == ["a", "b"]
    assert [e.to_state for e in store.jobs.events(job.id)] == [State.READY]
    with store.tx.read() as conn:
        assert len(conn.execute(jobs.select()).all()) == 3
