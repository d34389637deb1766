"""What the views page shows: a status grid of the view partitions a pattern
addresses, and the plans of ``materialize`` and ``invalidate`` shown before they run.

Rows are a view with the values of its parameters other than the date (a shop);
columns the date its ``year``/``month``/``day`` parameters spell (``2015-05-03``,
``2015-05``), or its last parameter's value when it has no date. Each cell is the
partition's state, its last transformation time and what a DEFAULT ``materialize``
of the pattern would do with it now and why: the planner's ``--plan`` decision.

Bounded work: a pattern addressing more than ``MAX_CELLS`` partitions is refused by
the pattern parser itself, before any is built (the page says so); the grid reads
the stored partitions of the addressed ones (one statement per view) and plans them
as ``--plan`` does (the dependencies' rows too, one statement per view). Nothing here
reads the jobs table.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from jobserver.exceptions import InvalidRequest
from jobserver.requester import Requester
from jobserver.store import Store
from jobserver.views.lattice import instantiate
from jobserver.views.materialize import Materializer, Outcome
from jobserver.views.mappings import DAY_PARAMS
from jobserver.views.model import Action, Decision, Mode, ViewAddress, ViewState
from jobserver.views.patterns import parse_pattern
from jobserver.views.repos import view_repository

#: Partitions a grid shows at most; a wider pattern is refused with the parser's message.
MAX_CELLS = 1000
#: Partitions an invalidation from the dashboard addresses at most.
MAX_INVALIDATED = 10_000
#: Partitions an invalidation preview lists (all are counted).
LISTED = 100


@dataclass(frozen=True)
class Cell:
    address: ViewAddress
    state: ViewState
    transformed_at: datetime | None
    job_id: int | None
    action: Action | None = None
    reason: str | None = None


@dataclass
class GridRow:
    view: str
    label: str
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class ViewGrid:
    pattern: str
    columns: list[str] = field(default_factory=list)
    rows: list[GridRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    problem: str | None = None

    @property
    def cells(self) -> list[Cell]:
        """Every cell, row by row."""
        return [cell for row in self.rows for cell in row.cells.values()]


def place(address: ViewAddress, parameters: list[str]) -> tuple[str, str]:
    """(row label, column) of a partition: the date its year/month/day parameters
    spell is its column, the other values its row; without a date, the last value."""
    values = dict(zip(parameters, address.values))
    dated = [name for name in DAY_PARAMS if name in values]
    if dated[:2] == ["year", "month"]:
        column = "-".join(str(values[name]) for name in dated)
        rest = [str(values[name]) for name in parameters if name not in dated]
    elif address.values:
        column = str(address.values[-1])
        rest = [str(value) for value in address.values[:-1]]
    else:
        column, rest = "", []
    return "/".join(rest), column


def _addresses(pattern: str, limit: int) -> list[ViewAddress]:
    if not pattern.strip():
        raise InvalidRequest("pattern: give a pattern, e.g. app.eci.stage/Search/SHOP10/"
                             "rymd(20150501-20150531)", [{"field": "pattern",
                                                          "message": "required"}])
    return parse_pattern(pattern, limit=limit)


def view_grid(materializer: Materializer, store: Store, pattern: str) -> ViewGrid:
    """The grid of ``pattern``; a pattern refused (malformed, too wide, an unknown
    view) is a grid with the refusal's message as its ``problem``."""
    grid = ViewGrid(pattern)
    try:
        addresses = _addresses(pattern, MAX_CELLS)
        decided = {d.address: d for d in materializer.run(addresses, Mode.DEFAULT,
                                                          plan_only=True).decisions}
    except InvalidRequest as exc:
        grid.problem = exc.message
        return grid
    stored = view_repository(store).read(addresses)
    views = materializer.definitions()
    rows: dict[tuple[str, str], GridRow] = {}
    columns: set[str] = set()
    for address in addresses:
        label, column = place(address, views[address.name].parameter_names)
        row = rows.setdefault((address.name, label), GridRow(address.name, label))
        found, decision = stored.get(address), decided.get(address)
        row.cells[column] = Cell(
            address, found.state if found else ViewState.RECEIVE,
            found.transformed_at if found else None, found.job_id if found else None,
            decision.action if decision else None, decision.reason if decision else None)
        columns.add(column)
    grid.rows = list(rows.values())
    grid.columns = sorted(columns)
    grid.counts = dict(Counter(cell.state.value for cell in grid.cells))
    return grid


# -- materialize and invalidate, shown before they run -------------------------------
@dataclass(frozen=True)
class Plan:
    """A ``materialize`` plan as shown; ``digest`` names it, so that a confirmation
    runs only the plan that was shown."""

    pattern: str
    mode: Mode
    decisions: list[Decision]

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(decision.action.value for decision in self.decisions))

    @property
    def digest(self) -> str:
        lines = "\n".join(f"{d.address.path} {d.action.value}" for d in self.decisions)
        return hashlib.sha256(f"{self.mode.value}\n{lines}".encode()).hexdigest()[:32]


def plan_of(materializer: Materializer, pattern: str, mode: Mode) -> Plan:
    """What ``materialize`` would do (:class:`InvalidRequest` for a refused pattern)."""
    addresses = _addresses(pattern, MAX_CELLS)
    return Plan(pattern, mode, materializer.run(addresses, mode, plan_only=True).decisions)


def materialize(materializer: Materializer, pattern: str, mode: Mode, digest: str,
                requester: Requester) -> tuple[Plan, Outcome | None]:
    """Run the plan named ``digest``: (the plan, what ran) when it is still the plan
    now, else (the new plan, None) to be shown and confirmed again. Between this
    check and the write, the materializer's compare-and-set keeps two requests from
    transforming a partition twice, as for any request."""
    current = plan_of(materializer, pattern, mode)
    if current.digest != digest:
        return current, None
    return current, materializer.run(_addresses(pattern, MAX_CELLS), mode,
                                     requester=requester)


@dataclass(frozen=True)
class Invalidation:
    """What ``invalidate`` would change: stored partitions neither in RECEIVE already
    nor being transformed (their jobs carry on)."""

    pattern: str
    addressed: int
    changing: list[ViewAddress]


def invalidation_of(materializer: Materializer, store: Store, pattern: str) -> Invalidation:
    addresses = _checked(materializer, pattern)
    stored = view_repository(store).read(addresses)
    changing = [address for address in addresses if (row := stored.get(address)) is not None
                and not row.state.in_flight and row.state is not ViewState.RECEIVE]
    return Invalidation(pattern, len(addresses), changing)


def invalidate(materializer: Materializer, store: Store, pattern: str) -> int:
    """Invalidate what ``pattern`` addresses; how many partitions changed."""
    return view_repository(store).invalidate(_checked(materializer, pattern))


def _checked(materializer: Materializer, pattern: str) -> list[ViewAddress]:
    """The partitions ``pattern`` addresses, each checked against its view (an
    unknown view, values that do not fit: :class:`InvalidRequest`)."""
    addresses = _addresses(pattern, MAX_INVALIDATED)
    return instantiate(materializer.definitions(), addresses, recursive=False).order
