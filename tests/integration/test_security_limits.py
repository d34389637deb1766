"""A token's schedules launch no faster than the token may submit (issue: 100
one-second schedules launched 115 jobs/s from a 5/s token), against a real node whose
tokens may submit 2 jobs a second in bursts of 12. The budget is the store-independent
part (a bucket of the evaluating node), so one store is enough here; the owner's
columns are read on both stores by the schedule tests."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from jobserver.schedules.launcher import OVER_BUDGET
from jobserver.store.tables import jobs
from tests.helpers import wait_for
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401

RATE, BURST, SCHEDULES, WINDOW = 2.0, 12, 10, 5.0
pytestmark = pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_API__SUBMIT_RATE": str(RATE), "JOBSERVER_API__SUBMIT_BURST": str(BURST),
            "JOBSERVER_SCHEDULES__POLL_INTERVAL": "0.2"}


def launched(node: AttackNode, prefix: str) -> int:
    with node.store.tx.read() as conn:
        return conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.submitted_by.like(f"schedule sec/{prefix}%"))).scalar_one()


def test_a_tokens_schedules_launch_within_its_submit_rate(attack_node: AttackNode) -> None:  # noqa: F811
    prefix = unique("tick")
    for index in range(SCHEDULES):
        name = f"{prefix}{index}"
        status, reply = attack_node.call("PUT", f"/api/v1/schedules/sec/{name}", {
            "trigger": {"type": "time", "interval": 1}, "enabled": True,
            "template": {"name": name, "steps": [{"name": "a", "type": "noop"}]}},
            token="operate")
        assert status == 201, reply
        assert reply["schedule"]["owner"]["name"] == "attacker-operate"
    started = time.monotonic()
    # Past the burst, launches go on at the owner's rate: they wait, never drop.
    wait_for(lambda: launched(attack_node, prefix) >= BURST + 2, 30, 0.1,
             "launches past the burst")
    # A window long enough that ten one-second schedules, unlimited, would launch
    # about twice what the budget allows in it.
    wait_for(lambda: time.monotonic() - started >= WINDOW, WINDOW + 5, 0.1, "the window")
    count = launched(attack_node, prefix)
    elapsed = time.monotonic() - started
    assert count <= BURST + RATE * elapsed + 2, (count, elapsed)
    status, reply = attack_node.call("GET", f"/api/v1/schedules/sec/{prefix}0/evaluations",
                                     token="read")
    assert status == 200, reply
    reasons = {row["reason"] for row in reply["evaluations"]
               if row["outcome"] == "pending_launch"}
    waiting = [f"{prefix}{i}" for i in range(SCHEDULES)]
    assert OVER_BUDGET in reasons or any(
        OVER_BUDGET in {row["reason"] for row in attack_node.call(
            "GET", f"/api/v1/schedules/sec/{name}/evaluations", token="read")[1]["evaluations"]}
        for name in waiting)
