"""Small SVG charts, laid out here and drawn by the templates (no chart library).

The layout is plain numbers (rectangles in the chart's own coordinates), so a
template only writes them out and the browser scales the ``viewBox`` to its width.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobserver.store.browse import THROUGHPUT_STATES, Throughput

WIDTH, HEIGHT = 600, 140
#: Room under the bars for the time axis labels.
AXIS = 18
#: What each finished state is called in a bar's tooltip.
VERBS = {"SUCCEED": "succeeded", "ERROR": "failed", "DISCARDED": "discarded"}


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    state: str


@dataclass(frozen=True)
class Column:
    """One minute: its stacked bars, and what its tooltip says."""

    x: float
    width: float
    bars: list[Bar]
    title: str


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    plot_height: int
    peak: int  # the tallest minute's count: the top of the scale
    total: int
    columns: list[Column]
    ticks: list[tuple[float, str]]  # x and label of the time axis


def throughput_chart(throughput: Throughput) -> BarChart:
    """Stacked bars, one per minute, oldest on the left."""
    minutes = throughput.minutes
    plot = HEIGHT - AXIS
    totals = [sum(throughput.per_minute[s.value][i] for s in THROUGHPUT_STATES)
              for i in range(minutes)]
    peak = max(totals, default=0)
    slot = WIDTH / minutes
    columns = []
    for index in range(minutes):
        x, base = index * slot, float(plot)
        bars, parts = [], []
        for state in THROUGHPUT_STATES:
            count = throughput.per_minute[state.value][index]
            if not count:
                continue
            height = plot * count / peak
            base -= height
            bars.append(Bar(round(x + 1, 2), round(base, 2), round(slot - 2, 2),
                            round(height, 2), state.value))
            parts.append(f"{count} {VERBS[state.value]}")
        ago = minutes - index - 1
        when = "this minute" if ago == 0 else f"{ago} min ago"
        columns.append(Column(round(x, 2), round(slot, 2), bars,
                              f"{when}: {', '.join(parts) or 'none finished'}"))
    ticks = [(round(WIDTH * (minutes - ago) / minutes, 2), f"-{ago} min" if ago else "now")
             for ago in range(minutes, -1, -max(1, minutes // 4))]
    return BarChart(WIDTH, HEIGHT, plot, peak, throughput.total, columns, ticks)
