"""Retention on SQLite and PostgreSQL: old finished jobs go with their steps and events,
and nothing else does (young jobs, unfinished ones, ERROR unless named, and jobs that
other jobs, schedules, consumers, views, batches or feed readers still refer to)."""

from __future__ import annotations

import json
import time
from datetime import date, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, insert, select, update

from jobserver.batches.tables import batch_stages, batches
from jobserver.datasets.tables import consumers, datasets, partitions, working_sets
from jobserver.retention import Purge
from jobserver.schedules.spec import parse_schedule, spec_hash
from jobserver.schedules.tables import schedule_jobs, schedules
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.store import Store
from jobserver.store.feed import head_of, load_cursor, save_cursor
from jobserver.store.records import Completion, StepOutcome
from jobserver.store.retention import DEFAULT_STATES, DELETABLE, Tally
from jobserver.store.tables import events, job_dependencies, jobs, steps
from jobserver.views.tables import view_partitions
from tests.helpers import FakeLease, job_spec

POLICY = Policy(lambda name: False, None)
NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(days=40)
CUTOFF = NOW - timedelta(days=30)


def submit(store: Store, name: str = "job", after: list[int] | None = None,
           steps_count: int = 1) -> int:
    body = job_spec(name=name, steps=[{"name": f"s{i}", "type": "noop"}
                                      for i in range(steps_count)],
                    after=[{"job": job, "when": "done"} for job in after or []])
    spec = parse_job(json.dumps(body))
    return store.jobs.submit(spec, validate_job(spec, POLICY))[0].id


def finish(store: Store, job_id: int, state: State, age: datetime | None = OLD) -> int:
    """End ``job_id`` in ``state`` the way nodes and operators do, finished at ``age``."""
    if state is State.DISCARDED:
        store.jobs.apply(job_id, Operation.DISCARD)
    else:
        [job] = store.runs.claim("n1", FakeLease(store), 1, job_ids=[job_id])
        if state is not State.RUNNING:
            outcome = StepOutcome(state, error=None if state is State.SUCCEED else "boom")
            *first, last = job.steps or []
            for step in first:  # the runner's path: each step started, then ended
                store.runs.complete([Completion(job.token(), step, 1,
                                                StepOutcome(State.SUCCEED))])
            attempt = store.runs.start_step(job.token(), last) if first else 1
            store.runs.complete([Completion(job.token(), last, attempt or 1, outcome, state)])
    if age is not None:
        with store.tx.write() as conn:
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(finished_at=age))
    return job_id


def old_job(store: Store, state: State = State.SUCCEED, **kwargs: Any) -> int:
    return finish(store, submit(store, **kwargs), state)


def present(store: Store) -> set[int]:
    with store.tx.read() as conn:
        return set(conn.execute(select(jobs.c.id)).scalars())


def rows_of(store: Store, ids: set[int]) -> tuple[int, int, int]:
    """(steps, events, dependency edges) of ``ids`` still in the store."""
    with store.tx.read() as conn:
        def count(*where: Any) -> int:
            return int(conn.execute(select(func.count()).where(*where)).scalar() or 0)
        return (count(steps.c.job_id.in_(ids)), count(events.c.job_id.in_(ids)),
                count(job_dependencies.c.job_id.in_(ids))
                + count(job_dependencies.c.upstream_id.in_(ids)))


def purge(store: Store, states: tuple[State, ...] = DEFAULT_STATES, dry_run: bool = False,
          batch_size: int = 3) -> Purge:
    run = Purge(store.retention, states, CUTOFF, batch_size, dry_run=dry_run)
    while run.step() is not None:
        pass
    return run


def newest_young(store: Store) -> int:
    """A READY job submitted last: the newest job, step and event are young (the
    newest rows of each table always stay: SQLite would hand their ids out again)."""
    return submit(store, name="tail")


def test_only_old_succeed_and_discarded_jobs_go_with_their_steps_and_events(
        store: Store) -> None:
    gone = {old_job(store, steps_count=2), old_job(store, State.DISCARDED),
            finish(store, submit(store), State.DISCARDED)}
    error = old_job(store, State.ERROR)
    young = finish(store, submit(store), State.SUCCEED, age=NOW - timedelta(days=1))
    running = finish(store, submit(store), State.RUNNING)
    stopped = submit(store)
    store.jobs.apply(stopped, Operation.PAUSE)
    ready = submit(store)
    with store.tx.write() as conn:  # whatever their finished_at says, they stay
        conn.execute(update(jobs).where(jobs.c.id.in_([running, stopped, ready]))
                     .values(finished_at=OLD))
    tail = newest_young(store)
    before = rows_of(store, gone)
    run = purge(store)
    assert present(store) == {error, young, running, stopped, ready, tail}
    assert rows_of(store, gone) == (0, 0, 0)
    assert run.tally == Tally(3, before[0], before[1]) and before[0] == 4
    assert store.jobs.get(running).state is State.RUNNING


def test_error_jobs_go_when_named(store: Store) -> None:
    old_job(store, State.ERROR)
    succeed = old_job(store)
    tail = newest_young(store)
    assert purge(store, (State.ERROR,)).tally.jobs == 1
    assert present(store) == {succeed, tail}
    assert purge(store, DELETABLE).tally.jobs == 1 and present(store) == {tail}


def test_a_dry_run_counts_what_the_run_deletes(store: Store) -> None:
    upstream = old_job(store)
    chain = [upstream, old_job(store, after=[upstream])]
    chain.append(old_job(store, after=[chain[-1]]))
    others = [old_job(store, State.DISCARDED) for _ in range(4)]
    newest_young(store)
    dry = purge(store, dry_run=True, batch_size=2)
    assert present(store) >= set(chain + others)
    real = purge(store, batch_size=2)
    assert dry.tally == real.tally and real.tally.jobs == 7
    assert not present(store) & set(chain + others)
    assert rows_of(store, set(chain)) == (0, 0, 0)


def test_a_job_stays_while_a_job_depending_on_it_stays(store: Store) -> None:
    upstream = old_job(store)
    runs = finish(store, submit(store), State.RUNNING)
    waiting = submit(store, after=[upstream, runs])
    young = finish(store, submit(store, after=[upstream]), State.SUCCEED, age=NOW)
    old_job(store)  # depended on by nothing: it goes
    tail = newest_young(store)
    run = purge(store)
    assert present(store) == {upstream, runs, waiting, young, tail}
    assert run.kept == {upstream}
    assert store.jobs.get(waiting).waiting_on == 1  # still waits for `runs` only
    with store.tx.write() as conn:  # the dependents finish and grow old
        conn.execute(update(jobs).where(jobs.c.id.in_([waiting, young]))
                     .values(state="SUCCEED", finished_at=OLD))
    purge(store)
    assert present(store) == {runs, tail}
    assert rows_of(store, {upstream, waiting, young}) == (0, 0, 0)


def test_planner_references_keep_their_jobs(store: Store) -> None:
    stage, view, consuming, consumed, produced, launched = (old_job(store) for _ in range(6))
    named = old_job(store)
    old_job(store, name="nightly")  # an earlier run of the template: it goes
    last_run = old_job(store, name="nightly")
    at = datetime.now(timezone.utc)
    with store.tx.write() as conn:
        batch = conn.execute(insert(batches).values(
            system="s", location="l", context={}, context_key="", status="SUCCESS",
            business_date=date(2026, 1, 1), created_at=at, updated_at=at)
            .returning(batches.c.id)).scalar_one()
        conn.execute(insert(batch_stages).values(batch_id=batch, stage="load", position=0,
                                                 status="SUCCESS", job_id=stage, runs=1,
                                                 updated_at=at))
        conn.execute(insert(view_partitions).values(
            view="v", key="", values=[], state="waiting", job_id=view, retries=0,
            row_version=1, updated_at=at))
        dataset = conn.execute(insert(datasets).values(
            namespace="d", name="d", key=[], spec={}, spec_hash="h", created_at=at,
            updated_at=at).returning(datasets.c.id)).scalar_one()
        consumer = conn.execute(insert(consumers).values(
            dataset_id=dataset, name="c", spec={}, spec_hash="h", created_at=at,
            updated_at=at).returning(consumers.c.id)).scalar_one()
        for index, (job_id, state) in enumerate(((consuming, "IN_PROGRESS"),
                                                 (consumed, "DONE"))):
            part = conn.execute(insert(partitions).values(
                dataset_id=dataset, **{f"k{i}": str(index) if i == 0 else ""
                                       for i in range(8)},
                location="/x", meta={}, created_at=at, job_id=produced, step="s0")
                .returning(partitions.c.id)).scalar_one()
            conn.execute(insert(working_sets).values(
                consumer_id=consumer, partition_id=part, state=state, attempts=0,
                job_id=job_id, job_attempt=1, added_at=at))
        spec = parse_schedule({"name": "nightly", "trigger": {"type": "time", "cron": "0 0 * * *"},
                               "template": job_spec(name="nightly",
                                                    after=[{"job": named}]),
                               "constraints": [{"type": "since_last_run",
                                                "duration": "1h"}]}, POLICY)
        schedule = conn.execute(insert(schedules).values(
            namespace="default", name="nightly", generation=1,
            spec=spec.model_dump(mode="json"), spec_hash=spec_hash(spec), enabled=True,
            trigger_state={}, created_at=at, updated_at=at)
            .returning(schedules.c.id)).scalar_one()
        conn.execute(insert(schedule_jobs).values(
            schedule_id=schedule, generation=1, state="LAUNCHED", notifications=[],
            trigger_state={}, properties={}, created_at=at, updated_at=at, deadline_at=at,
            job_id=launched))
    tail = newest_young(store)
    run = purge(store)
    kept = {stage, view, consuming, named, last_run}
    assert present(store) == kept | {tail}
    assert run.kept == kept
    assert run.tally.jobs == 4  # consumed, produced, launched, the earlier run: dangling ids


def test_a_final_event_a_feed_reader_has_not_read_keeps_its_job(store: Store) -> None:
    with store.tx.write() as conn:  # the schedule evaluator's cursor, at the head now
        load_cursor(conn, "schedules/job_status")
    unread = old_job(store)
    tail = newest_young(store)
    assert purge(store).tally.jobs == 0 and unread in present(store)
    with store.tx.write() as conn:  # the evaluator reads on
        save_cursor(conn, "schedules/job_status", head_of(conn))
    assert purge(store).tally.jobs == 1 and present(store) == {tail}


def test_a_feed_reader_silent_for_a_day_holds_nothing_back(store: Store) -> None:
    with store.tx.write() as conn:
        load_cursor(conn, "views/jobs")
    unread = old_job(store)
    with store.tx.write() as conn:  # its final event waits unread for two days
        conn.execute(update(events).where(events.c.job_id == unread)
                     .values(at=NOW - timedelta(days=2)))
    newest_young(store)
    assert purge(store).tally.jobs == 1 and unread not in present(store)


def test_the_newest_job_stays_so_that_no_id_is_handed_out_twice(store: Store) -> None:
    ids = [old_job(store) for _ in range(3)]
    run = purge(store)
    assert present(store) == {ids[-1]} and run.kept == {ids[-1]}
    assert submit(store) > ids[-1]


def test_a_job_another_transaction_holds_is_skipped_not_waited_for(
        store_on_postgres: Store) -> None:
    store = store_on_postgres
    held = old_job(store)
    old_job(store)
    tail = newest_young(store)
    with store.engine.connect() as other:  # an operator's rerun of `held`, say, under way
        with other.begin():
            other.execute(select(jobs.c.id).where(jobs.c.id == held).with_for_update())
            began = time.monotonic()
            assert purge(store).tally.jobs == 1
            assert time.monotonic() - began < 5
    assert present(store) == {held, tail}
    assert purge(store).tally.jobs == 1 and present(store) == {tail}
