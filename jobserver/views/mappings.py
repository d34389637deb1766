"""Dependency parameter mappings: which partitions of another view one partition reads.

A dependency names another view and says, declaratively, where each of that view's
parameters takes its value from. In YAML::

    dependencies:
      - view: app.eci.stage/Search
        map: {shop: $shop}            # the same parameter ($name: one of this view's)
        days: {last: 7}               # year/month/day: the 7 days up to this day
      - view: app.eci.stage/Shops
        map: {env: prod}              # a fixed value
      - view: app.eci.stage/Clicks
        map: {shop: [SHOP10, SHOP11], year: $year, month: $month}   # a list: fan-out
        days: {every: month, into: [year, month, day]}  # every day of this month

``map`` gives each dependency parameter one of:

* ``$name`` — this view's parameter ``name`` (types must agree);
* any other string — that fixed value (``$$x`` is the fixed value ``$x``); ``null``
  is Schedoscope's ``null()``;
* a list of the above — one dependency partition per item (the cross product when
  several parameters are lists).

``days`` spreads a date over three parameters of the dependency (``into``, default
``[year, month, day]``), zero-padded (``2015``, ``05``, ``03``):

* ``{last: N}`` — the N days ending with this partition's day (``last: 1`` = the day
  itself), read from this view's parameters ``of`` (default ``[year, month, day]``);
* ``{every: month}`` — every day of this partition's month, read from ``of`` (default
  ``[year, month]``).

Every parameter of the dependency is given exactly once, by ``map`` or by
``days.into``: nothing is implied, so a renamed parameter is an error at save time, not a
silent wrong lattice. :class:`CompiledDependency` turns one such declaration into a
function from a partition's values to its dependency partitions' values.
"""

from __future__ import annotations

import calendar
import itertools
import math
from collections.abc import Sequence
from datetime import date
from typing import Annotated, Literal

from pydantic import Field, PlainValidator, StringConstraints, WithJsonSchema, model_validator

from jobserver.spec import StrictModel

#: ``package/View``: a dotted package and an identifier, none of the pattern syntax's
#: special characters, so that an address's path needs no quoting in the view segment.
VIEW_NAME = (r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,15}"
             r"/[A-Za-z_][A-Za-z0-9_]{0,99}$")
ViewName = Annotated[str, StringConstraints(pattern=VIEW_NAME, max_length=200)]
ParamName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
MAX_ITEMS = 1000
_ITEM_SCHEMA = {"type": ["string", "null"], "maxLength": 1000}


def _map_item(item: object) -> str | None:
    if item is None:
        return None
    if not isinstance(item, str):
        raise ValueError(f"expected $parameter, a fixed string (quote numbers) or null, "
                         f"not {type(item).__name__}")
    if len(item) > 1000 or "\x00" in item:
        raise ValueError("a value holds at most 1000 characters, no NUL")
    return item


def _map_value(value: object) -> str | None | list[str | None]:
    """One validator for the three forms, so that an error names the map's key only."""
    if isinstance(value, list):
        if not 1 <= len(value) <= MAX_ITEMS:
            raise ValueError(f"a list holds 1 to {MAX_ITEMS} values")
        return [_map_item(item) for item in value]
    return _map_item(value)


MapValue = Annotated[
    str | None | list[str | None], PlainValidator(_map_value),
    WithJsonSchema({"anyOf": [_ITEM_SCHEMA, {"type": "array", "items": _ITEM_SCHEMA,
                                             "minItems": 1, "maxItems": MAX_ITEMS}]})]

DAY_PARAMS = ("year", "month", "day")


class DaysSpec(StrictModel):
    """A date fan-out: ``{last: N}`` or ``{every: month}`` (see the module)."""

    last: int | None = Field(default=None, ge=1, le=366)
    every: Literal["month"] | None = None
    of: list[ParamName] | None = Field(default=None, min_length=2, max_length=3)
    into: list[ParamName] = Field(default_factory=lambda: list(DAY_PARAMS), min_length=3,
                                  max_length=3)

    @model_validator(mode="after")
    def _one_span(self) -> DaysSpec:
        if (self.last is None) == (self.every is None):
            raise ValueError("give exactly one of last (a number of days) or every: month")
        if self.of is not None and len(self.of) != len(self.source()):
            raise ValueError(f"'of' names {len(self.source())} parameters here "
                             f"({', '.join(self.source())}), not {len(self.of)}")
        return self

    def source(self) -> list[str]:
        """This view's parameters holding the date: year, month (and day for ``last``)."""
        if self.of is not None:
            return list(self.of)
        return list(DAY_PARAMS) if self.last is not None else list(DAY_PARAMS[:2])


class DependencySpec(StrictModel):
    """One dependency: another view and where each of its parameters comes from."""

    view: ViewName
    map: dict[ParamName, MapValue] = Field(default_factory=dict, max_length=16)
    days: DaysSpec | None = None


def reference(item: str | None) -> str | None:
    """The parameter a map item names (``$shop`` -> ``shop``), or None for a fixed value."""
    if item is not None and item.startswith("$") and not item.startswith("$$"):
        return item[1:]
    return None


def fixed(item: str | None) -> str | None:
    """A fixed map item's value: ``$$x`` is written for ``$x``."""
    return item[1:] if item is not None and item.startswith("$$") else item


#: Days as zero-padded (year, month, day) value triples, in order.
Days = tuple[tuple[str, str, str], ...]


class Calendar:
    """Day windows and months as zero-padded value triples, computed once per day:
    many views read the same windows, so a lattice of 100,000 partitions asks for the
    same few thousand days again and again."""

    def __init__(self) -> None:
        self._windows: dict[tuple[tuple[str | None, ...], int], Days] = {}
        self._months: dict[tuple[str | None, ...], Days] = {}

    def window(self, ymd: tuple[str | None, ...], last: int) -> Days:
        found = self._windows.get((ymd, last))
        if found is None:
            end = _date(ymd).toordinal()
            found = tuple(_triple(date.fromordinal(end - back)) for back in range(last - 1, -1, -1))
            self._windows[(ymd, last)] = found
        return found

    def month(self, ym: tuple[str | None, ...]) -> Days:
        found = self._months.get(ym)
        if found is None:
            first = _date(ym + ("1",))
            days = calendar.monthrange(first.year, first.month)[1]
            found = tuple(_triple(first.replace(day=d)) for d in range(1, days + 1))
            self._months[ym] = found
        return found


def _date(values: tuple[str | None, ...]) -> date:
    try:
        year, month, day = (int(v) for v in values)  # type: ignore[arg-type]
        return date(year, month, day)
    except (TypeError, ValueError):
        raise ValueError(f"{'/'.join(str(v) for v in values)!s} is not a date") from None


def _triple(day: date) -> tuple[str, str, str]:
    return f"{day.year:04d}", f"{day.month:02d}", f"{day.day:02d}"


#: Where one dependency parameter's value comes from: this view's value at an index
#: (``(i, None)``), or a fixed value (``(-1, value)``).
Pick = tuple[int, str | None]


class CompiledDependency:
    """One validated :class:`DependencySpec` of a view, ready to map values fast.

    ``targets(values)`` returns the dependency partitions' values (in the dependency's
    parameter order) for a partition of the owning view, in a list the caller only
    reads (it may be shared between partitions). It raises ``ValueError`` for
    values that are not a date where ``days`` reads one.
    """

    __slots__ = ("view", "_positions", "_single", "_constant", "_fixed", "_days", "unique",
                 "_calendar", "fan_out")

    def __init__(self, spec: DependencySpec, own: Sequence[str], target: Sequence[str],
                 calendar_: Calendar) -> None:
        self.view = spec.view
        index = {name: i for i, name in enumerate(own)}
        into = list(spec.days.into) if spec.days else []
        # Per dependency parameter, its choices (one, or a list's items); the day
        # parameters hold a placeholder the date fan-out overwrites.
        self._positions: list[tuple[Pick, ...]] = []
        for name in target:
            value = None if name in into else spec.map[name]
            items = value if isinstance(value, list) else [value]
            self._positions.append(tuple(_pick(item, index) for item in items))
        self._single = all(len(p) == 1 for p in self._positions)
        #: Whether targets never repeat a partition: one value each (the days of a
        #: window or a month are distinct); a list may name a value twice.
        self.unique = self._single
        self._days: tuple[int | None, list[int], list[int]] | None = None
        if spec.days is not None:
            self._days = (spec.days.last, [index[name] for name in spec.days.source()],
                          [list(target).index(name) for name in into])
        self._calendar = calendar_
        #: The most partitions ``targets`` gives for one partition (a month counted as
        #: 31 days): what a caller checks against its budget before asking.
        self.fan_out = math.prod(len(picks) for picks in self._positions) * (
            1 if spec.days is None else spec.days.last or 31)
        # Combos that take no value of the partition (fixed values and day placeholders
        # only, as a window of a daily view) are the same for every partition: made
        # once, on first use (after the caller's check of fan_out), and only read after.
        self._fixed = all(i < 0 for picks in self._positions for i, _ in picks)
        self._constant: list[tuple[str | None, ...]] | None = None

    def targets(self, values: tuple[str | None, ...]) -> list[tuple[str | None, ...]]:
        if self._fixed:
            if self._constant is None:
                self._constant = self._combos(())
            combos = self._constant
        else:
            combos = self._combos(values)
        return combos if self._days is None else self._spread(values, combos)

    def _combos(self, values: tuple[str | None, ...]) -> list[tuple[str | None, ...]]:
        if self._single:
            return [tuple(values[i] if i >= 0 else c for ((i, c),) in self._positions)]
        choices = [tuple(values[i] if i >= 0 else c for i, c in picks)
                   for picks in self._positions]
        return list(itertools.product(*choices))

    def _spread(self, values: tuple[str | None, ...],
                combos: list[tuple[str | None, ...]]) -> list[tuple[str | None, ...]]:
        assert self._days is not None
        last, source, (y, m, d) = self._days
        date_values = tuple(map(values.__getitem__, source))
        days = (self._calendar.window(date_values, last) if last is not None
                else self._calendar.month(date_values))
        if combos == _DAYS_ONLY and (y, m, d) == (0, 1, 2):  # the values are the days
            return list(days)
        if m == y + 1 and d == y + 2:  # year, month, day side by side: splice tuples
            return [combo[:y] + triple + combo[y + 3:] for combo in combos for triple in days]
        found: list[tuple[str | None, ...]] = []
        for combo in combos:
            row = list(combo)
            for triple in days:
                row[y], row[m], row[d] = triple
                found.append(tuple(row))
        return found


#: The one combo of a dependency whose parameters are year, month and day only.
_DAYS_ONLY = [(None, None, None)]


def _pick(item: str | None, index: dict[str, int]) -> Pick:
    ref = reference(item)
    return (index[ref], None) if ref is not None else (-1, fixed(item))
