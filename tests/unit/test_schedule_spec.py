"""Schedule specs: what is accepted, and every refusal names its field."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.schedules.spec import (AndTrigger, ConcurrencyConstraint, DelayConstraint,
                                      JobStatusTrigger, SinceLastRunConstraint,
                                      TimeTrigger, TimeWindowConstraint, leaves,
                                      load_spec, parse_schedule, spec_hash,
                                      watch_targets)
from jobserver.spec import Policy

POLICY = Policy(lambda name: name == "pkg.fn", ["echo"])


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "nightly",
        "template": {"name": "etl", "steps": [{"type": "noop", "name": "a"}]},
        "trigger": {"type": "time", "cron": "0 4 * * *", "timezone": "Europe/Berlin"},
    }
    base.update(overrides)
    return base


def refusal(document: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_schedule(document, POLICY)
    return caught.value


def fields(error: InvalidRequest) -> list[str]:
    return [detail["field"] for detail in error.details]


def test_defaults() -> None:
    spec = parse_schedule(body(), POLICY)
    assert (spec.namespace, spec.name, spec.catchup) == ("default", "nightly", "latest")
    assert (spec.timeout, spec.catchup_window, spec.misfire_grace) == (86400, 86400, 60)
    assert spec.constraints == [] and spec.properties == {}
    assert isinstance(spec.trigger, TimeTrigger) and spec.trigger.timezone == "Europe/Berlin"


def test_body_as_json_text_and_bytes() -> None:
    text = json.dumps(body())
    assert parse_schedule(text, POLICY) == parse_schedule(text.encode(), POLICY)


@pytest.mark.parametrize("given, seconds", [
    (90, 90.0), (2.5, 2.5), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0),
    ("1d", 86400.0), ("1h30m", 5400.0), ("1w", 604800.0), ("1.5s", 1.5)])
def test_durations(given: Any, seconds: float) -> None:
    assert parse_schedule(body(timeout=given), POLICY).timeout == seconds


@pytest.mark.parametrize("given", ["abc", "", "90", "1m1h", "-5s", 0, -1, True, "1 h"])
def test_bad_durations(given: Any) -> None:
    assert fields(refusal(body(timeout=given))) == ["timeout"]


def test_interval_and_calendar() -> None:
    spec = parse_schedule(body(trigger={"type": "time", "interval": "15m",
                                        "start": "2026-01-01T00:00:00+01:00"}), POLICY)
    assert isinstance(spec.trigger, TimeTrigger)
    assert spec.trigger.interval == 900
    assert spec.trigger.start == datetime(2025, 12, 31, 23, tzinfo=timezone.utc)
    calendar = {"type": "time", "calendar": {"months": 1, "hour": 4}}
    monthly = parse_schedule(body(trigger=calendar), POLICY).trigger
    assert isinstance(monthly, TimeTrigger) and monthly.calendar is not None
    assert monthly.calendar.months == 1


def test_yaml_datetimes_are_read_as_iso_strings() -> None:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    spec = parse_schedule(body(trigger={"type": "time", "interval": 60, "start": start}), POLICY)
    assert spec.trigger.start == start  # type: ignore[union-attr]
    naive = body(trigger={"type": "time", "interval": 60, "start": datetime(2026, 1, 1)})
    assert fields(refusal(naive)) == ["trigger.start"]


@pytest.mark.parametrize("trigger, field", [
    ({"type": "time", "cron": "0 0 * * * *"}, "trigger.cron"),
    ({"type": "time", "cron": "0 4 * *"}, "trigger.cron"),
    ({"type": "time", "cron": "61 4 * * *"}, "trigger.cron"),
    ({"type": "time", "cron": "0 4 * * 8"}, "trigger.cron"),
    ({"type": "time", "cron": "0 0 30 2 *"}, "trigger.cron"),  # never fires
    ({"type": "time", "cron": "0 4 * * *", "timezone": "Mars/Olympus"}, "trigger.timezone"),
    ({"type": "time", "interval": 0.5}, "trigger.interval"),
    ({"type": "time", "calendar": {"hour": 4}}, "trigger.calendar"),
    ({"type": "time"}, "trigger"),
    ({"type": "time", "cron": "0 4 * * *", "interval": 60}, "trigger"),
    ({"type": "and", "parts": []}, "trigger.parts"),
    ({"type": "or", "parts": [{"type": "time", "cron": "0 4 * * * *"}]},
     "trigger.parts[0].cron"),
    ({"type": "job_status"}, "trigger"),
    ({"type": "job_status", "job": "etl", "states": []}, "trigger.states"),
    ({"type": "job_status", "job": "etl", "states": ["RUNNING"]}, "trigger.states[0]"),
    ({"type": "job_status", "schedule": "a/b/c"}, "trigger.schedule"),
    ({"type": "partition", "dataset": "logs", "count": 0}, "trigger.count"),
    ({"type": "partition", "dataset": "logs", "filter": ["shop ~ a"]}, "trigger.filter[0]"),
    ({"type": "partition", "dataset": "logs", "filter": ["day in 1, 2"]},
     "trigger.filter[0]"),
    ({"type": "nope"}, "trigger"),
    ({"type": "time", "cron": "0 4 * * *", "color": "red"}, "trigger.color"),
])
def test_bad_triggers(trigger: dict[str, Any], field: str) -> None:
    assert fields(refusal(body(trigger=trigger)))[0] == field


def test_nesting_is_bounded() -> None:
    trigger: dict[str, Any] = {"type": "job_status", "job": "etl"}
    for _ in range(5):
        trigger = {"type": "and", "parts": [trigger]}
    parse_schedule(body(trigger=trigger), POLICY)
    error = refusal(body(trigger={"type": "or", "parts": [trigger]}))
    assert fields(error) == ["trigger" + ".parts[0]" * 5]


@pytest.mark.parametrize("constraint, field", [
    ({"type": "concurrency", "limit": 0}, "constraints[0].limit"),
    ({"type": "delay", "duration": "5m", "on_unmet": "abort"}, "constraints[0].on_unmet"),
    ({"type": "time_window", "start": "25:00", "end": "06:00"}, "constraints[0].start"),
    ({"type": "time_window", "start": "22:00", "end": "22:00"}, "constraints[0].end"),
    ({"type": "time_window", "start": "22:00", "end": "6:00"}, "constraints[0].end"),
    ({"type": "time_window", "start": "22:00", "end": "06:00", "timezone": "Nowhere"},
     "constraints[0].timezone"),
    ({"type": "since_last_run", "duration": "later"}, "constraints[0].duration"),
    ({"type": "concurrency", "limit": 1, "on_unmet": "maybe"}, "constraints[0].on_unmet"),
    ({"type": "sometimes"}, "constraints[0]"),
])
def test_bad_constraints(constraint: dict[str, Any], field: str) -> None:
    assert fields(refusal(body(constraints=[constraint]))) == [field]


def test_constraint_defaults() -> None:
    spec = parse_schedule(body(constraints=[
        {"type": "concurrency", "limit": 1}, {"type": "delay", "duration": "5m"},
        {"type": "time_window", "start": "22:00", "end": "06:00"},
        {"type": "since_last_run", "duration": "1h"}]), POLICY)
    kinds = [(type(c), c.on_unmet) for c in spec.constraints]
    assert kinds == [(ConcurrencyConstraint, "abort"), (DelayConstraint, "wait"),
                     (TimeWindowConstraint, "wait"), (SinceLastRunConstraint, "abort")]


@pytest.mark.parametrize("overrides, field", [
    ({"namespace": "a/b"}, "namespace"), ({"name": "a/b"}, "name"), ({"name": ""}, "name"),
    ({"name": "x" * 65}, "name"), ({"catchup": "some"}, "catchup"),
    ({"description": "x" * 501}, "description"), ({"extra": 1}, "extra")])
def test_bad_schedule_fields(overrides: dict[str, Any], field: str) -> None:
    assert fields(refusal(body(**overrides))) == [field]


def test_template_problems_carry_the_template_prefix() -> None:
    shell = {"name": "etl", "steps": [{"type": "shell", "name": "a", "argv": ["rm", "-rf"]}]}
    error = refusal(body(template=shell))
    assert fields(error) == ["template.steps[0].argv[0]"]
    assert error.message.startswith("template.steps[0].argv[0]: executable 'rm'")
    python = {"name": "etl", "steps": [{"type": "python", "name": "a", "callable": "x"}]}
    assert fields(refusal(body(template=python))) == ["template.steps[0].callable"]
    typed = {"name": "etl", "steps": [{"type": "shell", "name": "a", "argv": []}]}
    assert fields(refusal(body(template=typed))) == ["template.steps[0].argv"]
    assert fields(refusal(body(template={"name": "etl", "steps": []}))) == ["template.steps"]


def test_message_is_the_first_problem_and_details_list_all() -> None:
    error = refusal(body(name="a/b", constraints=[{"type": "concurrency", "limit": 0}]))
    assert fields(error) == ["name", "constraints[0].limit"]
    assert error.message.startswith("name: ")


def test_malformed_json() -> None:
    with pytest.raises(MalformedRequest):
        parse_schedule(b"{not json", POLICY)


def test_spec_hash_is_stable_and_sensitive() -> None:
    first = parse_schedule(body(), POLICY)
    again = parse_schedule(json.dumps(body(), indent=2), POLICY)
    assert spec_hash(first) == spec_hash(again)
    assert len(spec_hash(first)) == 64
    assert spec_hash(parse_schedule(body(timeout="1h"), POLICY)) != spec_hash(first)
    # A default written out is the same spec.
    assert spec_hash(parse_schedule(body(catchup="latest"), POLICY)) == spec_hash(first)


SEED_AND = {"type": "and", "parts": [
    {"type": "job_status", "job": "Workflow1"},
    {"type": "or", "parts": [{"type": "job_status", "schedule": "other/w2"},
                             {"type": "partition", "dataset": "logs", "count": 3}]}]}


def test_leaves_and_their_paths() -> None:
    spec = parse_schedule(body(trigger=SEED_AND), POLICY)
    assert isinstance(spec.trigger, AndTrigger)
    assert [path for path, _ in leaves(spec.trigger)] == ["0", "1.0", "1.1"]
    assert isinstance(leaves(spec.trigger)[0][1], JobStatusTrigger)
    lone = parse_schedule(body(), POLICY).trigger
    assert leaves(lone) == [("", lone)]


def test_watch_targets() -> None:
    spec = parse_schedule(body(namespace="team", trigger={"type": "or", "parts": [
        *SEED_AND["parts"], {"type": "job_status", "schedule": "local"},
        {"type": "time", "interval": 60}]}), POLICY)
    assert watch_targets(spec) == {("job", "Workflow1"), ("schedule", "other/w2"),
                                   ("dataset", "team/logs"), ("schedule", "team/local")}


def test_a_stored_spec_loads_back_without_the_policy() -> None:
    spec = parse_schedule(body(trigger={"type": "time", "interval": 60,
                                        "start": "2026-01-01T00:00:00Z"}), POLICY)
    stored = json.loads(json.dumps(spec.model_dump(mode="json")))
    assert load_spec(stored) == spec
    assert spec_hash(load_spec(stored)) == spec_hash(spec)
