"""The benchmark's bulk fill writes jobs as the engine would have left them: steps and
events that agree with each job's state, in the order they happened, and ids that
ascend with creation time; the store reads them back as it reads its own."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import text

from bench.filling import fill
from bench.retention import OLD_JOBS
from bench.ui import UI_JOBS
from jobserver.states import State
from jobserver.store import Store

pytestmark = pytest.mark.postgres

#: A job's steps' states and its event trail (step, from, to), by the job's state.
EXPECTED = {
    "SUCCEED": (["SUCCEED", "SUCCEED", "SUCCEED"],
                [(None, None, "READY"), (None, "READY", "RUNNING"),
                 ("extract", "READY", "RUNNING"), ("extract", "RUNNING", "SUCCEED"),
                 ("transform", "READY", "RUNNING"), ("transform", "RUNNING", "SUCCEED"),
                 ("load", "READY", "RUNNING"), ("load", "RUNNING", "SUCCEED"),
                 (None, "RUNNING", "SUCCEED")]),
    "ERROR": (["SUCCEED", "ERROR", "READY"],
              [(None, None, "READY"), (None, "READY", "RUNNING"),
               ("extract", "READY", "RUNNING"), ("extract", "RUNNING", "SUCCEED"),
               ("transform", "READY", "RUNNING"), ("transform", "RUNNING", "ERROR"),
               (None, "RUNNING", "ERROR")]),
    "READY": (["READY", "READY", "READY"], [(None, None, "READY")]),
}


def _trail(store: Store, job_id: int) -> list[tuple[str | None, str | None, str]]:
    return [(event.step, event.from_state and str(event.from_state), str(event.to_state))
            for event in store.browse.recent_events(job_id)]


def test_the_dashboards_fill_spreads_states_and_keeps_each_job_consistent(
        store_on_postgres: Store) -> None:
    store = store_on_postgres
    fill(store.url, 2_000, UI_JOBS)
    with store.engine.connect() as conn:
        states = Counter(dict(conn.execute(text(
            "SELECT state, count(*) FROM jobs GROUP BY state")).all()))
        out_of_order = conn.execute(text(
            "SELECT count(*) FROM jobs AS a JOIN jobs AS b ON b.id = a.id + 1 "
            "WHERE b.created_at < a.created_at")).scalar_one()
        claimable = conn.execute(text(
            "SELECT count(*) FROM jobs WHERE state = 'READY' AND (not_before IS NULL "
            "OR not_before <= now() OR node IS NOT NULL)")).scalar_one()
        firsts = dict(conn.execute(text(
            "SELECT state, min(id) FROM jobs GROUP BY state")).all())
    assert states == {"SUCCEED": 1_700, "ERROR": 160, "DISCARDED": 60, "STOPPED": 40,
                      "READY": 40}
    assert out_of_order == 0 and claimable == 0  # no scheduler picks a filled job up
    for state, (step_states, trail) in EXPECTED.items():
        job = store.jobs.get(firsts[state])
        assert job.state is State(state)
        assert [str(step.state) for step in job.steps or []] == step_states
        assert _trail(store, job.id) == trail
        assert (job.finished_at is None) == (state == "READY")


def test_the_retention_fill_leaves_old_one_step_jobs(store_on_postgres: Store) -> None:
    store = store_on_postgres
    fill(store.url, 100, OLD_JOBS)
    with store.engine.connect() as conn:
        ages = conn.execute(text(
            "SELECT min(now() - finished_at), count(*) FROM jobs "
            "WHERE name = 'retention-old' AND state = 'SUCCEED'")).one()
    assert ages[1] == 100 and ages[0].days >= 59
    job = store.jobs.get(1)
    assert [step.name for step in job.steps or []] == ["s"]
    assert _trail(store, 1) == [(None, None, "READY"), (None, "READY", "RUNNING"),
                                ("s", "READY", "RUNNING"), ("s", "RUNNING", "SUCCEED"),
                                (None, "RUNNING", "SUCCEED")]
