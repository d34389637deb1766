"""View definitions: parse_view's field paths, validate_views over a set, the example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.spec import Policy
from jobserver.views.lattice import instantiate
from jobserver.views.model import ViewAddress
from jobserver.views.spec import ViewSpec, load_view, parse_view, validate_views

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "views.yaml"
DAY = [{"name": n, "type": "string"} for n in ("year", "month", "day")]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}
JOB = {"job": {"steps": [{"name": "t", "type": "shell", "argv": ["echo", "${day}"]}]}}


def view(name: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "parameters": DAY, "structure": FIELDS,
                            "transformation": "noop"}
    body.update(extra)
    return body


def fields_of(exc: pytest.ExceptionInfo[InvalidRequest]) -> list[str]:
    return [detail["field"] for detail in exc.value.details]


def test_a_minimal_noop_view_parses_and_round_trips() -> None:
    spec = parse_view({"kind": "View", **view("app.x/Source")})
    assert spec.noop and spec.parameter_names == ["year", "month", "day"]
    assert load_view(spec.model_dump(mode="json")) == spec


def test_a_job_template_may_leave_out_its_name() -> None:
    spec = parse_view(view("app.x/T", transformation=JOB))
    assert spec.job is not None and spec.job.steps[0].argv == ["echo", "${day}"]


@pytest.mark.parametrize("body, field", [
    (view("nopackage"), "name"),
    (view("app.x/V", parameters=[{"name": "a", "type": "date"}]), "parameters[0].type"),
    (view("app.x/V", transformation="spark"), "transformation"),
    (view("app.x/V", transformation=42), "transformation"),
    (view("app.x/V", transformation={"job": {"steps": [{"name": "s", "type": "shell"}]}}),
     "transformation.job.steps[0].argv"),
    (view("app.x/V", dependencies=[{"view": "app.x/W", "days": {"last": 0}}]),
     "dependencies[0].days.last"),
    (view("app.x/V", dependencies=[{"view": "app.x/W", "days": {"last": 2, "every": "month"}}]),
     "dependencies[0].days"),
    (view("app.x/V", dependencies=[{"view": "app.x/W", "map": {"a": 1}}]),
     "dependencies[0].map.a"),
    (view("app.x/V", colour="red"), "colour"),
])
def test_a_malformed_definition_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_view(body)
    assert field in fields_of(exc), exc.value.details


def test_a_body_that_is_not_json_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        parse_view(b"{nope")


def test_another_kind_is_refused() -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_view({"kind": "Schedule", **view("app.x/V")})
    assert fields_of(exc) == ["kind"]


def test_references_must_name_the_views_own_parameters() -> None:
    body = view("app.x/V", transformation={"job": {"steps": [
        {"name": "t", "type": "shell", "argv": ["echo", "${shop}", "$${shop}", "$HOME"]}]}},
        location="/data/${year}/${hour}",
        dependencies=[{"view": "app.x/W", "map": {"a": "$nope"},
                       "days": {"last": 2, "of": ["year", "mon", "day"]}}])
    with pytest.raises(InvalidRequest) as exc:
        parse_view(body)
    assert fields_of(exc) == ["dependencies[0].map.a", "dependencies[0].days.of",
                              "location", "transformation.job.steps[0].argv[1]"]


def test_duplicate_parameters_and_fields_are_refused() -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_view(view("app.x/V", parameters=DAY + DAY[:1],
                        structure={"fields": [{"name": "a", "type": "int"}] * 2}))
    assert fields_of(exc) == ["parameters[3].name", "structure.fields[1].name"]


def test_the_template_is_checked_against_the_job_policy() -> None:
    spec = parse_view(view("app.x/V", transformation=JOB))
    with pytest.raises(InvalidRequest) as exc:
        parse_view(view("app.x/V", transformation=JOB), Policy(lambda name: False, ["sh"]))
    assert fields_of(exc) == ["transformation.job.steps[0].argv[0]"]
    parse_view(view("app.x/V", transformation=JOB), Policy(lambda name: False, ["echo"]))
    assert spec.job is not None


def specs(*bodies: dict[str, Any]) -> list[ViewSpec]:
    return [parse_view(body) for body in bodies]


def test_validate_views_returns_dependencies_first() -> None:
    order = validate_views(specs(
        view("app.x/Top", dependencies=[{"view": "app.x/Src", "days": {"last": 3}}],
             transformation=JOB),
        view("app.x/Src")))
    assert order == ["app.x/Src", "app.x/Top"]


def test_validate_views_names_unknown_views_and_parameters() -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_views(specs(
            view("app.x/A", dependencies=[{"view": "app.x/Missing",
                                           "map": {"year": "$year"}}]),
            view("app.x/B", dependencies=[{"view": "app.x/C", "map": {
                "year": "$year", "month": "$month", "hour": "1"}}]),
            view("app.x/C")))
    problems = [(d["view"], d["field"]) for d in exc.value.details]
    assert problems == [("app.x/A", "dependencies[0].view"),
                        ("app.x/B", "dependencies[0].map.hour"),
                        ("app.x/B", "dependencies[0].map.day")]
    assert "app.x/A: dependencies[0].view: no view named app.x/Missing" in exc.value.message


def test_validate_views_checks_types_and_double_mappings() -> None:
    typed = [{"name": "n", "type": "int"}, *DAY]
    with pytest.raises(InvalidRequest) as exc:
        validate_views(specs(
            view("app.x/A", dependencies=[{"view": "app.x/B", "map": {
                "n": "x", "year": "$year"}, "days": {"last": 1}}]),
            view("app.x/B", parameters=typed)))
    messages = {d["field"]: d["message"] for d in exc.value.details}
    assert messages["dependencies[0].map.n"] == "'x' is not a int"
    assert messages["dependencies[0].map.year"] == "given twice: by map and by days.into"


def test_validate_views_refuses_a_cycle() -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_views(specs(
            view("app.x/A", dependencies=[{"view": "app.x/B", "days": {"last": 1}}]),
            view("app.x/B", dependencies=[{"view": "app.x/A", "days": {"last": 1}}])))
    assert "dependency cycle: app.x/A -> app.x/B -> app.x/A" in exc.value.message


def test_the_example_lattice_loads_and_instantiates_a_month_of_the_datamart() -> None:
    documents = list(yaml.safe_load_all(EXAMPLE.read_text()))
    views = {spec.name: spec for spec in (parse_view(doc) for doc in documents)}
    assert validate_views(views.values()) == [
        "app.eci.source/Search", "app.eci.source/Shops", "app.eci.stage/Search",
        "app.eci.stage/SearchWeekly", "app.eci.datamart/SearchExport"]
    month = ViewAddress("app.eci.datamart", "SearchExport", ("SHOP10", "2015", "05"))
    lattice = instantiate(views, [month])
    by_view: dict[str, int] = {}
    for address in lattice.order:
        by_view[address.name] = by_view.get(address.name, 0) + 1
    # May's 31 weekly aggregates read the 31 days of May and the 6 days before.
    assert by_view == {"app.eci.source/Search": 37, "app.eci.source/Shops": 2,
                       "app.eci.stage/Search": 37, "app.eci.stage/SearchWeekly": 31,
                       "app.eci.datamart/SearchExport": 1}
    assert lattice.order[-1] == month and lattice.addressed == {month}
    first_day = ViewAddress("app.eci.stage", "SearchWeekly", ("SHOP10", "2015", "05", "01"))
    assert [a.path for a in lattice.dependencies[first_day]][0] == \
        "app.eci.stage/Search/SHOP10/2015/04/25"
