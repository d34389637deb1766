"""The and/or tree: what each leaf has seen, when the tree fires, with which properties."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from jobserver.schedules.spec import Trigger, parse_schedule
from jobserver.schedules.triggers import (JobEvent, Notification, deliver, explain,
                                          fired_properties, matching_parts, satisfied,
                                          satisfied_parts)
from jobserver.spec import Policy

NOW = datetime(2026, 5, 1, 12, tzinfo=timezone.utc)


def tree(trigger: dict[str, Any], namespace: str = "default") -> Trigger:
    spec = parse_schedule({"namespace": namespace, "name": "s", "trigger": trigger,
                           "template": {"name": "t", "steps": [{"type": "noop", "name": "a"}]}},
                          Policy(lambda name: False, None))
    return spec.trigger


def ended(part: str, job_id: int = 1, state: str = "SUCCEED") -> Notification:
    return Notification(part=part, kind="job_status", at=NOW, job_id=job_id, state=state)


def partitions(part: str, count: int) -> Notification:
    return Notification(part=part, kind="partition", at=NOW, count=count)


# CDAP: and(onProgramStatus(Workflow1, COMPLETED), onProgramStatus(Workflow2, COMPLETED))
SEED_AND = {"type": "and", "parts": [{"type": "job_status", "job": "Workflow1"},
                                     {"type": "job_status", "job": "Workflow2"}]}


def test_the_seed_and_fires_only_when_both_workflows_completed() -> None:
    trigger = tree(SEED_AND)
    state: dict[str, Any] = {}
    assert not satisfied(trigger, state)
    state = deliver(trigger, state, ended("0", job_id=7))
    assert state == {"0": {"satisfied": True}}
    assert not satisfied(trigger, state)
    # Workflow1 again: still waiting for Workflow2, and what it saw is kept.
    state = deliver(trigger, state, ended("0", job_id=8))
    assert not satisfied(trigger, state)
    assert explain(trigger, state) == "and(job Workflow1 SUCCEED [x], job Workflow2 SUCCEED [ ])"
    state = deliver(trigger, state, ended("1", job_id=9))
    assert satisfied(trigger, state)
    assert explain(trigger, state) == "and(job Workflow1 SUCCEED [x], job Workflow2 SUCCEED [x])"
    assert satisfied_parts(trigger, state) == ["0", "1"]


def test_deliver_leaves_the_given_state_alone() -> None:
    trigger = tree(SEED_AND)
    before: dict[str, Any] = {}
    after = deliver(trigger, before, ended("0"))
    assert before == {} and after != before


def test_or_fires_on_either_part() -> None:
    trigger = tree({"type": "or", "parts": SEED_AND["parts"]})
    assert satisfied(trigger, deliver(trigger, {}, ended("1")))
    assert not satisfied(trigger, {})


def test_nested_paths() -> None:
    trigger = tree({"type": "or", "parts": [
        {"type": "time", "cron": "0 4 * * *"},
        {"type": "and", "parts": SEED_AND["parts"]}]})
    state = deliver(trigger, {}, ended("1.0"))
    assert not satisfied(trigger, state)
    assert satisfied(trigger, deliver(trigger, state, ended("1.1")))
    fired = Notification(part="0", kind="time", at=NOW, fire_time=NOW)
    assert satisfied(trigger, deliver(trigger, {}, fired))


def test_partition_counts_accumulate() -> None:
    trigger = tree({"type": "partition", "dataset": "logs", "count": 5})
    state = deliver(trigger, {}, partitions("", 2))
    assert state == {"": {"count": 2, "satisfied": False}}
    assert not satisfied(trigger, state)
    state = deliver(trigger, state, partitions("", 2))
    assert not satisfied(trigger, state)
    assert explain(trigger, state) == "dataset logs 4/5 [ ]"
    state = deliver(trigger, state, partitions("", 1))
    assert satisfied(trigger, state)
    assert state[""]["count"] == 5


def test_a_lone_time_trigger() -> None:
    trigger = tree({"type": "time", "interval": 60})
    note = Notification(part="", kind="time", at=NOW, fire_time=NOW)
    assert satisfied(trigger, deliver(trigger, {}, note))
    assert explain(trigger, {}) == "time every minute [ ]"


@pytest.mark.parametrize("note", [
    Notification(part="2", kind="job_status", at=NOW),
    Notification(part="", kind="job_status", at=NOW),
    Notification(part="0", kind="partition", at=NOW, count=1)])
def test_a_note_for_no_such_leaf_is_refused(note: Notification) -> None:
    with pytest.raises(ValueError):
        deliver(tree(SEED_AND), {}, note)


def test_matching_parts() -> None:
    trigger = tree({"type": "or", "parts": [
        {"type": "job_status", "job": "etl", "states": ["SUCCEED", "ERROR"]},
        {"type": "job_status", "schedule": "nightly"},
        {"type": "job_status", "schedule": "other/nightly", "states": ["ERROR"]},
        {"type": "time", "interval": 60}]}, namespace="team")
    assert matching_parts(trigger, JobEvent(1, "etl", "ERROR", None), "team") == ["0"]
    assert matching_parts(trigger, JobEvent(1, "etl", "STOPPED", None), "team") == []
    assert matching_parts(trigger, JobEvent(2, "x", "SUCCEED", "team/nightly"), "team") == ["1"]
    assert matching_parts(trigger, JobEvent(2, "x", "ERROR", "other/nightly"), "team") == ["2"]
    assert matching_parts(trigger, JobEvent(2, "x", "SUCCEED", "other/nightly"), "team") == []
    # A job of the right name launched by some schedule still counts as that job.
    assert matching_parts(trigger, JobEvent(3, "etl", "SUCCEED", "team/x"), "team") == ["0"]


def test_fired_properties_merge_satisfied_leaves_in_path_order() -> None:
    trigger = tree({"type": "or", "parts": [
        {"type": "job_status", "job": "a", "properties": {"source": "a", "a": 1}},
        {"type": "job_status", "job": "b", "properties": {"source": "b", "b": 2}},
        {"type": "job_status", "job": "c", "properties": {"c": 3}}]})
    state = deliver(trigger, deliver(trigger, {}, ended("1")), ended("0"))
    assert fired_properties(trigger, state) == {"source": "b", "a": 1, "b": 2}
    assert fired_properties(trigger, {}) == {}


def test_notification_round_trips_through_json() -> None:
    notes = [Notification(part="1.0", kind="time", at=NOW, fire_time=NOW),
             ended("0", job_id=42, state="ERROR"), partitions("2", 3)]
    for note in notes:
        data = json.loads(json.dumps(note.to_json()))
        assert Notification.from_json(data) == note
    assert notes[0].to_json()["fire_time"] == "2026-05-01T12:00:00+00:00"
