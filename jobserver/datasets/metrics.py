"""The consumers' cluster-wide figures, read from the store at every scrape of
``GET /metrics`` through the planner seam
(:meth:`jobserver.planners.base.Planner.collect`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from jobserver.datasets.repos import consumer_catalog

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from jobserver.store import Store


def consumer_metrics(store: Store) -> Iterator[Metric]:
    """Cluster-wide consumer figures, one series per dataset and consumer.

    Bounded per scrape: each lag reads at most ``consumers.LAG_CAP`` + 1 partitions
    after its consumer's pointer, whatever its filter matches (a ``meta.`` filter is
    evaluated row by row), and a dataset has at most ``datasets.max_consumers``; a
    lag past the cap is a lower bound, flagged by ``jobserver_consumer_lag_capped``.
    """
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from jobserver.datasets.consumers import LAG_CAP

    labels = ("dataset", "consumer")
    lag = GaugeMetricFamily("jobserver_consumer_lag", "Partitions not consumed yet: "
                            "NEW and IN_PROGRESS plus matching ones among the next "
                            f"{LAG_CAP:,} after the pointer", labels=labels)
    capped = GaugeMetricFamily("jobserver_consumer_lag_capped",
                               "1 if more partitions lie after the consumer's pointer "
                               "than its lag reads: the lag is a lower bound",
                               labels=labels)
    processed = CounterMetricFamily("jobserver_consumer_partitions_processed",
                                    "Partitions consumed by jobs that succeeded",
                                    labels=labels)
    failed = CounterMetricFamily("jobserver_consumer_partitions_failed",
                                 "Partitions that became FAILED after max_retries",
                                 labels=labels)
    for view in consumer_catalog(store).all(lag_cap=LAG_CAP):
        series = (view.dataset.full_name, view.spec.name)
        lag.add_metric(series, view.lag)
        capped.add_metric(series, float(view.lag_capped))
        processed.add_metric(series, view.processed_total)
        failed.add_metric(series, view.failed_total)
    yield lag
    yield capped
    yield processed
    yield failed
