"""Chaos test of schedules: 200 time-triggered schedules on three real nodes while the
node that evaluates them is killed (``kill -9``) and stopped (``SIGSTOP``).

Each configuration (every scheduler mode on the PostgreSQL store with PostgreSQL
locks, and leader mode with ZooKeeper locks) runs three ``jobserver serve`` nodes.
200 schedules are created (disabled) and enabled through the API: ``interval``
triggers of a few seconds, anchored at ``start`` times spread over the interval,
each launching a one-step noop job; half catch up ``latest``, half ``all`` with a
``catchup_window`` far longer than any outage. While they fire, the evaluator (the
node that drew the newest fence of the lock that seats it, from ``lock_epochs``) is
killed and restarted a few seconds later, then the next evaluator is stopped for
twice the lock session timeout and woken.

Then the cluster is stopped and the store alone is judged
(:mod:`tests.chaos.schedule_audit`): every fire time due up to a cutoff launched
exactly once, or skipped as its catch-up policy says; never both, never twice.

The CI version fires for :data:`CI_SECONDS` with one fault of each kind, at
intervals of 3 to 18 s: about 30 launches a second, which two cores shared with the
rest of the suite sustain while the same nodes run the launched jobs; the 3-second
schedules still miss fire times in each outage, so both catch-up policies are at
work. The full version (two minutes at intervals of 2 and 3 s, about 80 launches a
second, three faults of each kind) is marked ``soak`` and runs only when selected:
``pytest -m soak tests/chaos/test_chaos_schedules.py``; ``CHAOS_SCHEDULES_SECONDS``
sets its duration and ``CHAOS_SCHEDULES_INTERVALS`` (e.g. ``3,8,13,18``) its
intervals. Figures are printed: run with ``-s``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.chaos import schedule_audit
from tests.chaos.cluster import ChaosCluster, Figures, planner_matrix, started
from tests.chaos.conftest import make_backend
from tests.chaos.schedule_cluster import ScheduleCluster, utcnow
from tests.helpers import wait_for
from tests.integration.nodes import Harness

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SCHEDULES = 200
INTERVALS = (3.0, 8.0, 13.0, 18.0)
SOAK_INTERVALS = (2.0, 3.0)
#: Longer than any outage here: a ``catchup: all`` schedule skips nothing.
CATCHUP_WINDOW = 600.0
CI_SECONDS = 24.0
SOAK_SECONDS = 120.0
#: Fire times this close to the end are not judged: the cluster stops around them.
CUTOFF_MARGIN = 3.0
#: How long a killed node stays down before it is started again.
KILL_DOWN = 3.0
#: A stopped evaluator stays stopped this many lock session timeouts.
STOP_SESSIONS = 2.0
#: Faults begin this far into the run and are spread over this share of it.
FAULTS_FROM, FAULTS_SPAN = 0.15, 0.6


@dataclass(frozen=True)
class Plan:
    """How long the schedules fire, their intervals, and the faults, in order."""

    seconds: float
    intervals: tuple[float, ...]
    faults: tuple[str, ...]


CI_PLAN = Plan(CI_SECONDS, INTERVALS, ("kill9", "sigstop"))


def soak_plan() -> Plan:
    """Two minutes at intervals of 2 and 3 s, three faults of each kind, unless the
    environment says how long (``CHAOS_SCHEDULES_SECONDS``) and at which intervals
    (``CHAOS_SCHEDULES_INTERVALS``)."""
    seconds = float(os.environ.get("CHAOS_SCHEDULES_SECONDS", SOAK_SECONDS))
    raw = os.environ.get("CHAOS_SCHEDULES_INTERVALS")
    intervals = tuple(float(part) for part in raw.split(",")) if raw else SOAK_INTERVALS
    return Plan(seconds, intervals, ("kill9", "sigstop") * 3)


def schedule_body(index: int, plan: Plan, base: datetime) -> dict[str, object]:
    """Schedule ``index``: the plan's intervals in turn (two schedules each, one per
    catch-up policy), anchored at twentieths of its interval after ``base``."""
    interval = plan.intervals[(index // 2) % len(plan.intervals)]
    start = base + timedelta(seconds=interval * (index % 20) / 20)
    name = f"tick-{index:03d}"
    return {"name": name,
            "template": {"name": name, "steps": [{"name": "s", "type": "noop"}]},
            "trigger": {"type": "time", "interval": interval, "start": start.isoformat()},
            "catchup": "latest" if index % 2 == 0 else "all",
            "catchup_window": CATCHUP_WINDOW}


def inject(chaos: ScheduleCluster, plan: Plan, began: float) -> None:
    """Each fault of the plan at its time; returns when the last one is over."""
    count = len(plan.faults)
    for index, kind in enumerate(plan.faults):
        at = began + plan.seconds * (FAULTS_FROM + FAULTS_SPAN * index / count)
        time.sleep(max(0.0, at - time.monotonic()))  # pacing the run, not a wait for a state
        if kind == "kill9":
            chaos.kill9_evaluator(KILL_DOWN)
        else:
            chaos.sigstop_evaluator(STOP_SESSIONS * chaos.cluster.backend.session_timeout())


def run(harness: Harness, tmp_path: Path, request: pytest.FixtureRequest, mode: str,
        lock: str, plan: Plan) -> None:
    with started(harness, tmp_path, mode, make_backend(request, lock),
                 "schedules") as (cluster, figures):
        chaos = ScheduleCluster(cluster)
        began = time.monotonic()
        base = utcnow().replace(microsecond=0)
        chaos.create([schedule_body(index, plan, base) for index in range(SCHEDULES)])
        figures["create"] = time.monotonic() - began
        wait_for(lambda: chaos.launched_since(base) >= SCHEDULES, 30, 0.1,
                 f"{SCHEDULES} jobs to be launched by schedules")
        began = time.monotonic()
        inject(chaos, plan, began)
        time.sleep(max(0.0, began + plan.seconds - time.monotonic()))  # the run's length
        cutoff = utcnow() - timedelta(seconds=CUTOFF_MARGIN)
        settling = time.monotonic()
        chaos.settle(cutoff)
        figures["settle"] = time.monotonic() - settling
        figures["cpu"] = " ".join(f"{node}:{seconds:.1f}s"
                                  for node, seconds in chaos.cpu_seconds().items())
        outages = "; ".join(str(outage) for outage in chaos.outages)
        cluster.stop_all()
        figures["run"] = time.monotonic() - began
        judge(cluster, chaos, plan, cutoff, figures, outages)


def judge(cluster: ChaosCluster, chaos: ScheduleCluster, plan: Plan, cutoff: datetime,
          figures: Figures, outages: str) -> None:
    """Audit the stopped cluster's store up to ``cutoff``; print the figures; assert."""
    result = schedule_audit.audit(schedule_audit.read(cluster.store), cutoff,
                                  [outage.window() for outage in chaos.outages])
    print(f"\n{figures}\n  {result.summary()}\n  outages: {outages}")

    assert not result.problems, f"{len(result.problems)} problem(s):\n" + \
        "\n".join(result.problems[:30])
    assert [outage.kind for outage in chaos.outages] == list(plan.faults)
    assert result.in_outages > 0, f"no fire time fell due in an outage: {result.summary()}"
    assert result.fires >= SCHEDULES * plan.seconds / max(plan.intervals) / 2, \
        result.summary()


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("mode", "lock"), planner_matrix())
def test_every_fire_time_launched_once_through_kill_and_stop(
        harness: Harness, tmp_path: Path, request: pytest.FixtureRequest, mode: str,
        lock: str) -> None:
    """One ``kill -9`` and one ``SIGSTOP`` of the evaluator while 200 schedules fire:
    every due fire time launched exactly once or skipped by its catch-up policy."""
    run(harness, tmp_path, request, mode, lock, CI_PLAN)


@pytest.mark.soak
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("mode", "lock"), planner_matrix(soak=True))
def test_schedules_soak(harness: Harness, tmp_path: Path, request: pytest.FixtureRequest,
                        mode: str, lock: str) -> None:
    """The same for two minutes at intervals of 2 and 3 s with three faults of each
    kind (see the module's docstring for the knobs)."""
    run(harness, tmp_path, request, mode, lock, soak_plan())
