"""A job's step graph laid out for SVG: boxes in columns by depth, edges from
``depends_on``.

A step's column is one more than the deepest step it depends on, so a chain (steps
without ``depends_on`` run in list order, each depending on the one before it) is
one row: a line. Within a column, steps sit in the mean order of the steps they
depend on (one barycentre pass), which keeps most edges short and uncrossed.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobserver.store.records import StepRecord

BOX_WIDTH, BOX_HEIGHT = 156, 46
GAP_X, GAP_Y, MARGIN = 44, 16, 6
#: Room above the first row for edges that arc over the boxes between their ends.
TOP = 24
#: Characters of a step's name shown in its box (the whole name is its tooltip).
NAME_CHARS = 19


@dataclass(frozen=True)
class Box:
    name: str
    label: str  # the name, shortened to fit
    state: str
    detail: str  # the second line: attempt, time
    x: float
    y: float


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str  # an SVG path from the source's right side to the target's left


@dataclass(frozen=True)
class StepGraph:
    width: float
    height: float
    boxes: list[Box]
    edges: list[Edge]
    box_width: int = BOX_WIDTH
    box_height: int = BOX_HEIGHT


def depths(steps: list[StepRecord]) -> dict[str, int]:
    """Each step's column: 0 without dependencies, else one more than its deepest
    dependency (names a step does not have are ignored; the graph has no cycles, as
    the submit checked, but a cycle would only stop the walk, not loop it)."""
    by_name = {step.name: step for step in steps}
    found: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name not in found:
            parents = [d for d in by_name[name].depends_on if d in by_name and d not in seen]
            found[name] = 1 + max((depth(p, seen | {name}) for p in parents), default=-1)
        return found[name]

    for step in steps:
        depth(step.name, frozenset())
    return found


def layout(steps: list[StepRecord]) -> StepGraph:
    """Where each step's box and each dependency's edge go."""
    column_of = depths(steps)
    columns: dict[int, list[StepRecord]] = {}
    for step in steps:
        columns.setdefault(column_of[step.name], []).append(step)
    row_of: dict[str, float] = {}
    for column in sorted(columns):
        members = columns[column]
        if column:
            members.sort(key=lambda s: _mean([row_of[d] for d in s.depends_on if d in row_of],
                                             s.position))
        for row, step in enumerate(members):
            row_of[step.name] = row
    boxes = [Box(step.name, _short(step.name), step.state.value, _detail(step),
                 MARGIN + column_of[step.name] * (BOX_WIDTH + GAP_X),
                 TOP + row_of[step.name] * (BOX_HEIGHT + GAP_Y)) for step in steps]
    where = {box.name: box for box in boxes}
    edges = [Edge(dep, step.name, _path(where[dep], where[step.name]))
             for step in steps for dep in step.depends_on if dep in where]
    width = MARGIN * 2 + (max(columns, default=0) + 1) * (BOX_WIDTH + GAP_X) - GAP_X
    rows = max((len(members) for members in columns.values()), default=1)
    height = TOP + MARGIN + rows * (BOX_HEIGHT + GAP_Y) - GAP_Y
    return StepGraph(width, height, boxes, edges)


def _mean(values: list[float], fallback: float) -> float:
    return sum(values) / len(values) if values else fallback


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def _detail(step: StepRecord) -> str:
    parts = [step.type]
    if step.attempt > 1:
        parts.append(f"attempt {step.attempt}")
    if step.wall_seconds is not None:
        parts.append(f"{step.wall_seconds:.1f} s")
    return " · ".join(parts)


def _path(source: Box, target: Box) -> str:
    """A horizontal S-curve; between neighbours of one row a straight line, and over
    the boxes between them an arc."""
    x1, y1 = source.x + BOX_WIDTH, source.y + BOX_HEIGHT / 2
    x2, y2 = target.x, target.y + BOX_HEIGHT / 2
    if y1 == y2:
        if x2 - x1 <= GAP_X:
            return f"M{x1:g},{y1:g} L{x2:g},{y2:g}"
        lift = y1 - BOX_HEIGHT
        return f"M{x1:g},{y1:g} C{x1 + GAP_X:g},{lift:g} {x2 - GAP_X:g},{lift:g} {x2:g},{y2:g}"
    bend = max(GAP_X / 2, (x2 - x1) / 2)
    return f"M{x1:g},{y1:g} C{x1 + bend:g},{y1:g} {x2 - bend:g},{y2:g} {x2:g},{y2:g}"
