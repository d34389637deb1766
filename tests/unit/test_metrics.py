"""Node metrics that a dashboard reads before anything has happened."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from jobserver.metrics import NodeMetrics


def test_labelled_counters_read_zero_before_their_first_event() -> None:
    registry = CollectorRegistry()
    metrics = NodeMetrics(registry)
    assert registry.get_sample_value("jobserver_listener_restarts_total",
                                     {"listener": "audit"}) is None

    metrics.start_at_zero(["noop", "shell"], ["audit"])

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    for state in ("SUCCEED", "ERROR", "STOPPED", "DISCARDED"):
        assert sample("jobserver_jobs_finished_total", state=state) == 0, state
    assert sample("jobserver_jobs_finished_total", state="READY") is None  # not an end
    assert sample("jobserver_step_retries_total", type="shell") == 0
    assert sample("jobserver_listener_restarts_total", listener="audit") == 0
    for reason in ("queue_full", "failed", "disabled"):
        assert sample("jobserver_listener_events_dropped_total", listener="audit",
                      reason=reason) == 0, reason


def test_a_planners_own_metrics_start_at_zero_and_reach_its_loops() -> None:
    registry = CollectorRegistry()
    metrics = NodeMetrics(registry)
    metrics.start_at_zero([], [])

    for reason in ("catchup_latest", "catchup_window", "catchup_none"):
        assert registry.get_sample_value("jobserver_schedule_fire_times_skipped_total",
                                         {"reason": reason}) == 0, reason
    for reason in ("concurrency", "timeout", "template"):
        assert registry.get_sample_value("jobserver_schedule_jobs_aborted_total",
                                         {"reason": reason}) == 0, reason
    metrics.planner("schedules").fired.inc()
    assert registry.get_sample_value("jobserver_schedule_firings_total") == 1
    assert metrics.planner("batches") is None  # a planner without node metrics
