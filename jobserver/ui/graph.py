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
#: The widest a box grows to fit its step's name; a longer name is cut with "…" (the
#: whole name is the box's tooltip).
MAX_BOX_WIDTH = 264
GAP_X, GAP_Y, MARGIN = 44, 16, 6
#: Room above the first row for edges that arc over the boxes between their ends.
TOP = 24
#: The text's left and right padding inside its box.
PAD = 10
#: Font sizes of the two lines (ui.css ``.dag .box .name`` and ``.detail``), in px.
NAME_PX, DETAIL_PX = 13, 11
#: Glyph widths in em, on the wide side of common sans-serif fonts in bold, so that an
#: estimated label is never narrower than the drawn one.
_NARROW, _WIDE, _UPPER_WIDE = set("iljtfrI.,:;|!'()[] "), set("mwMW@%"), set("MW")


@dataclass(frozen=True)
class Box:
    name: str
    label: str  # the name, shortened to fit
    state: str
    detail: str  # the second line: state, type, attempt, time (shortened to fit)
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
    box_width: float = BOX_WIDTH
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
    box_width = _box_width(steps)
    boxes = [Box(step.name, fit(step.name, box_width - 2 * PAD, NAME_PX), step.state.value,
                 fit(f"{step.state.value} · {_detail(step)}", box_width - 2 * PAD, DETAIL_PX),
                 MARGIN + column_of[step.name] * (box_width + GAP_X),
                 TOP + row_of[step.name] * (BOX_HEIGHT + GAP_Y)) for step in steps]
    where = {box.name: box for box in boxes}
    edges = [Edge(dep, step.name, _path(where[dep], where[step.name], box_width))
             for step in steps for dep in step.depends_on if dep in where]
    width = MARGIN * 2 + (max(columns, default=0) + 1) * (box_width + GAP_X) - GAP_X
    rows = max((len(members) for members in columns.values()), default=1)
    height = TOP + MARGIN + rows * (BOX_HEIGHT + GAP_Y) - GAP_Y
    return StepGraph(width, height, boxes, edges, box_width)


def text_width(text: str, px: float) -> float:
    """An upper estimate of ``text``'s drawn width at ``px`` (bold sans-serif)."""
    def em(char: str) -> float:
        if char in _NARROW:
            return 0.4
        if char in _UPPER_WIDE:
            return 1.0
        if char in _WIDE:
            return 0.95
        if char.isupper():
            return 0.78
        return 0.64 if char.isascii() else 1.0
    return sum(em(char) for char in text) * px


def fit(text: str, room: float, px: float) -> str:
    """``text``, or its longest head that fits ``room`` px followed by "…"."""
    if text_width(text, px) <= room:
        return text
    ellipsis = text_width("…", px)
    while text and text_width(text, px) + ellipsis > room:
        text = text[:-1]
    return text + "…"


def _box_width(steps: list[StepRecord]) -> float:
    """Wide enough for the longest name, between :data:`BOX_WIDTH` and
    :data:`MAX_BOX_WIDTH`: one width for every box keeps the columns aligned."""
    widest = max((text_width(step.name, NAME_PX) for step in steps), default=0.0)
    return float(min(MAX_BOX_WIDTH, max(BOX_WIDTH, round(widest + 2 * PAD + 0.5))))


def _mean(values: list[float], fallback: float) -> float:
    return sum(values) / len(values) if values else fallback


def _detail(step: StepRecord) -> str:
    parts = [step.type]
    if step.attempt > 1:
        parts.append(f"attempt {step.attempt}")
    if step.wall_seconds is not None:
        parts.append(f"{step.wall_seconds:.1f} s")
    return " · ".join(parts)


def _path(source: Box, target: Box, box_width: float) -> str:
    """A horizontal S-curve; between neighbours of one row a straight line, and over
    the boxes between them an arc."""
    x1, y1 = source.x + box_width, source.y + BOX_HEIGHT / 2
    x2, y2 = target.x, target.y + BOX_HEIGHT / 2
    if y1 == y2:
        if x2 - x1 <= GAP_X:
            return f"M{x1:g},{y1:g} L{x2:g},{y2:g}"
        lift = y1 - BOX_HEIGHT
        return f"M{x1:g},{y1:g} C{x1 + GAP_X:g},{lift:g} {x2 - GAP_X:g},{lift:g} {x2:g},{y2:g}"
    bend = max(GAP_X / 2, (x2 - x1) / 2)
    return f"M{x1:g},{y1:g} C{x1 + bend:g},{y1:g} {x2 - bend:g},{y2:g} {x2:g},{y2:g}"
