"""A drain that begins while the scheduler is in the middle of a claim waits for the
jobs that claim took, instead of leaving them RUNNING in the store under a node about
to exit (another node would then rescue them and run them a second time).

In-process nodes on the embedded store, one per scheduler mode: the node's claim is
held open right after the store committed it, the drain begins (the node advertises
no capacity), then the claim is let go. What a user checks: the drain reports every job finished, and the job ended once,
on attempt 1, with no rescue in its history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobserver.node import Node
from jobserver.states import State
from jobserver.store.records import JobRecord
from jobserver.steps.python import PythonSteps
from tests.helpers import wait_for
from tests.integration.test_supervision import Nodes, config_for

STEP_SECONDS = 1.0


class HeldClaim:
    """Wraps a claim method of the store: the first claim that takes a job commits,
    then waits for :meth:`let_go` before its jobs reach the scheduler."""

    def __init__(self, claim: Callable[..., list[JobRecord]]) -> None:
        self._claim = claim
        self.holding = threading.Event()
        self._go = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> list[JobRecord]:
        jobs = self._claim(*args, **kwargs)
        if jobs and not self.holding.is_set():
            self.holding.set()
            self._go.wait(30)
        return jobs

    def let_go(self) -> None:
        self._go.set()


def capacity(nodes: Nodes, node_id: str) -> int | None:
    return next((server.capacity for server in nodes.probe.servers.list()
                 if server.id == node_id), None)


@pytest.mark.parametrize("mode", ["single", "distributed", "leader"])
def test_a_drain_waits_for_the_jobs_of_a_claim_under_way(tmp_path: Path, mode: str,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    nodes = Nodes(tmp_path / "data")
    node = Node(config_for(nodes.data_dir, "n1", JOBSERVER_SCHEDULER__MODE=mode),
                PythonSteps())
    holds = {name: HeldClaim(getattr(node.store.runs, name))
             for name in ("claim", "claim_assigned")}
    for name, hold in holds.items():
        monkeypatch.setattr(node.store.runs, name, hold)
    at_stop: list[State] = []
    mark_stopped = node.store.servers.mark_stopped

    def marking_stopped(server_id: str) -> None:
        at_stop.append(nodes.probe.jobs.get(job_id).state)
        mark_stopped(server_id)

    monkeypatch.setattr(node.store.servers, "mark_stopped", marking_stopped)
    node.start()
    try:
        job_id = nodes.submit([{"name": "s", "type": "sleep", "seconds": STEP_SECONDS}])
        wait_for(lambda: any(h.holding.is_set() for h in holds.values()), 15, 0.01,
                 "the node to claim the job")
        outcome: list[bool] = []
        draining = threading.Thread(target=lambda: outcome.append(node.stop()))
        draining.start()
        # The drain has begun once the node advertises no capacity (the leader gives
        # a draining node nothing more); only then does the claim deliver its job.
        wait_for(lambda: capacity(nodes, "n1") == 0, 5, 0.01, "the drain to begin")
        for hold in holds.values():
            hold.let_go()
        draining.join(30)
        assert outcome == [True], "the drain did not report every job finished"
        assert at_stop == [State.SUCCEED], f"the node was marked stopped with its job {at_stop}"
        job = nodes.probe.jobs.get(job_id)
        assert job.state is State.SUCCEED and job.attempt == 1, job
        messages = [event.message or "" for event in nodes.probe.jobs.events(job_id)]
        assert not [m for m in messages if "died" in m], messages
    finally:
        for hold in holds.values():
            hold.let_go()
        node.stop(drain_timeout=0)
        nodes.close()
