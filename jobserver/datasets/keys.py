"""Partition keys: a dataset's declared fields, their types, and how values are
checked and stored.

A dataset declares an ordered list of typed fields (``date: date, hour: int, shop:
string``); every partition has a value for each. Values arrive as JSON (API bodies,
step outputs) or as text (filters in a query string, the command line), and are
stored one field per key column (``k0`` … ``k7``, see :mod:`.tables`) as text whose
byte order is the type's order:

* ``string``: the text itself (the columns compare bytewise: ``COLLATE "C"`` on
  PostgreSQL, SQLite's default BINARY), which is code-point order, as in Python;
* ``int``: ``value + 2**63`` as 20 zero-padded digits, so -5 < 3 < 10 as text too;
* ``date``: ``YYYY-MM-DD``; ``datetime``: UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``;
* ``bool``: ``false`` < ``true``.

So a range filter on any field is a plain comparison of its column, and the unique
index over (dataset, k0 … k7) serves equality and ranges on a leading field.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, Literal

FieldType = Literal["string", "int", "date", "datetime", "bool"]
FIELD_TYPES: tuple[FieldType, ...] = ("string", "int", "date", "datetime", "bool")
#: Key columns per partition row: a dataset declares at most this many fields.
MAX_FIELDS = 8
#: The longest string value of a key field (the whole key fits a btree index entry).
MAX_STRING = 200
FIELD_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
_FIELD_NAME = re.compile(FIELD_NAME)
_INT_OFFSET = 2**63
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_INT_TEXT = re.compile(r"[+-]?\d{1,19}")


class KeyValueError(ValueError):
    """A key value that does not fit its field; the message says why."""


def valid_field_name(name: str) -> bool:
    return bool(_FIELD_NAME.fullmatch(name))


@dataclass(frozen=True)
class KeyField:
    """One declared field of a partition key."""

    name: str
    type: FieldType

    # -- values in --------------------------------------------------------------------
    def from_json(self, value: Any) -> Any:
        """The typed value of a JSON value; :class:`KeyValueError` if it does not fit."""
        if self.type == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise KeyValueError(f"expected an integer, got {_json_type(value)}")
            return _int_range(value)
        if self.type == "bool":
            if not isinstance(value, bool):
                raise KeyValueError(f"expected true or false, got {_json_type(value)}")
            return value
        if not isinstance(value, str):
            expected = {"string": "a string", "date": "a date 'YYYY-MM-DD'",
                        "datetime": "an ISO 8601 date-time with a UTC offset"}[self.type]
            raise KeyValueError(f"expected {expected}, got {_json_type(value)}")
        return self.from_text(value)

    def from_text(self, text: str) -> Any:
        """The typed value written as text (filters, the command line)."""
        if self.type == "string":
            if not 1 <= len(text) <= MAX_STRING or "\x00" in text:
                raise KeyValueError(f"expected 1 to {MAX_STRING} characters, no NUL")
            return text
        if self.type == "int":
            if not _INT_TEXT.fullmatch(text):
                raise KeyValueError(f"{text!r} is not an integer")
            return _int_range(int(text))
        if self.type == "bool":
            if text not in ("true", "false"):
                raise KeyValueError(f"{text!r} is not true or false")
            return text == "true"
        if self.type == "date":
            return _date(text)
        return _datetime(text)

    # -- values stored ----------------------------------------------------------------
    def encode(self, value: Any) -> str:
        """The typed value as its key column's text (see the module's docstring)."""
        if self.type == "string":
            return str(value)
        if self.type == "int":
            return f"{value + _INT_OFFSET:020d}"
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "date":
            return value.isoformat()
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def decode(self, text: str) -> Any:
        """A key column's text as the JSON value a client sees."""
        if self.type == "int":
            return int(text) - _INT_OFFSET
        if self.type == "bool":
            return text == "true"
        return text

    def to_json(self, value: Any) -> Any:
        """A typed value as JSON (dates and datetimes as ISO text)."""
        return self.decode(self.encode(value))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _int_range(value: int) -> int:
    if not _INT_MIN <= value <= _INT_MAX:
        raise KeyValueError("out of the 64-bit integer range")
    return value


def _date(text: str) -> date:
    if not _DATE.fullmatch(text):
        raise KeyValueError(f"{text!r} is not a date 'YYYY-MM-DD'")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise KeyValueError(f"{text!r} is not a date: {exc}") from None


def _datetime(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z")
                                       else text)
    except ValueError:
        raise KeyValueError(f"{text!r} is not an ISO 8601 date-time") from None
    if value.tzinfo is None:
        raise KeyValueError(f"{text!r} has no UTC offset (add 'Z' or '+01:00')")
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise KeyValueError(f"{text!r} is out of range once converted to UTC") from None


@dataclass(frozen=True)
class PartitionKey:
    """A dataset's declared key: its fields, in order."""

    fields: tuple[KeyField, ...]

    @classmethod
    def of(cls, declared: list[dict[str, str]]) -> PartitionKey:
        """From the stored declaration ``[{"name": …, "type": …}, …]``."""
        return cls(tuple(KeyField(item["name"], item["type"])  # type: ignore[arg-type]
                         for item in declared))

    @functools.cached_property
    def _by_name(self) -> dict[str, tuple[int, KeyField]]:
        return {item.name: (index, item) for index, item in enumerate(self.fields)}

    def field(self, name: str) -> KeyField | None:
        found = self._by_name.get(name)
        return found[1] if found else None

    def index(self, name: str) -> int:
        return self._by_name[name][0]

    @property
    def names(self) -> list[str]:
        return [item.name for item in self.fields]

    def check(self, value: Any, where: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
        """The typed key of a JSON object, and the problems found, each naming its
        field (``<where>.<field>``): a field missing, unknown or of the wrong type."""
        if not isinstance(value, dict):
            return {}, [{"field": where, "message": "expected an object with a value for "
                                                    f"each of {', '.join(self.names)}"}]
        typed: dict[str, Any] = {}
        problems = [] if value.keys() <= self._by_name.keys() else [
            {"field": f"{where}.{name}", "message": "unknown key field; the dataset's key "
             f"is ({', '.join(self.names)})"} for name in value if name not in self._by_name]
        for item in self.fields:
            if item.name not in value:
                problems.append({"field": f"{where}.{item.name}",
                                 "message": f"missing: the key needs a {item.type} here"})
                continue
            try:
                typed[item.name] = item.from_json(value[item.name])
            except KeyValueError as exc:
                problems.append({"field": f"{where}.{item.name}", "message": str(exc)})
        return typed, problems

    def columns(self, typed: dict[str, Any]) -> tuple[str, ...]:
        """The key columns' texts, ``MAX_FIELDS`` of them (unused ones empty)."""
        used = [item.encode(typed[item.name]) for item in self.fields]
        return tuple(used + [""] * (MAX_FIELDS - len(used)))

    def from_columns(self, columns: tuple[str, ...]) -> dict[str, Any]:
        """A stored key as JSON: ``{field: value}`` in declared order."""
        return {item.name: item.decode(text) for item, text in zip(self.fields, columns)}

    def describe(self, columns: tuple[str, ...]) -> str:
        """A key as people read it in messages: ``date=2026-11-01, shop=berlin``."""
        return ", ".join(f"{name}={value}"
                         for name, value in self.from_columns(columns).items())
