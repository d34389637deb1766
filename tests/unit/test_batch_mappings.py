"""Job-group resolution by the keys after system and sub_system: location,
sub_location, custom1 and custom2. The most specific matching mapping wins, keys
compared in the order system, sub_system, location, sub_location, custom1, custom2;
two entries with the same keys and values are a tie, refused at load time naming
both. Pure logic, no store."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

import pytest

from jobserver.batches.compose import stage_job
from jobserver.batches.spec import parse_batch_config
from jobserver.exceptions import InvalidRequest

GROUPS = ["G_ANY", "G_C2", "G_C1", "G_C1_C2", "G_SUBLOC", "G_LOC", "G_LOC_C2",
          "G_LOC_SUBLOC_C1", "G_SYSTEM"]

# Every mapping is for stage STG; the names say which keys each gives.
MAPPINGS: list[dict[str, Any]] = [
    {"stage": "STG", "job_group": ["G_ANY"]},
    {"custom2": "X", "stage": "STG", "job_group": ["G_C2"]},
    {"custom1": "A", "stage": "STG", "job_group": ["G_C1"]},
    {"custom1": "A", "custom2": "X", "stage": "STG", "job_group": ["G_C1_C2"]},
    # the seed spells a key with '-' (sub-system); sub-location is read the same way
    {"sub-location": "NORTH", "stage": "STG", "job_group": ["G_SUBLOC"]},
    {"location": "IN", "stage": "STG", "job_group": ["G_LOC"]},
    {"location": "IN", "custom2": "X", "stage": "STG", "job_group": ["G_LOC_C2"]},
    {"location": "IN", "sub_location": "NORTH", "custom1": "A", "stage": "STG",
     "job_group": ["G_LOC_SUBLOC_C1"]},
]


def document(mappings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "valid_systems": ["ORDER", "HR"], "valid_stages": ["STG"],
        "valid_locations": ["IN", "US"],
        "system_stage_mapping": [{"system": "ORDER", "stages": ["STG"]},
                                 {"system": "HR", "stages": ["STG"]}],
        "job_group_mapping": copy.deepcopy(MAPPINGS if mappings is None else mappings),
        "job_groups": [{"name": name, "jobs": [{"name": name.lower(), "type": "noop"}]}
                       for name in GROUPS]}


@pytest.mark.parametrize("location, context, expected", [
    # nothing but the stage matches
    ("US", {}, "G_ANY"),
    ("US", {"custom2": "Y"}, "G_ANY"),
    # custom2 alone, then custom1 beats custom2, then both beat custom1 alone
    ("US", {"custom2": "X"}, "G_C2"),
    ("US", {"custom1": "A", "custom2": "Y"}, "G_C1"),
    ("US", {"custom1": "A", "custom2": "X"}, "G_C1_C2"),
    # sub_location beats custom1 and custom2 together
    ("US", {"sub_location": "NORTH", "custom1": "A", "custom2": "X"}, "G_SUBLOC"),
    # location beats sub_location, custom1 and custom2 together
    ("IN", {"sub_location": "NORTH", "custom2": "X"}, "G_LOC_C2"),
    ("IN", {"sub_location": "SOUTH", "custom1": "A", "custom2": "X"}, "G_LOC_C2"),
    ("IN", {"sub_location": "NORTH", "custom1": "B"}, "G_LOC"),
    ("IN", {}, "G_LOC"),
    # with location, sub_location beats custom2
    ("IN", {"sub_location": "NORTH", "custom1": "A", "custom2": "X"}, "G_LOC_SUBLOC_C1"),
])
def test_the_most_specific_matching_mapping_wins(location: str, context: dict[str, str],
                                                 expected: str) -> None:
    config = parse_batch_config(document())
    assert config.groups_for("ORDER", location, "STG", context) == [expected]
    # the stage's engine job is made of that group's jobs
    job = stage_job(config, "ORDER", location, context, date(2024, 1, 31), "STG", 1)
    assert [step.name for step in job.steps] == [expected.lower()]
    assert {key: job.params[key] for key in context} == context


def test_system_beats_every_key_after_it() -> None:
    mappings = MAPPINGS + [{"system": "ORDER", "stage": "STG", "job_group": ["G_SYSTEM"]}]
    config = parse_batch_config(document(mappings))
    context = {"sub_location": "NORTH", "custom1": "A", "custom2": "X"}
    assert config.groups_for("ORDER", "IN", "STG", context) == ["G_SYSTEM"]
    # another system does not match it: the location's mapping wins there
    assert config.groups_for("HR", "IN", "STG", context) == ["G_LOC_SUBLOC_C1"]


def test_a_tie_between_equally_specific_entries_is_refused_naming_both() -> None:
    tie = {"custom1": "A", "sub_location": "NORTH", "location": "IN", "stage": "STG",
           "job_group": ["G_SYSTEM"]}  # the keys and values of MAPPINGS[7], listed otherwise
    with pytest.raises(InvalidRequest) as caught:
        parse_batch_config(document(MAPPINGS + [tie]))
    problems = caught.value.details
    assert [p["field"] for p in problems] == ["job_group_mapping[8]"]
    assert "job_group_mapping[7]" in problems[0]["message"]
    assert "ties" in problems[0]["message"] and "'STG'" in problems[0]["message"]
    assert "job_group_mapping[8]" in caught.value.message  # the error's own text names it


def test_a_tie_on_custom2_alone_is_refused_too() -> None:
    tie = {"custom2": "X", "stage": "STG", "job_group": ["G_SYSTEM"]}
    with pytest.raises(InvalidRequest) as caught:
        parse_batch_config(document(MAPPINGS + [tie]))
    assert [(p["field"], "job_group_mapping[1]" in p["message"])
            for p in caught.value.details] == [("job_group_mapping[8]", True)]


def test_the_same_keys_with_other_values_are_not_a_tie() -> None:
    other = {"location": "US", "sub_location": "NORTH", "custom1": "A", "stage": "STG",
             "job_group": ["G_SYSTEM"]}
    config = parse_batch_config(document(MAPPINGS + [other]))
    context = {"sub_location": "NORTH", "custom1": "A"}
    assert config.groups_for("ORDER", "US", "STG", context) == ["G_SYSTEM"]
    assert config.groups_for("ORDER", "IN", "STG", context) == ["G_LOC_SUBLOC_C1"]
