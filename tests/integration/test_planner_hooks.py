"""The planners' hooks into the engine's transactions (``Planner.job_inputs``,
``Planner.retention_rules``), on SQLite and PostgreSQL: a plug-in's keep rule keeps
the old jobs its rows refer to, and a store whose planners take no inputs ends runs
as usual."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, select

from jobserver.exceptions import ConfigError
from jobserver.planners import installed
from jobserver.planners.base import Planner
from jobserver.planners.hooks import KeepRule
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.hooks import PlannerHooks
from jobserver.store.tables import jobs
from tests.helpers import FakeLease
from tests.integration.test_retention import finish, old_job, present, purge, submit


class Pinned(KeepRule):
    """Keeps old jobs named ``pinned``, read once per few batches like the schedules'."""

    def read(self, conn: Connection) -> set[int]:
        return set(conn.execute(select(jobs.c.id).where(jobs.c.name == "pinned")).scalars())

    def kept(self, conn: Connection, ids: Sequence[int], read: set[int]) -> set[int]:
        return read.intersection(ids)


class PinsPlanner(Planner):
    name = "pins"

    def retention_rules(self) -> Sequence[KeepRule]:
        return [Pinned()]


class TakesInputs(Planner):
    name = "takes"

    def job_inputs(self, store: Store) -> Any:
        return object()


@contextmanager
def store_with(store: Store, planners: Sequence[Planner]) -> Iterator[Store]:
    other = Store(store.url, planners=planners)
    try:
        yield other
    finally:
        other.dispose()


def test_a_plug_in_keep_rule_keeps_the_jobs_its_rows_name(store: Store) -> None:
    with store_with(store, [*installed(), PinsPlanner()]) as pinning:
        pinned = old_job(pinning, name="pinned")
        goes = old_job(pinning, name="other")
        tail = submit(pinning, name="tail")
        run = purge(pinning)
        assert present(pinning) == {pinned, tail}
        assert run.kept == {pinned} and goes not in present(pinning)


def test_without_a_planner_taking_inputs_runs_end_as_usual(store: Store) -> None:
    with store_with(store, []) as bare:
        assert bare.hooks.inputs is None and bare.hooks.keep_rules == ()
        done = finish(bare, submit(bare), State.SUCCEED, age=None)
        failed = finish(bare, submit(bare), State.ERROR, age=None)
        [job] = bare.runs.claim("n1", FakeLease(bare), 1, job_ids=[submit(bare)])
        assert bare.runs.finish_job(job.token(), State.SUCCEED) is True
        assert [bare.jobs.get(i).state for i in (done, failed, job.id)] == [
            State.SUCCEED, State.ERROR, State.SUCCEED]


def test_two_planners_may_not_both_take_inputs(store: Store) -> None:
    with pytest.raises(ConfigError, match="takes"):
        PlannerHooks().install([TakesInputs(), type("Again", (TakesInputs,),
                                                    {"name": "again"})()], store)
