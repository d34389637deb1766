"""Partition keys and the filter grammar: typed values, their stored order, and the
same answers from the filter's SQL (on SQLite) and from Python."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobserver.datasets.filters import Filter, FilterSyntaxError, split_condition
from jobserver.datasets.keys import KeyField, KeyValueError, PartitionKey
from jobserver.datasets.spec import (MAX_LOCATION_BYTES, check_partitions, parse_dataset)
from jobserver.exceptions import InvalidRequest
from jobserver.store import Store

KEY = PartitionKey.of([{"name": "date", "type": "date"}, {"name": "hour", "type": "int"},
                       {"name": "shop", "type": "string"}, {"name": "at", "type": "datetime"},
                       {"name": "ok", "type": "bool"}])


def partition(**key: object) -> dict[str, object]:
    full = {"date": "2026-11-01", "hour": 3, "shop": "berlin", "at": "2026-11-01T10:00:00Z",
            "ok": True, **key}
    return {"key": {name: value for name, value in full.items() if value is not None},
            "location": "/data/x"}


def fields(items: list[object]) -> list[str]:
    _, problems = check_partitions(items, KEY)
    return [problem["field"] for problem in problems]


# -- keys ---------------------------------------------------------------------------------
def test_a_valid_key_is_typed_and_stored_in_its_columns() -> None:
    found, problems = check_partitions([partition()], KEY)
    assert problems == []
    columns = found[0].columns
    assert len(columns) == 8 and columns[5:] == ("", "", "")
    assert KEY.from_columns(columns) == {"date": "2026-11-01", "hour": 3, "shop": "berlin",
                                         "at": "2026-11-01T10:00:00.000000Z", "ok": True}


@pytest.mark.parametrize("key,field", [
    ({"hour": None}, "partitions[0].key.hour"),               # missing
    ({"hour": "3"}, "partitions[0].key.hour"),                # a string for an int
    ({"hour": True}, "partitions[0].key.hour"),               # a boolean is not an int
    ({"hour": 2**63}, "partitions[0].key.hour"),              # beyond 64 bits
    ({"date": "2026-13-01"}, "partitions[0].key.date"),       # no such month
    ({"date": "20261101"}, "partitions[0].key.date"),
    ({"at": "2026-11-01T10:00:00"}, "partitions[0].key.at"),  # no offset
    ({"ok": "yes"}, "partitions[0].key.ok"),
    ({"shop": ""}, "partitions[0].key.shop"),
    ({"shop": "x" * 201}, "partitions[0].key.shop"),
    ({"colour": "red"}, "partitions[0].key.colour"),          # not declared
])
def test_a_bad_key_names_the_field(key: dict[str, object], field: str) -> None:
    assert fields([partition(**key)]) == [field]


def test_location_metadata_and_repeated_keys_are_named() -> None:
    big = {**partition(), "location": "é" * (MAX_LOCATION_BYTES // 2 + 1)}
    assert fields([big]) == ["partitions[0].location"]
    assert fields([{**partition(), "metadata": {"x": "y" * 5000}}]) == ["partitions[0].metadata"]
    assert fields([{**partition(), "metadata": []}]) == ["partitions[0].metadata"]
    assert fields([{**partition(), "extra": 1}]) == ["partitions[0].extra"]
    assert fields([partition(), partition()]) == ["partitions[1].key"]
    assert fields(["nope"]) == ["partitions[0]"]


def test_a_dataset_declares_unique_typed_fields() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_dataset({"name": "raw", "key": [{"name": "d", "type": "date"},
                                              {"name": "d", "type": "int"}]})
    assert caught.value.details[0]["field"] == "key"
    with pytest.raises(InvalidRequest) as caught:
        parse_dataset({"name": "raw", "key": [{"name": "d", "type": "float"}]})
    assert caught.value.details[0]["field"] == "key[0].type"
    with pytest.raises(InvalidRequest) as caught:
        parse_dataset({"name": "a/b", "key": [{"name": "d", "type": "date"}]})
    assert caught.value.details[0]["field"] == "name"


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=20))
def test_ints_sort_as_numbers_once_stored(values: list[int]) -> None:
    field = KeyField("n", "int")
    encoded = sorted(values, key=field.encode)
    assert encoded == sorted(values)
    assert [field.decode(field.encode(value)) for value in values] == values


@given(st.lists(st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(9999, 12, 30),
                             timezones=st.sampled_from([timezone.utc,
                                                        timezone(timedelta(hours=5))])),
                min_size=2, max_size=20))
def test_datetimes_sort_as_instants_once_stored(values: list[datetime]) -> None:
    field = KeyField("at", "datetime")
    assert sorted(values, key=field.encode) == sorted(values)


# -- the filter grammar -------------------------------------------------------------------
@pytest.mark.parametrize("text,parsed", [
    ("date >= 2026-11-01", ("date", ">=", ["2026-11-01"])),
    ("hour<12", ("hour", "<", ["12"])),
    ("shop in (berlin, paris)", ("shop", "in", ["berlin", "paris"])),
    ('shop in ("new york", "a,b", "say \\"hi\\"")',
     ("shop", "in", ["new york", "a,b", 'say "hi"'])),
    ("shop = new york", ("shop", "=", ["new york"])),
    ("meta.source = crawler", ("meta.source", "=", ["crawler"])),
    ("at > 2026-11-01T10:00:00+01:00", ("at", ">", ["2026-11-01T10:00:00+01:00"])),
])
def test_conditions_parse(text: str, parsed: tuple[str, str, list[str]]) -> None:
    assert split_condition(text) == parsed


@pytest.mark.parametrize("text", ["date", "date >=", "date => 1", "shop in berlin",
                                  "shop in ()", 'shop = "open', "1date = 2", "meta. = x"])
def test_malformed_conditions_are_refused(text: str) -> None:
    with pytest.raises(FilterSyntaxError):
        split_condition(text)


@pytest.mark.parametrize("conditions,message", [
    (["colour = red"], "not a key field"),
    (["hour >= noon"], "not an integer"),
    (["date < 2026-02-30"], "not a date"),
    (["meta.source > x"], "'=' or 'in' only"),
])
def test_filters_are_checked_against_the_key(conditions: list[str], message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Filter.parse(["hour >= 1", *conditions], KEY)
    assert caught.value.details[0]["field"] == "where[1]"
    assert message in caught.value.details[0]["message"]


def test_python_and_sql_give_the_same_answers(tmp_path: Path) -> None:
    """Random partitions and filters: the SQL translation (run on SQLite) selects
    exactly the partitions the Python evaluator accepts."""
    store = Store(f"sqlite:///{tmp_path / 'filters.db'}")
    store.upgrade()
    store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "date", "type": "date"}, {"name": "hour", "type": "int"},
        {"name": "shop", "type": "string"}]}))
    rng = random.Random(7)
    items = [{"key": {"date": str(date(2026, 10, 25) + timedelta(days=rng.randrange(14))),
                      "hour": rng.randrange(-30, 30), "shop": rng.choice("abcXé")
                      + str(rng.randrange(3))},
              "location": "/x", "metadata": rng.choice([{}, {"src": "a"}, {"src": 1},
                                                         {"src": True}, {"src": [1]}])}
             for _ in range(300)]
    unique = list({str(sorted(item["key"].items())): item for item in items}.values())
    store.partitions.add("default", "raw", unique)
    dataset, stored, _ = store.partitions.list("default", "raw", [], limit=500)
    key = dataset.partition_key
    assert len(stored) == len(unique) > 250
    choices = ["hour >= -3", "hour < 10", "hour != 0", "hour in (-5, 5, 7)",
               "date > 2026-11-01", "date <= 2026-10-30", "shop >= b", "shop in (a1, é2)",
               "meta.src = a", "meta.src = 1", "meta.src = true", "meta.src in (a, true)"]
    for _ in range(60):
        conditions = rng.sample(choices, rng.randint(1, 3))
        parsed = Filter.parse(conditions, key)
        _, page, _ = store.partitions.list("default", "raw", conditions, limit=500)
        expected = {p.id for p in stored if parsed.matches(p.columns, p.metadata)}
        assert {p.id for p in page} == expected, conditions
    store.dispose()


@settings(max_examples=50)
@given(st.text(max_size=40))
def test_any_text_parses_or_is_refused_with_a_message(text: str) -> None:
    try:
        Filter.parse([text], KEY)
    except InvalidRequest as exc:
        assert exc.details[0]["field"] == "where[0]" and exc.details[0]["message"]
    except KeyValueError:  # pragma: no cover - must be wrapped
        pytest.fail("an unwrapped KeyValueError")
