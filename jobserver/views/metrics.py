"""The view partitions' cluster-wide figure, read from the store at every scrape of
``GET /metrics`` through the planner seam
(:meth:`jobserver.planners.base.Planner.collect`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from jobserver.views.repos import view_repository

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from jobserver.store import Store


def view_metrics(store: Store) -> Iterator[Metric]:
    """View partitions per scheduling state (every state, 0 included)."""
    from prometheus_client.core import GaugeMetricFamily

    from jobserver.views.model import ViewState

    gauge = GaugeMetricFamily("jobserver_view_partitions",
                              "View partitions in the store by scheduling state",
                              labels=("state",))
    counts = view_repository(store).counts_by_state()
    for state in ViewState:
        gauge.add_metric((state.value,), counts.get(state.value, 0))
    yield gauge
