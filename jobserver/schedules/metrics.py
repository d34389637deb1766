"""The schedule evaluator's metrics, built once per node through the planner seam
(:meth:`jobserver.planners.base.Planner.node_metrics`) and handed to the evaluator as
``node.metrics.planner("schedules")``.

Only the node that evaluates moves them; the others show them at 0. Label values are
bounded by the reasons below, every one created at 0 when the node starts.
"""

from __future__ import annotations

from typing import Any

#: Why a due fire time did not fire (``jobserver_schedule_fire_times_skipped_total``).
SKIP_REASONS = ("catchup_latest", "catchup_window", "catchup_none")
#: Why the evaluator aborted a schedule-job: a constraint in abort mode, the timeout, or
#: a template the node refuses at launch (the API's aborts, on disable, update and
#: delete, are in the evaluation records).
ABORT_REASONS = ("concurrency", "since_last_run", "time_window", "delay", "timeout",
                 "template")
LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class ScheduleMetrics:
    """The schedule evaluator's figures; only the node that evaluates moves them."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.fired = Counter("jobserver_schedule_firings_total",
                             "Schedule triggers satisfied (schedule-jobs past their trigger)",
                             registry=registry)
        self.launched = Counter("jobserver_schedule_launches_total",
                                "Jobs launched by schedules", registry=registry)
        self.skipped = Counter("jobserver_schedule_fire_times_skipped_total",
                               "Due fire times not fired, by catch-up reason", ("reason",),
                               registry=registry)
        self.aborted = Counter("jobserver_schedule_jobs_aborted_total",
                               "Schedule-jobs the evaluator aborted, by reason", ("reason",),
                               registry=registry)
        self.rounds = Counter("jobserver_schedule_evaluation_rounds_total",
                              "Evaluation rounds of this node's schedule evaluator",
                              registry=registry)
        self.pending = Gauge("jobserver_schedule_jobs_pending",
                             "Schedule-jobs pending their trigger or constraints",
                             registry=registry, multiprocess_mode="livemax")
        self.lag = Histogram("jobserver_schedule_launch_lag_seconds",
                             "Fire time (or trigger time) to launch; 0 for a job launched "
                             "ahead of its fire time", buckets=LAG_BUCKETS,
                             registry=registry)

    def start_at_zero(self) -> None:
        """Create the skip and abort counters' children at 0, so that a dashboard
        reads 0, not "No data", before the first skip or abort."""
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        for reason in ABORT_REASONS:
            self.aborted.labels(reason)
