"""What every planner's resource shares (jobserver.resources): one refusal for a body
that is not JSON, one time type, one digest and one put plan."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from jobserver.batches.spec import parse_batch_config
from jobserver.datasets.consumer_spec import parse_consumer
from jobserver.datasets.spec import parse_dataset
from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.resources import CREATED, UNCHANGED, UPDATED, digest, plan_put
from jobserver.schedules.spec import parse_schedule, spec_hash
from jobserver.spec import Policy
from jobserver.views.spec import parse_view

POLICY = Policy(lambda name: False, None)
TEMPLATE = {"name": "etl", "steps": [{"type": "noop", "name": "a"}]}
PARSERS: dict[str, Callable[[Any], Any]] = {
    "schedule": lambda body: parse_schedule(body, POLICY),
    "dataset": parse_dataset,
    "consumer": parse_consumer,
    "view": lambda body: parse_view(body, POLICY),
    "batch config": parse_batch_config,
}
#: Past datetime's last instant once moved to UTC.
TOO_LATE = "9999-12-31T23:00:00-05:00"


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_every_resource_refuses_a_body_that_is_not_json_alike(kind: str) -> None:
    with pytest.raises(MalformedRequest) as caught:
        PARSERS[kind](b"{not json")
    assert caught.value.message == "request body is not valid JSON"
    assert caught.value.details == [{"field": "body", "message": "malformed JSON"}]


@pytest.mark.parametrize("kind, body, field", [
    ("schedule", {"name": "s", "template": TEMPLATE,
                  "trigger": {"type": "time", "interval": 60, "start": TOO_LATE}},
     "trigger.start"),
    ("consumer", {"dataset": "raw", "name": "c", "start": TOO_LATE}, "start"),
])
def test_a_time_past_the_last_utc_instant_is_refused_naming_its_field(
        kind: str, body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        PARSERS[kind](body)
    assert caught.value.details == [{"field": field,
                                     "message": "out of range once converted to UTC"}]


def test_times_are_kept_in_utc() -> None:
    spec = parse_consumer({"dataset": "raw", "name": "c", "start": "2026-01-01T02:00:00+02:00"})
    assert spec.start is not None and spec.start.isoformat() == "2026-01-01T00:00:00+00:00"


def test_the_digest_is_of_the_canonical_json() -> None:
    """Stored digests are compared with new ones: the canonical form must not move."""
    assert digest({"b": [1, 2], "a": "é"}) == digest({"a": "é", "b": [1, 2]}) == \
        hashlib.sha256('{"a":"é","b":[1,2]}'.encode()).hexdigest()
    spec = parse_schedule({"name": "s", "template": TEMPLATE,
                           "trigger": {"type": "time", "interval": 60}}, POLICY)
    assert spec_hash(spec) == digest(spec.model_dump(mode="json"))


def stored(spec: dict[str, Any], enabled: bool = False) -> dict[str, Any]:
    return {"spec": spec, "spec_hash": digest(spec), "enabled": enabled}


def test_a_put_creates_what_is_not_stored() -> None:
    assert plan_put(None, {"name": "a"}, digest({"name": "a"})) == (CREATED, [])


def test_a_put_of_the_same_spec_changes_nothing() -> None:
    document = {"name": "a", "description": "x"}
    assert plan_put(stored(document), document, digest(document)) == (UNCHANGED, [])
    assert plan_put(stored(document, enabled=True), document, digest(document),
                    enabled=True) == (UNCHANGED, [])


def test_a_put_names_the_top_level_fields_it_changes() -> None:
    old, new = {"name": "a", "description": "x"}, {"name": "a", "key": [1]}
    assert plan_put(stored(old), new, digest(new)) == (UPDATED, ["key", "description"])


def test_a_put_that_flips_the_flag_names_enabled() -> None:
    document = {"name": "a"}
    assert plan_put(stored(document), document, digest(document), enabled=True) == (
        UPDATED, ["enabled"])
    changed = {"name": "a", "description": "y"}
    assert plan_put(stored(document, enabled=True), changed, digest(changed),
                    enabled=False) == (UPDATED, ["description", "enabled"])


def test_equal_json_under_another_digest_is_still_a_new_spec() -> None:
    document = {"name": "a"}
    row = {"spec": document, "spec_hash": "an older canonical form", "enabled": False}
    assert plan_put(row, document, digest(document)) == (UPDATED, ["spec"])
