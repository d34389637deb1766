"""Instantiation: mappings (same, fixed, list, last N days, every day of the month),
order, and refusals naming the address."""

from __future__ import annotations

from typing import Any

import pytest

from jobserver.exceptions import InvalidRequest
from jobserver.views.lattice import instantiate
from jobserver.views.model import ViewAddress
from jobserver.views.spec import ViewSpec, parse_view, validate_views

SHOP_DAY = [{"name": n, "type": "string"} for n in ("shop", "year", "month", "day")]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}
JOB = {"job": {"steps": [{"name": "t", "type": "noop"}]}}


def lattice_of(*bodies: dict[str, Any]) -> dict[str, ViewSpec]:
    specs = [parse_view({"parameters": SHOP_DAY, "structure": FIELDS, "transformation": JOB,
                         **body}) for body in bodies]
    validate_views(specs)
    return {spec.name: spec for spec in specs}


def at(name: str, *values: str | None) -> ViewAddress:
    package, view = name.split("/")
    return ViewAddress(package, view, tuple(values))


def paths(addresses: Any) -> list[str]:
    return [address.path for address in addresses]


def test_same_fixed_and_list_mappings() -> None:
    # Src's day declares a pattern of its own: '$01', which the default refuses.
    days = [*SHOP_DAY[:3], {"name": "day", "pattern": r"\$?[0-9]+"}]
    views = lattice_of(
        {"name": "a.b/Src", "transformation": "noop", "parameters": days},
        {"name": "a.b/Env", "parameters": [{"name": "env", "type": "string"}],
         "transformation": "noop"},
        {"name": "a.b/V", "dependencies": [
            {"view": "a.b/Src", "map": {"shop": "$shop", "year": "$year", "month": "$month",
                                        "day": "$day"}},
            {"view": "a.b/Src", "map": {"shop": ["S1", "$shop", "S1"], "year": "$year",
                                        "month": "$month", "day": "$$01"}},
            {"view": "a.b/Env", "map": {"env": None}}]})
    wanted = at("a.b/V", "S9", "2015", "05", "03")
    lattice = instantiate(views, [wanted])
    assert paths(lattice.dependencies[wanted]) == [
        "a.b/Src/S9/2015/05/03", "a.b/Src/S1/2015/05/$01", "a.b/Src/S9/2015/05/$01",
        "a.b/Env/null()"]


def test_last_n_days_cross_a_month_and_year_boundary() -> None:
    views = lattice_of({"name": "a.b/Src", "transformation": "noop"},
                       {"name": "a.b/W", "dependencies": [
                           {"view": "a.b/Src", "map": {"shop": "$shop"}, "days": {"last": 3}}]})
    wanted = at("a.b/W", "S", "2016", "01", "02")
    assert paths(instantiate(views, [wanted]).dependencies[wanted]) == [
        "a.b/Src/S/2015/12/31", "a.b/Src/S/2016/01/01", "a.b/Src/S/2016/01/02"]


def test_every_day_of_this_month_including_a_leap_day() -> None:
    views = lattice_of(
        {"name": "a.b/Src", "transformation": "noop"},
        {"name": "a.b/M", "parameters": [{"name": "y", "type": "int"},
                                         {"name": "m", "type": "string"}],
         "dependencies": [{"view": "a.b/Src", "map": {"shop": "ALL"},
                           "days": {"every": "month", "of": ["y", "m"]}}]})
    wanted = at("a.b/M", "2016", "2")
    found = instantiate(views, [wanted]).dependencies[wanted]
    assert len(found) == 29 and found[-1].path == "a.b/Src/ALL/2016/02/29"


def test_the_order_puts_every_dependency_first_and_each_partition_once() -> None:
    views = lattice_of(
        {"name": "a.b/Src", "transformation": "noop"},
        {"name": "a.b/Day", "dependencies": [{"view": "a.b/Src", "map": {"shop": "$shop"},
                                              "days": {"last": 1}}]},
        {"name": "a.b/Week", "dependencies": [{"view": "a.b/Day", "map": {"shop": "$shop"},
                                               "days": {"last": 7}}]})
    wanted = [at("a.b/Week", "S", "2015", "05", d) for d in ("10", "11")]
    lattice = instantiate(views, wanted)
    position = {address: i for i, address in enumerate(lattice.order)}
    assert len(position) == len(lattice.order) == 2 + 8 + 8
    for address, dependencies in lattice.dependencies.items():
        assert all(position[d] < position[address] for d in dependencies)
    assert lattice.addressed == set(wanted)


def test_without_recursion_only_the_addressed_partitions() -> None:
    views = lattice_of({"name": "a.b/Src", "transformation": "noop"},
                       {"name": "a.b/Day", "dependencies": [
                           {"view": "a.b/Src", "map": {"shop": "$shop"}, "days": {"last": 1}}]})
    wanted = at("a.b/Day", "S", "2015", "05", "10")
    lattice = instantiate(views, [wanted, wanted], recursive=False)
    assert lattice.order == [wanted] and lattice.dependencies == {wanted: ()}


@pytest.mark.parametrize("address, message", [
    (at("a.b/Nope", "x"), "a.b/Nope/x: no view named a.b/Nope"),
    (at("a.b/Src", "S", "2015", "05"), "a.b/Src/S/2015/05: a.b/Src takes 4 parameter value(s) "
                                       "(shop, year, month, day), not 3"),
    (at("a.b/N", "x"), "a.b/N/x: 'x' is not a int (n)"),
    (at("a.b/Day", "S", "2015", "02", "30"), "a.b/Day/S/2015/02/30: 2015/02/30 is not a date: "
                                            "'30' is not a day of 2015-02 (day: 01 to 28)"),
])
def test_a_wrong_address_is_refused_naming_it(address: ViewAddress, message: str) -> None:
    views = lattice_of({"name": "a.b/Src", "transformation": "noop"},
                       {"name": "a.b/N", "parameters": [{"name": "n", "type": "int"}]},
                       {"name": "a.b/Day", "dependencies": [
                           {"view": "a.b/Src", "map": {"shop": "$shop"}, "days": {"last": 1}}]})
    with pytest.raises(InvalidRequest) as exc:
        instantiate(views, [address])
    assert exc.value.message == message


# The request's limit (views.max_partitions): counted while expanding


def test_the_dependencies_count_against_the_limit_as_they_are_made() -> None:
    from jobserver.views import limits

    views = lattice_of({"name": "a.b/Src", "transformation": "noop"},
                       {"name": "a.b/W", "dependencies": [
                           {"view": "a.b/Src", "map": {"shop": "$shop"}, "days": {"last": 7}}]})
    wanted = [at("a.b/W", "S", "2016", "01", f"{day:02d}") for day in range(1, 4)]
    assert len(instantiate(views, wanted, limit=12)) == 3 + 9  # 9 distinct days read
    assert len(instantiate(views, wanted, recursive=False, limit=3)) == 3
    with limits.bound(11), pytest.raises(InvalidRequest) as exc:
        instantiate(views, wanted)
    [detail] = exc.value.details
    assert detail == {"field": "pattern", "limit": 11, "message": (
        "the pattern addresses more than 11 view partitions with their dependencies; at "
        "most 11 per request (views.max_partitions): narrow its ranges or enumerations")}


def test_a_mapping_fanning_out_past_the_limit_is_refused_before_it_is_built() -> None:
    shops = [f"S{n}" for n in range(1000)]
    views = lattice_of({"name": "a.b/Src", "transformation": "noop"},
                       {"name": "a.b/Wide", "dependencies": [
                           {"view": "a.b/Src", "map": {"shop": shops, "year": shops,
                                                       "month": shops, "day": "01"}}]})
    with pytest.raises(InvalidRequest) as exc:  # 10^9 links: counted, never listed
        instantiate(views, [at("a.b/Wide", "S", "2016", "01", "02")], limit=1000)
    assert "read more than 32,000 dependency partitions in all (reached at " \
           "a.b/Wide/S/2016/01/02)" in exc.value.message
    assert exc.value.details[0]["limit"] == 1000
