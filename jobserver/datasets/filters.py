"""Partition filters: one grammar for partition queries (``?where=``) and, later, a
consumer's ``filter`` setting.

A filter is a list of conditions, all of which must hold. A condition is text:

    FIELD OP VALUE          date >= 2026-11-01     hour < 12     shop != "new york"
    FIELD in (VALUE, …)     shop in (berlin, paris)
    meta.NAME = VALUE       meta.source = crawler
    meta.NAME in (VALUE, …)

``FIELD`` is a key field of the dataset and ``OP`` one of ``= != < <= > >=``; the
value is read as the field's type (``int`` compares numerically, ``date`` by day, and
so on). ``meta.NAME`` is a top-level metadata entry, compared for equality with its
text (a string as it is, a number as written, ``true``/``false``); an entry that is
missing or an object or array matches nothing. A value is bare (everything after the
operator, spaces at either end dropped) or double-quoted (``\\"`` and ``\\\\`` escape).

:meth:`Filter.parse` checks conditions against a dataset's key and refuses any that
names an undeclared field or a value of the wrong type, naming the condition
(``where[1]``). A parsed filter becomes SQL over the key columns (:meth:`Filter.sql`)
or is evaluated in Python (:meth:`Filter.matches`), with the same answers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, FromClause, String, literal
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from jobserver.datasets.keys import FIELD_NAME, KeyValueError, PartitionKey
from jobserver.spec import refuse

MAX_CONDITIONS = 16
MAX_VALUES = 1000
MAX_CONDITION_CHARS = 8192
OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in")
META = "meta."
_META_NAME = r"[A-Za-z0-9_-]{1,64}"
_CONDITION = re.compile(
    rf"\s*(?P<field>{re.escape(META)}{_META_NAME}|{FIELD_NAME})\s*"
    r"(?P<op><=|>=|!=|=|<|>|in(?=[\s(]))\s*(?P<rest>.*?)\s*", re.DOTALL)
_QUOTED = re.compile(r'"((?:[^"\\]|\\["\\])*)"')


@dataclass(frozen=True)
class Condition:
    """One parsed condition: a key field's index (None for metadata) or a metadata
    name, the operator, and the values as compared (key columns' texts, or metadata
    texts)."""

    field: str
    op: str
    values: tuple[str, ...]
    slot: int | None = None

    @property
    def meta_name(self) -> str:
        return self.field[len(META):]


class FilterSyntaxError(ValueError):
    """A condition that does not follow the grammar; the message says where."""


def split_condition(text: str) -> tuple[str, str, list[str]]:
    """``(field, op, value texts)`` of a condition, before any typing."""
    if len(text) > MAX_CONDITION_CHARS:
        raise FilterSyntaxError(f"longer than {MAX_CONDITION_CHARS} characters")
    match = _CONDITION.fullmatch(text)
    if match is None:
        raise FilterSyntaxError("expected 'FIELD OP VALUE' (OP one of = != < <= > >=), "
                                "'FIELD in (V1, V2)' or 'meta.NAME = VALUE'")
    field, op, rest = match["field"], match["op"], match["rest"]
    if op != "in":
        return field, op, [_value(rest)]
    if not (rest.startswith("(") and rest.endswith(")")):
        raise FilterSyntaxError("'in' takes a list in parentheses: in (a, b)")
    values = _list(rest[1:-1])
    if not 1 <= len(values) <= MAX_VALUES:
        raise FilterSyntaxError(f"'in' takes 1 to {MAX_VALUES} values")
    return field, op, values


def _value(text: str) -> str:
    text = text.strip()
    if text.startswith('"'):
        match = _QUOTED.fullmatch(text)
        if match is None:
            raise FilterSyntaxError(f"unterminated or malformed quoted value: {text}")
        return re.sub(r"\\([\"\\])", r"\1", match[1])
    if not text:
        raise FilterSyntaxError("a value is missing after the operator")
    if text[0] in "=<>!":
        raise FilterSyntaxError(f"{text!r}: a bare value cannot start with '{text[0]}' "
                                "(a mistyped operator?); quote it")
    return text


def _list(text: str) -> list[str]:
    """Comma-separated values; a quoted one may hold commas."""
    values, position = [], 0
    pattern = re.compile(r'\s*("(?:[^"\\]|\\["\\])*"|[^,"]*?)\s*(,|$)')
    while position <= len(text):
        match = pattern.match(text, position)
        if match is None or (not match[1] and not match[2] and position < len(text)):
            raise FilterSyntaxError(f"malformed list: ({text})")
        values.append(_value(match[1]))
        if not match[2]:
            break
        position = match.end()
    return values


class Filter:
    """Conditions checked against one dataset's key; all must hold."""

    def __init__(self, key: PartitionKey, conditions: list[Condition]) -> None:
        self.key = key
        self.conditions = conditions

    @classmethod
    def parse(cls, texts: list[str], key: PartitionKey, where: str = "where") -> Filter:
        """Parse ``texts``; :class:`InvalidRequest` names each bad one (``where[i]``)."""
        problems: list[dict[str, str]] = []
        if len(texts) > MAX_CONDITIONS:
            problems.append({"field": where, "message": f"at most {MAX_CONDITIONS} "
                                                        "conditions"})
        conditions = []
        for index, text in enumerate(texts[:MAX_CONDITIONS]):
            try:
                conditions.append(_bind(text, key))
            except (FilterSyntaxError, KeyValueError) as exc:
                problems.append({"field": f"{where}[{index}]", "message": str(exc)})
        refuse(problems)
        return cls(key, conditions)

    def matches(self, columns: tuple[str, ...], metadata: dict[str, Any]) -> bool:
        """Whether a partition (its key columns' texts and metadata) passes."""
        return all(_holds(condition, columns, metadata) for condition in self.conditions)

    def sql(self, table: FromClause) -> list[ColumnElement[bool]]:
        """The conditions as WHERE clauses over ``table``'s key and metadata columns
        (the partitions table, or a subquery of its rows)."""
        return [_clause(condition, table) for condition in self.conditions]


def _bind(text: str, key: PartitionKey) -> Condition:
    field, op, values = split_condition(text)
    if field.startswith(META):
        if op not in ("=", "in"):
            raise FilterSyntaxError(f"metadata compares with '=' or 'in' only, not '{op}'")
        if any("\x00" in value for value in values):
            raise FilterSyntaxError("a NUL character cannot be compared")
        return Condition(field, op, tuple(values))
    declared = key.field(field)
    if declared is None:
        raise KeyValueError(f"{field!r} is not a key field; the dataset's key is "
                            f"({', '.join(key.names)}), and metadata is meta.NAME")
    try:
        encoded = tuple(declared.encode(declared.from_text(value)) for value in values)
    except KeyValueError as exc:
        raise KeyValueError(f"{field} ({declared.type}): {exc}") from None
    return Condition(field, op, encoded, key.index(field))


_COMPARE = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def meta_text(value: Any) -> str | None:
    """A metadata value as a filter compares it; None for what matches nothing."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return None


def _holds(condition: Condition, columns: tuple[str, ...], metadata: dict[str, Any]) -> bool:
    if condition.slot is None:
        text = meta_text(metadata.get(condition.meta_name))
        return text is not None and text in condition.values
    column = columns[condition.slot]
    if condition.op == "in":
        return column in condition.values
    return bool(_COMPARE[condition.op](column, condition.values[0]))


def _clause(condition: Condition, table: FromClause) -> ColumnElement[bool]:
    if condition.slot is None:
        text = MetaText(table.c.meta, condition.meta_name)
        return text.in_(condition.values) if condition.op == "in" else \
            text == condition.values[0]
    column = table.c[f"k{condition.slot}"]
    if condition.op == "in":
        return column.in_(condition.values)
    clause: ColumnElement[bool] = _COMPARE[condition.op](column, condition.values[0])
    return clause


class MetaText(FunctionElement[str]):
    """A top-level metadata entry's text as :func:`meta_text` gives it (NULL for a
    missing entry, an object or an array), in SQL."""

    type = String()
    inherit_cache = True

    def __init__(self, column: Any, name: str) -> None:
        super().__init__(column, literal(name, String()), literal("$." + json.dumps(name)))


@compiles(MetaText, "postgresql")
def _meta_postgresql(element: MetaText, compiler: Any, **kw: Any) -> str:
    column, name, _path = (compiler.process(clause, **kw) for clause in element.clauses)
    return (f"(CASE json_typeof({column} -> {name}) WHEN 'object' THEN NULL "
            f"WHEN 'array' THEN NULL ELSE {column} ->> {name} END)")


@compiles(MetaText, "sqlite")
def _meta_sqlite(element: MetaText, compiler: Any, **kw: Any) -> str:
    column, _name, path = (compiler.process(clause, **kw) for clause in element.clauses)
    return (f"(CASE json_type({column}, {path}) WHEN 'true' THEN 'true' "
            f"WHEN 'false' THEN 'false' WHEN 'object' THEN NULL WHEN 'array' THEN NULL "
            f"ELSE CAST(json_extract({column}, {path}) AS TEXT) END)")
