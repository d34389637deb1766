"""Chaos test of datasets and consumers: partitions added by four concurrent writers
while three consumers' jobs run, their nodes are killed (``kill -9``) and their steps
fail at random.

Each configuration runs three ``jobserver serve`` nodes on a fresh PostgreSQL
database. The dataset ``raw`` (key ``n: int, w: string``) gets its partitions from
four writer threads, in batches through the API (``if_absent``, so that a batch
retried after its node died adds nothing twice), spread over the run. Three
consumers (max_retries 3): ``all`` with no filter, ``ab`` on a key range (``w in (a,
b)``) whose runs fail every time they hold a poison partition (``n % 197 == 0``), and
``odd`` on metadata and a key range. A submitter per consumer keeps a few consuming
jobs queued or running while its consumer has lag; each job's shell step
(:mod:`tests.chaos.consumer_step`) writes a ledger line per partition it took and
per partition it finished, and fails one run in :data:`FAIL_RATE`. Meanwhile the
node running the most jobs is killed and, once its jobs were rescued, started again.

When every partition is added, no consumer has lag and every job ended, the nodes
are stopped and the store and the ledger are judged
(:mod:`tests.chaos.consumer_audit`): each partition processed successfully exactly
once by a run whose SUCCEED committed, never handed out again after it, or FAILED
after exactly max_retries + 1 attempts; none lost; none outside a consumer's filter
handed to it.

The CI version adds :data:`CI_PARTITIONS` partitions with two kills; the full
version (20,000 partitions, five kills, every mode) is marked ``soak``:
``pytest -m soak tests/chaos/test_chaos_consumers.py``; ``CHAOS_CONSUMERS_PARTITIONS``
sets its size. Figures are printed: run with ``-s``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos import consumer_audit
from tests.chaos.cluster import ChaosCluster, Figures, planner_matrix, started
from tests.chaos.conftest import make_backend
from tests.chaos.consumer_cluster import ConsumerLoad, plans
from tests.helpers import wait_for
from tests.integration.nodes import Harness

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

FAIL_RATE = 0.15
#: How long a step works between its take and its outcome lines.
STEP_SECONDS = 0.2
CI_PARTITIONS = 3000
SOAK_PARTITIONS = 20_000


@dataclass(frozen=True)
class Plan:
    """How many partitions, in batches of how many, added over how long; how many
    kills, spread over the writing; how long everything may take to be consumed."""

    partitions: int
    batch: int
    write_seconds: float
    kills: int
    drain_seconds: float


#: Writing lasts 30 s so that a kill's handling — the rescue (3-4 s on ZooKeeper),
#: the time down and the restart — ends while there is still work for the next kill
#: to interrupt: over 16 s, a slow restart after the first kill once outlasted the
#: writing, and the second kill then waited in vain for a running job.
CI_PLAN = Plan(CI_PARTITIONS, 100, 30.0, 2, 90.0)


def soak_plan() -> Plan:
    total = int(os.environ.get("CHAOS_CONSUMERS_PARTITIONS", SOAK_PARTITIONS))
    return Plan(total, 250, max(30.0, total / 150), 5, 600.0)


def inject(load: ConsumerLoad, plan: Plan, began: float) -> None:
    """The plan's kills, evenly over the writing (the first once jobs run)."""
    for index in range(plan.kills):
        at = began + plan.write_seconds * (index + 1) / (plan.kills + 1)
        time.sleep(max(0.0, at - time.monotonic()))  # pacing the run, not a wait for a state
        load.check_threads()
        wait_for(lambda: load.cluster.counts().get("RUNNING", 0) > 0, 30, 0.05,
                 "consuming jobs to run")
        load.kill_busiest()


def run(harness: Harness, tmp_path: Path, request: pytest.FixtureRequest, mode: str,
        lock: str, plan: Plan) -> None:
    with started(harness, tmp_path, mode, make_backend(request, lock),
                 "consumers") as (cluster, figures):
        consumers = plans()
        load = ConsumerLoad(cluster, consumers, FAIL_RATE, STEP_SECONDS)
        try:
            began = time.monotonic()
            load.declare()
            figures["declare"] = time.monotonic() - began
            began = time.monotonic()
            load.start_writers(plan.partitions, plan.batch, plan.write_seconds)
            load.start_submitters()
            inject(load, plan, began)
            load.drain(plan.drain_seconds)
            figures["run"] = time.monotonic() - began
            cluster.stop_all()
        finally:
            load.close()
        judge(cluster, load, plan, figures)


def judge(cluster: ChaosCluster, load: ConsumerLoad, plan: Plan, figures: Figures) -> None:
    """Audit the stopped cluster's store and ledger; print the figures; assert."""
    history = consumer_audit.read(cluster.store)
    result = consumer_audit.audit(history, consumer_audit.parse(cluster.ledger), load.plans)
    figures["partitions"] = len(history.partitions)
    figures["jobs"] = sum(len(ids) for ids in load.submitted.values())
    print(f"\n{figures}\n  {result.summary()}\n  kills: "
          f"{'; '.join(str(kill) for kill in load.kills)}")

    assert not result.problems, f"{len(result.problems)} problem(s):\n" + \
        "\n".join(result.problems[:30])
    assert sorted(p.key["n"] for p in history.partitions.values()) == \
        list(range(plan.partitions))
    assert len(load.kills) == plan.kills and any(kill.rescued for kill in load.kills)
    assert result.failed["ab"] > 0, "no poison partition ended FAILED"
    assert result.failed_runs and result.retries > 0, result.summary()


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("mode", "lock"), planner_matrix())
def test_every_partition_processed_once_or_failed_through_kills(
        harness: Harness, tmp_path: Path, request: pytest.FixtureRequest, mode: str,
        lock: str) -> None:
    """3,000 partitions from four writers, three consumers, two ``kill -9`` and one
    step run in seven failing: every partition processed exactly once or FAILED after
    max_retries + 1 attempts."""
    run(harness, tmp_path, request, mode, lock, CI_PLAN)


@pytest.mark.soak
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("mode", "lock"), planner_matrix(soak=True))
def test_consumers_soak(harness: Harness, tmp_path: Path, request: pytest.FixtureRequest,
                        mode: str, lock: str) -> None:
    """The same with 20,000 partitions and five kills (see the module's docstring)."""
    run(harness, tmp_path, request, mode, lock, soak_plan())
