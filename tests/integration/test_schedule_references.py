"""Deleting what a schedule names, on a real ``jobserver serve`` per store, over HTTP
as a user does it: a consumer or a dataset named by a schedule's partition trigger or
by its job template's ``inputs`` is not deleted (409 naming each schedule and the
field); once no schedule names it, it is."""

from __future__ import annotations

from typing import Any

from tests.integration.attack import AttackNode, attack_env, attack_node, unique  # noqa: F401


def put(node: AttackNode, path: str, body: dict[str, Any]) -> None:
    status, reply = node.call("PUT", path, body)
    assert status == 201, reply


def refused(node: AttackNode, path: str) -> list[tuple[str, str]]:
    """DELETE ``path``, which must be refused; ``(schedule, message)`` of each named."""
    status, reply = node.call("DELETE", path, token="operate")
    assert status == 409, reply
    assert reply["error"]["code"] == "conflict", reply
    return [(item["schedule"], item["message"]) for item in reply["error"]["details"]]


def test_what_a_schedule_names_is_not_deleted(attack_node: AttackNode) -> None:  # noqa: F811
    ds, watcher, runner = unique("ds"), unique("watcher"), unique("runner")
    dataset = f"/api/v1/datasets/default/{ds}"
    put(attack_node, dataset, {"key": [{"name": "day", "type": "date"}]})
    for consumer in ("watched", "taken", "free"):
        put(attack_node, f"{dataset}/consumers/{consumer}", {})
    put(attack_node, f"/api/v1/schedules/default/{watcher}", {
        "template": {"name": watcher, "steps": [{"name": "s", "type": "noop"}]},
        "trigger": {"type": "or", "parts": [
            {"type": "time", "interval": "1d"},
            {"type": "partition", "dataset": ds, "consumer": "watched"}]}})
    put(attack_node, f"/api/v1/schedules/default/{runner}", {
        "template": {"name": runner, "steps": [{"name": "s", "type": "noop"}],
                     "inputs": [{"dataset": f"default/{ds}", "consumer": "taken"}]},
        "trigger": {"type": "time", "interval": "1d"}})

    assert refused(attack_node, f"{dataset}/consumers/watched") == [
        (f"default/{watcher}", f"named by schedule default/{watcher} in "
                               "trigger.parts[1].consumer")]
    assert refused(attack_node, f"{dataset}/consumers/taken") == [
        (f"default/{runner}", f"named by schedule default/{runner} in "
                              "template.inputs[0].consumer")]
    assert [schedule for schedule, _ in refused(attack_node, dataset)] == sorted(
        [f"default/{watcher}", f"default/{runner}"])
    status, reply = attack_node.call("GET", f"{dataset}/consumers")
    assert status == 200 and sorted(c["name"] for c in reply["consumers"]) == [
        "free", "taken", "watched"], reply

    status, _ = attack_node.call("DELETE", f"{dataset}/consumers/free", token="operate")
    assert status == 204  # one no schedule names goes
    for schedule in (watcher, runner):
        status, _ = attack_node.call("DELETE", f"/api/v1/schedules/default/{schedule}",
                                     token="operate")
        assert status == 204
    status, _ = attack_node.call("DELETE", f"{dataset}/consumers/watched", token="operate")
    assert status == 204
    status, _ = attack_node.call("DELETE", dataset, token="operate")
    assert status == 204
    assert attack_node.call("GET", dataset)[0] == 404
