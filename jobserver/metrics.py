"""Prometheus metrics of a node and of its API workers.

``jobserver serve`` runs prometheus-client in multiprocess mode: the node process and
every gunicorn worker write their values to files under one directory per node
(``PROMETHEUS_MULTIPROC_DIR``, cleaned at start; dead workers are marked by gunicorn's
``child_exit`` hook), and ``GET /metrics`` in any worker aggregates them all, plus the
cluster-wide figures read from the store at scrape time (jobs by state, heartbeat ages).
A planner adds its own through the planner seam (:meth:`Planner.node_metrics
<jobserver.planners.base.Planner.node_metrics>` for a node's,
:meth:`~jobserver.planners.base.Planner.collect` for the store's); this module names
none.

Nothing is created at import time: each process builds its metric objects once, and
the library is imported when they are built, after the multiprocess directory is set.
Label values stay bounded: job names beyond :data:`MAX_JOB_NAMES` become ``other``.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobserver.events import NodeEvent, StateChange
from jobserver.states import State

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MAX_JOB_NAMES = 100
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                   30, 60)
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400)
#: The states a job leaves RUNNING for, other than READY (a re-queue is not an end).
FINISHED_STATES = (State.SUCCEED, State.ERROR, State.STOPPED, State.DISCARDED)
#: Why a scheduling listener missed an event (``jobserver_listener_events_dropped_total``).
LISTENER_DROP_REASONS = ("queue_full", "failed", "disabled")


def prepare_multiprocess_dir(data_dir: Path, node_id: str) -> Path:
    """Empty this node's metrics directory and point prometheus-client at it.

    Must run before prometheus-client is imported in this process and before the API
    workers start (they inherit the environment).
    """
    directory = (data_dir / "metrics" / node_id.replace(":", "_").replace("/", "_")).resolve()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    return directory


def multiprocess() -> bool:
    return MULTIPROC_ENV in os.environ


class BoundedNames:
    """The first ``limit`` distinct names pass; later new ones read ``other``."""

    def __init__(self, limit: int = MAX_JOB_NAMES) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        with self._lock:
            if name in self._seen:
                return name
            if len(self._seen) < self._limit:
                self._seen.add(name)
                return name
        return "other"


class NodeMetrics:
    """What a node's scheduler and runner report; subscribe :meth:`on_event` to the bus."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Any:
            return Counter(name, text, labels, registry=registry)

        self.names = BoundedNames()
        self.finished = counter("jobserver_jobs_finished_total",
                                "Jobs that left RUNNING for a final or stopped state, counted "
                                "by the node that ran them (or rescued them from a dead "
                                "node), by new state", ("state",))
        self.claimed = counter("jobserver_jobs_claimed_total", "Jobs claimed by this node")
        self.claims = counter("jobserver_claims_total", "Claim statements that took a job")
        self.retries = counter("jobserver_step_retries_total", "Step attempts retried",
                               ("type",))
        self.failovers = counter("jobserver_failovers_total",
                                 "Times this node became the active scheduler or leader")
        self.orphans = counter("jobserver_orphans_rescued_total",
                               "Jobs of dead nodes re-queued or failed by this node")
        self.fenced = counter("jobserver_fenced_writes_total",
                              "Writes refused because another owner holds the job")
        self.retention_deleted = counter(
            "jobserver_retention_deleted_total",
            "Old finished jobs this node deleted, with their steps and events "
            "(retention.finished_jobs)")
        self.dispatch = Histogram("jobserver_dispatch_latency_seconds",
                                  "Submit (or re-queue) to claim", buckets=LATENCY_BUCKETS,
                                  registry=registry)
        self.job_seconds = Histogram("jobserver_job_duration_seconds",
                                     "Run time of jobs that left RUNNING", ("job", "state"),
                                     buckets=DURATION_BUCKETS, registry=registry)
        self.step_seconds = Histogram("jobserver_step_duration_seconds",
                                      "Run time of step attempts", ("job", "type", "state"),
                                      buckets=DURATION_BUCKETS, registry=registry)
        self.lock_wait = Histogram("jobserver_lock_acquire_seconds",
                                   "Time to acquire a scheduling lock", ("kind",),
                                   buckets=LATENCY_BUCKETS, registry=registry)
        self.running = Gauge("jobserver_running_jobs", "Jobs running on this node",
                             registry=registry, multiprocess_mode="livesum")
        self.locks_held = Gauge("jobserver_locks_held", "Locks this node holds",
                                registry=registry, multiprocess_mode="livesum")
        self.held_ahead = Gauge("jobserver_jobs_held_ahead",
                                "Jobs this node claimed ahead (scheduler.prefetch), READY "
                                "and waiting for one of its slots",
                                registry=registry, multiprocess_mode="livesum")
        # Set by the node that plans (jobserver.stuck); 0 on the others.
        self.stuck = Gauge("jobserver_jobs_stuck",
                           "Jobs READY longer than scheduler.stuck_after, by why no node "
                           "runs them (waiting for a free slot is not counted)", ("reason",),
                           registry=registry, multiprocess_mode="livemax")
        self.active = Gauge("jobserver_scheduler_active",
                            "1 while this node is the active scheduler (or leader)",
                            registry=registry, multiprocess_mode="livemax")
        # Scheduling listeners (jobserver.listeners); label values come from config.
        self.listener_restarts = counter("jobserver_listener_restarts_total",
                                         "Scheduling listener restarts after it raised",
                                         ("listener",))
        self.listener_dropped = counter(
            "jobserver_listener_events_dropped_total",
            "Events a scheduling listener never got: queue_full (it was too slow), failed "
            "(it raised on the event), disabled (it was given up)", ("listener", "reason"))
        self.listener_enabled = Gauge("jobserver_listener_enabled",
                                      "1 while a scheduling listener runs, 0 once disabled",
                                      ("listener",), registry=registry,
                                      multiprocess_mode="livemax")
        from jobserver.planners import installed

        #: Each installed planner's own metrics, by planner name (:meth:`planner`).
        self._planners = {planner.name: own for planner in installed()
                          if (own := planner.node_metrics(registry)) is not None}

    def planner(self, name: str) -> Any:
        """The metrics object planner ``name`` built for this node
        (:meth:`jobserver.planners.base.Planner.node_metrics`), for its background
        parts; None when it has none."""
        return self._planners.get(name)

    def start_at_zero(self, step_types: Iterable[str], listeners: Iterable[str]) -> None:
        """Create every labelled counter's children now, at 0.

        A child appears only when first touched, so a healthy node's error and retry
        counters would be absent, not 0, until the first failure: a dashboard panel
        then reads "No data" and a ``rate()`` or ``increase()`` alert starts from the
        first event instead of counting it. Label values are all known at start.
        """
        for state in FINISHED_STATES:
            self.finished.labels(state.value)
        for step_type in step_types:
            self.retries.labels(step_type)
        for listener in listeners:
            self.listener_restarts.labels(listener)
            for reason in LISTENER_DROP_REASONS:
                self.listener_dropped.labels(listener, reason)
        for own in self._planners.values():
            own.start_at_zero()
        from jobserver.store.not_running import STUCK_CODES

        for reason in STUCK_CODES:
            self.stuck.labels(reason).set(0)

    def on_event(self, event: StateChange | NodeEvent) -> None:
        if isinstance(event, NodeEvent):
            self._node_event(event)
        elif event.step is None:
            self._job_event(event)
        elif event.old is State.RUNNING:
            self.step_seconds.labels(self.names(event.job_name), event.step_type or "",
                                     event.new.value).observe(event.seconds or 0.0)
            if event.new is State.READY:
                self.retries.labels(event.step_type or "").inc()

    def _job_event(self, event: StateChange) -> None:
        if event.old is State.READY and event.new is State.RUNNING:
            self.claimed.inc()
            if event.seconds is not None:
                self.dispatch.observe(max(event.seconds, 0.0))
        elif event.old is State.RUNNING and event.new is not State.READY:
            self.finished.labels(event.new.value).inc()
            if event.seconds is not None:  # None: a rescue, which did not time the run
                self.job_seconds.labels(self.names(event.job_name), event.new.value).observe(
                    event.seconds)

    def _node_event(self, event: NodeEvent) -> None:
        counters = {"became_active": self.failovers, "orphan_rescued": self.orphans,
                    "fenced_off": self.fenced, "claimed": self.claims}
        if event.kind in counters:
            counters[event.kind].inc(event.count)
        if event.kind == "lock_acquired" and event.seconds is not None:
            self.lock_wait.labels(event.detail or "").observe(event.seconds)


class ApiMetrics:
    """What an API worker reports: requests by route and status, submissions."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import Counter, Histogram

        self.requests = Counter("jobserver_api_requests_total", "API requests",
                                ("route", "method", "status"), registry=registry)
        self.latency = Histogram("jobserver_api_request_seconds", "API request time",
                                 ("route",), buckets=LATENCY_BUCKETS, registry=registry)
        self.submitted = Counter("jobserver_jobs_submitted_total",
                                 "Jobs created through the API (idempotent replays excluded)",
                                 registry=registry)


class StoreCollector:
    """Cluster-wide figures read from the store at scrape time, the engine's then each
    installed planner's (:meth:`jobserver.planners.base.Planner.collect`); whether
    each node is alive also from the lock service, through ``presence`` (a
    :class:`jobserver.presence.PresenceProbe`; None: by heartbeats alone)."""

    def __init__(self, store: Any, dead_after: float, presence: Any = None) -> None:
        self._store = store
        self._dead_after = dead_after
        self._presence = presence

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        jobs = GaugeMetricFamily("jobserver_jobs", "Jobs in the store by state",
                                 labels=("state",))
        counts = self._store.jobs.count_by_state()
        for state in State:
            jobs.add_metric((state.value,), counts.get(state.value, 0))
        yield jobs
        age = GaugeMetricFamily("jobserver_node_heartbeat_age_seconds",
                                "Seconds since each known node's last heartbeat",
                                labels=("node",))
        alive = GaugeMetricFamily("jobserver_node_alive",
                                  "1 if the node is alive: registered, its heartbeat younger "
                                  "than server.dead_after and its presence lock held",
                                  labels=("node",))
        dead = GaugeMetricFamily("jobserver_node_dead",
                                 "1 if the node did not stop cleanly and is gone: its "
                                 "presence lock is free or its heartbeat is older than "
                                 "server.dead_after (crashed or cut off); a node that "
                                 "stopped cleanly is 0", labels=("node",))
        from jobserver.presence import alive_nodes

        servers = self._store.servers.list()
        living = alive_nodes(servers, self._dead_after, self._presence)
        for server in servers:
            age.add_metric((server.id,), server.heartbeat_age)
            alive.add_metric((server.id,), float(server.id in living))
            dead.add_metric((server.id,),
                            float(server.state == "alive" and server.id not in living))
        yield age
        yield alive
        yield dead
        from jobserver.planners import installed

        for planner in installed():
            yield from planner.collect(self._store)


def exposition(store: Any, dead_after: float, local_registry: Any,
               presence: Any = None) -> tuple[bytes, str]:
    """The text of ``GET /metrics``: every process of this node plus the store's figures
    (nodes alive as ``presence`` tells, see :class:`StoreCollector`)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    if multiprocess():
        from prometheus_client import multiprocess as mp

        mp.MultiProcessCollector(registry)
    else:
        registry.register(_Forward(local_registry))
    registry.register(StoreCollector(store, dead_after, presence))
    return generate_latest(registry), CONTENT_TYPE_LATEST


class _Forward:
    """Exposes another registry's metrics (single-process mode: tests, embedding)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()
