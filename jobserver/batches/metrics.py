"""The batches' cluster-wide figures, read from the store at every scrape of
``GET /metrics`` through the planner seam
(:meth:`jobserver.planners.base.Planner.collect`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from jobserver.batches.repos import batch_store

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from jobserver.store import Store


def batch_metrics(store: Store) -> Iterator[Metric]:
    """Per system and location: the newest business date whose batch is SUCCESS
    (as a Unix time, midnight UTC) and the batches after it not SUCCESS yet."""
    from prometheus_client.core import GaugeMetricFamily

    labels = ("system", "location")
    newest = GaugeMetricFamily("jobserver_batch_newest_success_date",
                               "Newest business date whose batch is SUCCESS, as a Unix "
                               "time (midnight UTC); absent before the first",
                               labels=labels)
    lag = GaugeMetricFamily("jobserver_batch_lag_periods",
                            "Batches (business dates) after the newest SUCCESS one that "
                            "are not SUCCESS yet", labels=labels)
    for system, location, best, behind in batch_store(store).progress():
        if best is not None:
            midnight = datetime(best.year, best.month, best.day, tzinfo=timezone.utc)
            newest.add_metric((system, location), midnight.timestamp())
        lag.add_metric((system, location), behind)
    yield newest
    yield lag
