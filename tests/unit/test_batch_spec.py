"""The BatchConfig resource: the seed's examples load and resolve as the seed says;
every refusal names its path. Pure logic, no store."""

from __future__ import annotations

import copy
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobserver.batches.compose import launch_key, periods, stage_job
from jobserver.batches.spec import Period, parse_batch_config
from jobserver.exceptions import InvalidRequest

SEED = Path(__file__).parents[1] / "data" / "batches_seed.yaml"


def seed() -> dict[str, Any]:
    document = yaml.safe_load(SEED.read_text())
    document.pop("kind")
    return document


def refused(document: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(InvalidRequest) as caught:
        parse_batch_config(document)
    return caught.value.details


def test_the_seeds_systems_have_their_stages() -> None:
    config = parse_batch_config(seed())
    assert config.system("ORDER").stages == ["STG", "FND", "SNAPSHOT"]
    assert config.system("HR").stages == ["STG", "FND"]
    assert config.system("INVENTORY").stages == ["STG", "FND", "SNAPSHOT", "PLP", "OUTPUT"]


def test_most_specific_mapping_wins_as_the_seed_says() -> None:
    config = parse_batch_config(seed())
    assert config.groups_for("ORDER", "IN", "STG", {"sub_system": "INVOICING"}) == \
        ["STG_ORDER_JOB_GROUP"]
    assert config.groups_for("ORDER", "IN", "STG", {"sub_system": "SHIPMENT"}) == \
        ["JOB_GROUP_Y"]
    assert config.groups_for("HR", "IN", "STG", {"sub_system": "INVOICING"}) == ["JOB_GROUP_X"]
    assert config.groups_for("HR", "IN", "SNAPSHOT", {}) == []


def test_inventory_fnd_runs_two_job_groups_in_order() -> None:
    config = parse_batch_config(seed())
    job = stage_job(config, "INVENTORY", "IN", {}, date(2018, 1, 3), "FND", 7)
    assert [(s.name, s.depends_on) for s in job.steps] == [
        ("FND_JOB1", []), ("FND_JOB2", ["FND_JOB1"]), ("FND_JOB3", ["FND_JOB2"]),
        ("FND_INVENTORY_JOB1", ["FND_JOB3"]), ("FND_INVENTORY_JOB2", ["FND_INVENTORY_JOB1"]),
        ("FND_INVENTORY_JOB3", ["FND_INVENTORY_JOB2"])]
    assert job.params == {"system": "INVENTORY", "location": "IN", "business_date":
                          "2018-01-03", "stage": "FND", "batch_id": 7}


def test_sequence_numbers_and_depends_on_make_a_dag_with_the_stages_parallelism() -> None:
    document = seed()
    document["job_groups"][3]["jobs"] = [
        {"name": "a", "type": "noop", "sequence": 1}, {"name": "b", "type": "noop", "sequence": 1},
        {"name": "c", "type": "noop", "sequence": 2},
        {"name": "d", "type": "noop", "depends_on": ["a"]}]
    document["stage_settings"] = {"FND": {"parallelism": 4}}
    job = stage_job(parse_batch_config(document), "ORDER", "IN", {}, date(2018, 1, 3), "FND", 1)
    assert {s.name: s.depends_on for s in job.steps} == {"a": [], "b": [], "c": ["a", "b"],
                                                         "d": ["a"]}
    assert job.parallelism == 4


def test_ties_are_refused_naming_both() -> None:
    document = seed()
    document["job_group_mapping"].append({"system": "ORDER", "sub_system": "SHIPMENT",
                                          "stage": "STG", "job_group": ["JOB_GROUP_X"]})
    details = refused(document)
    assert details[0]["field"] == f"job_group_mapping[{len(document['job_group_mapping']) - 1}]"
    assert "job_group_mapping[2]" in details[0]["message"]


@pytest.mark.parametrize("change, field", [
    (lambda d: d["job_groups"][0]["jobs"].__setitem__(0, {"name": "a", "type": "noop",
                                                         "depends_on": ["b"]}) or
     d["job_groups"][0]["jobs"].__setitem__(1, {"name": "b", "type": "noop",
                                                "depends_on": ["a"]}), "job_groups[0].jobs"),
    (lambda d: d["system_stage_mapping"][0]["stages"].append("LOAD"),
     "system_stage_mapping[0].stages[3]"),
    (lambda d: d["job_group_mapping"].pop(3), "system_stage_mapping[0].stages[1]"),
    (lambda d: d["job_group_mapping"][0].__setitem__("job_group", ["NOPE"]),
     "job_group_mapping[0].job_group[0]"),
    (lambda d: d["job_groups"][0]["jobs"].append("UNKNOWN_JOB"), "job_groups[0].jobs[3]"),
    (lambda d: d["job_groups"][0]["jobs"].append({"name": "x", "type": "rocket"}),
     "job_groups[0].jobs[3]"),
    (lambda d: d["stage_pairs"].append(["STG", "SNAPSHOT"]), "stage_pairs[1]"),
    (lambda d: d.__setitem__("catch_up_limit", 0), "catch_up_limit"),
    (lambda d: d["job_group_mapping"][0].__setitem__("system", "SALESFORCE"),
     "job_group_mapping[0].system"),
])
def test_bad_configs_are_refused_naming_the_path(change: Any, field: str) -> None:
    document = copy.deepcopy(seed())
    change(document)
    assert field in [item["field"] for item in refused(document)]


def test_business_dates_of_daily_and_monthly_periods() -> None:
    assert periods(date(2024, 1, 1), None, date(2024, 1, 4), Period.DAILY) == [
        date(2024, 1, 2), date(2024, 1, 3), date(2024, 1, 4)]
    assert periods(None, None, date(2024, 1, 4), Period.DAILY) == [date(2024, 1, 4)]
    assert periods(date(2024, 1, 31), None, date(2024, 4, 15), Period.MONTHLY) == [
        date(2024, 2, 29), date(2024, 3, 31)]
    assert periods(date(2024, 1, 4), None, date(2024, 1, 4), Period.DAILY) == []
    assert periods(None, None, date(9999, 12, 31), Period.DAILY) == [date(9999, 12, 31)]


def test_launch_keys_name_the_run_and_fit_the_column() -> None:
    assert launch_key("ORDER", "IN", {"frequency": "daily"}, date(2018, 1, 3), "STG", 2) == \
        "batch/ORDER/IN/frequency=daily/2018-01-03/STG/2"
    long = launch_key("S" * 64, "L" * 64, {"c": "v" * 64}, date(2018, 1, 3), "T" * 64, 1)
    assert len(long) <= 200
