"""CDAP's schedules (seed 002) on a real ``jobserver serve`` per store, over HTTP as a
user drives them: a partition trigger created enabled counts every partition
committed after its enabling, however soon after it comes; a trigger that names a
dataset, consumer or schedule that does not exist is refused when it is saved."""

from __future__ import annotations

import time
from typing import Any

from tests.helpers import wait_for
from tests.integration.attack import AttackNode, attack_env, attack_node, unique  # noqa: F401

TEMPLATE = {"name": "on-partition", "steps": [{"name": "s", "type": "noop"}]}
#: The partition of schedule N is added STAGGER * N seconds after its enabling: all
#: within the first second, before and after the evaluator's first look.
STAGGER, SCHEDULES = 0.15, 6


def put_dataset(node: AttackNode, name: str) -> None:
    status, reply = node.call("PUT", f"/api/v1/datasets/default/{name}",
                              {"key": [{"name": "day", "type": "date"}]})
    assert status == 201, reply


def put_schedule(node: AttackNode, name: str, trigger: dict[str, Any]) -> tuple[int, Any]:
    return node.call("PUT", f"/api/v1/schedules/default/{name}",
                     {"template": TEMPLATE, "trigger": trigger, "enabled": True})


def schedule_jobs(node: AttackNode, name: str) -> list[dict[str, Any]]:
    status, reply = node.call("GET", f"/api/v1/schedules/default/{name}/jobs")
    assert status == 200, reply
    return reply["schedule_jobs"]


def test_partitions_added_in_the_first_second_after_enabling_each_fire_once(
        attack_node: AttackNode) -> None:  # noqa: F811
    names = [unique(f"race{n}-") for n in range(1, SCHEDULES + 1)]
    for name in names:
        put_dataset(attack_node, name)
    enabled_at = []
    for name in names:
        status, reply = put_schedule(attack_node, name, {"type": "partition",
                                                         "dataset": name, "count": 1})
        assert status == 201, reply
        enabled_at.append(time.monotonic())
    for n, (name, at) in enumerate(zip(names, enabled_at), 1):
        time.sleep(max(0.0, at + STAGGER * n - time.monotonic()))
        status, reply = attack_node.call("POST", f"/api/v1/datasets/default/{name}/partitions",
                                         {"key": {"day": "2026-11-01"}, "location": "/p"})
        assert status == 201, reply

    def fired() -> dict[str, int]:
        counts = {name: len(schedule_jobs(attack_node, name)) for name in names}
        return counts if all(counts.values()) else {}

    counts = wait_for(fired, 15, 0.2, "every schedule fired")
    assert counts == {name: 1 for name in names}
    for name in names:
        (job,) = schedule_jobs(attack_node, name)
        assert job["state"] == "LAUNCHED", job
        assert [n["count"] for n in job["notifications"]] == [1], job


def test_a_trigger_naming_what_does_not_exist_is_refused_naming_the_field(
        attack_node: AttackNode) -> None:  # noqa: F811
    dataset, name = unique("ds"), unique("dangling")
    put_dataset(attack_node, dataset)
    cases = [({"type": "partition", "dataset": unique("nowhere")}, "trigger.dataset"),
             ({"type": "partition", "dataset": dataset, "consumer": "load"},
              "trigger.consumer"),
             ({"type": "job_status", "schedule": unique("nobody")}, "trigger.schedule")]
    for trigger, field in cases:
        status, reply = put_schedule(attack_node, name, trigger)
        assert status == 422, reply
        assert [item["field"] for item in reply["error"]["details"]] == [field], reply
    status, _ = attack_node.call("GET", f"/api/v1/schedules/default/{name}")
    assert status == 404  # nothing was stored
    status, reply = attack_node.call("PUT", f"/api/v1/datasets/default/{dataset}/consumers/load",
                                     {})
    assert status == 201, reply
    status, reply = put_schedule(attack_node, name, cases[1][0])
    assert status == 201, reply
