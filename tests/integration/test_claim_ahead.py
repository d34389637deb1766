"""Claim-ahead in a node (``scheduler.prefetch``): a claim round that fills the runner
holds more jobs, within the limit; they go back when they wait too long, when the
node drains and when the lease they were held under is lost, never having started.

In-process nodes on the embedded store, one slot each, so that one long job keeps the
runner full while the others are held. What a user checks: which node a READY job is
held by, that no held job consumed an attempt, and that every job ran once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobserver.exceptions import StoreUnavailable
from jobserver.states import State
from tests.helpers import wait_for
from tests.integration.test_supervision import Nodes

LONG = [{"name": "s", "type": "sleep", "seconds": 2.0}]
SHORT = [{"name": "s", "type": "noop"}]


def one_slot(**env: str) -> dict[str, str]:
    return {"JOBSERVER_SCHEDULER__MAX_CONCURRENT_JOBS": "1",
            "JOBSERVER_SCHEDULER__PREFETCH": "2", **env}


def holders(nodes: Nodes, job_ids: list[int]) -> list[str | None]:
    """Each job's node while it is READY (its holder), or its state once it is not."""
    found = [nodes.probe.jobs.get(job_id, with_steps=False) for job_id in job_ids]
    return [job.node if job.state is State.READY else job.state.value for job in found]


def assert_each_ran_once(nodes: Nodes, job_ids: list[int]) -> None:
    for job_id in job_ids:
        job = nodes.probe.jobs.get(job_id)
        starts = [e for e in nodes.probe.jobs.events(job_id)
                  if e.step is None and e.to_state == "RUNNING"]
        assert job.state is State.SUCCEED and job.attempt == 1 and len(starts) == 1, (
            job, starts)


def queue(nodes: Nodes, extra: int) -> tuple[int, list[int]]:
    """A long job first (it takes the slot), then ``extra`` short ones."""
    return nodes.submit(LONG), [nodes.submit(SHORT) for _ in range(extra)]


@pytest.fixture
def nodes(tmp_path: Path):
    nodes = Nodes(tmp_path / "data")
    nodes.probe.upgrade()  # the jobs are queued before the first node starts
    yield nodes
    nodes.close()


def test_held_jobs_go_back_after_the_timeout_never_more_than_the_limit(nodes: Nodes) -> None:
    # The hold lasts 3 s, long enough to be seen on a loaded machine, and the long job
    # 8 s, so that the slot is still busy when the held jobs go back.
    long_job = nodes.submit([{"name": "s", "type": "sleep", "seconds": 8.0}])
    short = [nodes.submit(SHORT) for _ in range(3)]
    nodes.start(**one_slot(JOBSERVER_SCHEDULER__PREFETCH_TIMEOUT="3"))
    wait_for(lambda: "n1" in holders(nodes, short), 5, 0.01, "the node to hold jobs ahead")
    # A round's holds are one write, but ``holders`` reads job by job: read again once
    # the write is seen, so that a read straddling the commit cannot show half a round.
    seen = holders(nodes, short)
    assert seen == ["n1", "n1", None], seen  # the first two, in claim order; the limit is 2
    back = wait_for(lambda: holders(nodes, short) == [None, None, None], 6, 0.02,
                    "the held jobs to go back")
    assert back and nodes.probe.jobs.get(long_job).state is State.RUNNING, (
        "they went back before their timeout, while the slot was still busy")
    assert [nodes.probe.jobs.get(job_id).attempt for job_id in short] == [0, 0, 0]
    wait_for(lambda: holders(nodes, [long_job, *short]) == ["SUCCEED"] * 4, 30, 0.05,
             "every job to finish")
    assert_each_ran_once(nodes, [long_job, *short])


def test_a_drain_gives_the_held_jobs_back(nodes: Nodes) -> None:
    long_job, short = queue(nodes, 2)
    node = nodes.start(**one_slot(JOBSERVER_SCHEDULER__PREFETCH_TIMEOUT="30"))
    wait_for(lambda: holders(nodes, short) == ["n1", "n1"], 5, 0.01, "the node to hold two")
    wait_for(lambda: node.metrics.held_ahead.collect()[0].samples[0].value == 2, 5, 0.05,
             "jobserver_jobs_held_ahead to say two")
    assert node.stop() is True
    assert holders(nodes, [long_job, *short]) == ["SUCCEED", None, None]
    assert [nodes.probe.jobs.get(job_id).attempt for job_id in short] == [0, 0]
    nodes.start("n2")
    wait_for(lambda: holders(nodes, short) == ["SUCCEED"] * 2, 15, 0.05,
             "another node to run them")
    assert_each_ran_once(nodes, [long_job, *short])


def test_a_lost_global_lock_gives_the_held_jobs_back_even_if_the_store_refused_once(
        nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    long_job, short = queue(nodes, 2)
    node = nodes.start(**one_slot(JOBSERVER_SCHEDULER__PREFETCH_TIMEOUT="30",
                                  JOBSERVER_LOCK__BACKEND="memory"))
    wait_for(lambda: holders(nodes, short) == ["n1", "n1"], 5, 0.01, "the node to hold two")
    release = node.store.holds.release_holds
    refusals: list[int] = []

    def refusing_once(*args, **kwargs) -> int:
        if not refusals:
            refusals.append(1)
            raise StoreUnavailable("the store is out (simulated)")
        return release(*args, **kwargs)

    monkeypatch.setattr(node.store.holds, "release_holds", refusing_once)
    node.locks.expire("scheduler/global")  # a lost session: the lease is gone
    # The give-back failed; the node, active again under a newer fence, gives back
    # what an earlier lease held before it claims.
    wait_for(lambda: holders(nodes, short) == [None, None], 5, 0.02,
             "the held jobs to go back")
    assert refusals and nodes.probe.jobs.get(long_job).state is State.RUNNING
    wait_for(lambda: holders(nodes, short) == ["SUCCEED"] * 2, 15, 0.05,
             "the node to run them once its slot frees")
    assert_each_ran_once(nodes, [long_job, *short])
