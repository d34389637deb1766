"""One node: presence, registration, heartbeats, the runner and the scheduler.

Start-up order matters: the presence lock first (so a second process with the same
``server.id`` refuses to start), then registration, then re-queueing what this node
id left RUNNING in an earlier life, and only then scheduling.

Every background loop of the node is supervised (:mod:`jobserver.loops`): when a
required one dies of an unexpected error the node marks itself failed for
``/healthz``, stops at once without draining (its jobs go back to READY, its locks
and its presence are released, its row is marked stopped) and :attr:`Node.failure`
says why; ``jobserver serve`` then exits with its own code.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from jobserver import __version__
from jobserver.config import Config
from jobserver.connections import Connections
from jobserver.exceptions import TRANSIENT, StoreError
from jobserver.events import EventBus
from jobserver.listeners import Listeners
from jobserver.logs import job_fields
from jobserver.loops import FailureMark, Loop, LoopDeath, Periodic, Supervisor
from jobserver.metrics import NodeMetrics, multiprocess
from jobserver.planner import PlannerSeat
from jobserver.planners import NodeContext, NodeParts
from jobserver.planners import installed as installed_planners
from jobserver.retention import RetentionLoop
from jobserver.runner import Runner
from jobserver.stuck import StuckJobs
from jobserver.spec import Policy
from jobserver.startup import take_presence, upgrade_schema
from jobserver.states import StopReason
from jobserver.steps import step_types
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from jobserver.store.records import ClaimToken
from jobserver.wakeup import WakeSource, watcher_for
from locks import make_lock_backend
from locks.base import Lease
from schedulers import Scheduler, SchedulerContext, create_scheduler
from schedulers.base import presence_key

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

#: How long a stopping node waits for the steps it cancelled to end and their jobs to
#: be given back (a shell step's kill takes ``steps.shell.kill_grace``).
GIVE_BACK_WAIT = 5.0


def _private_registry() -> CollectorRegistry:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


class Node:
    def __init__(self, config: Config, python_steps: PythonSteps | None = None) -> None:
        self.config = config
        self.id = config.server.id
        self.python_steps = python_steps or PythonSteps.with_entry_points()
        # A transaction this node leaves open while stalled ends when its locks would.
        self.store = Store(config.database_url, config.database.pool_size,
                           notify=config.scheduler.notify,
                           stall_timeout=config.lock.session_timeout)
        self.locks = make_lock_backend(config, self.store)
        self.bus = EventBus()
        self.metrics = NodeMetrics(None if multiprocess() else _private_registry())
        self.bus.subscribe(self.metrics.on_event)
        # Imported now: a listener that cannot be imported stops start-up.
        self.listeners = Listeners.from_config(config, self.metrics)
        self.bus.subscribe(self.listeners.publish)
        # Named databases of sql steps: engines made on first use, disposed at stop.
        self.connections = Connections(config.connections)
        steps = step_types(self.python_steps, self.connections)
        self.runner = Runner(self.store, steps, config.steps.shell,
                             config.capacity, on_slot_freed=self._wake, bus=self.bus,
                             api_url=config.api.local_url(),
                             log_limit=config.steps.log_limit_bytes)
        self.metrics.start_at_zero(steps, [worker.name for worker in self.listeners.workers])
        self.ctx = SchedulerContext(config=config, node_id=self.id, store=self.store,
                                    locks=self.locks, runner=self.runner,
                                    presence=lambda: self._presence)
        self.scheduler: Scheduler = create_scheduler(self.ctx)
        # One seat for every planner loop: in distributed mode it holds the planner lock.
        self.seat = PlannerSeat(self.scheduler, self.locks, self.ctx.stopping)
        #: Every installed planner's background parts (schedule evaluator, trackers,
        #: listeners), built through the planner seam.
        self.planned = self._planner_parts()
        self.retention = self._retention()
        self.stuck = StuckJobs(self.store, self.seat, config, self.metrics.stuck)
        self._presence: Lease | None = None
        self._heartbeat = Periodic("heartbeat", config.server.heartbeat_interval,
                                   self.heartbeat)
        self._scheduling = Loop("scheduler", self.scheduler.run, stopping=self.ctx.stopping,
                                on_stop=self.ctx.wake.set)
        self._listener: WakeSource | None = None
        self.supervisor = Supervisor(self._failed)
        self._failure_mark = FailureMark(config.data_dir, self.id)
        self._stop_lock = threading.Lock()
        self._drained: bool | None = None  # once stopped: whether every job finished
        # Heartbeats go on while draining, or other nodes would rescue jobs this node is
        # still finishing; they stop only once the node is done.
        self._closed = threading.Event()
        self._drain_advertised = False
        #: RUNNING here by the store, unknown to the runner, at the last heartbeat
        self._abandoned: dict[int, ClaimToken] = {}

    def _planner_parts(self) -> NodeParts:
        """The installed planners' parts on this node, merged: they act only while
        this node holds the planner seat."""
        context = NodeContext(config=self.config, store=self.store, seat=self.seat,
                              policy=self._policy(), metrics=self.metrics,
                              stopping=self.ctx.stopping,
                              wake_schedulers=self._release_launched)
        merged = NodeParts()
        for planner in installed_planners():
            parts = planner.node_parts(context)
            merged.planning += parts.planning
            merged.tracking += parts.tracking
            merged.services += parts.services
        return merged

    def _retention(self) -> RetentionLoop | None:
        """The deletion of old finished jobs and change rows, which acts only while
        this node holds the planner seat; None when both durations are 0."""
        if not (self.config.retention.finished_jobs or self.config.retention.changes):
            return None
        return RetentionLoop(self.store, self.seat, self.config.retention,
                             self.metrics.retention_deleted, stopping=self.ctx.stopping)

    def _policy(self) -> Policy:
        return Policy(self.python_steps.is_registered,
                      self.config.steps.shell.allowed_executables,
                      connections=self.config.connections,
                      denied_env=self.config.steps.shell.denied_env)

    def _release_launched(self) -> None:
        """Jobs launched ahead of their fire time may start now: claim them at once
        here, and wake the other nodes' schedulers."""
        self.ctx.wake.set()
        self.store.tx.wake_all()

    def _wake(self) -> None:
        """A runner slot freed: wake the scheduler if jobs may be waiting for one.

        Under load, slots free one job at a time; waking for each would turn one claim
        of many jobs into many claims of one. The scheduler is woken once a quarter
        of the slots is free (or at its next poll).
        """
        if self.scheduler.more_ready and \
                self.runner.free_slots() >= max(1, self.runner.capacity // 4):
            self.ctx.wake.set()

    def start(self, upgrade: bool = True) -> None:
        if upgrade:
            upgrade_schema(self.store, self.locks)
        self._presence = take_presence(self.locks, self.id)
        self._failure_mark.clear()  # this process owns the id now
        self._presence.on_lost(lambda _lease: self.ctx.present.clear())
        self._register()
        self.listeners.start()
        for job_id, state in self.store.servers.requeue_orphans(self.id, self.id):
            log.warning("job %s was left running by this node's last run: now %s", job_id, state,
                        extra=job_fields(job_id, node=self.id))
            self.scheduler.publish_rescued(job_id, state, "left running by this node's last run")
        self.runner.start()
        self._listener = watcher_for(self.store.url, self.config.scheduler.notify,
                                     self.ctx.wake)
        if self._listener is not None:
            self._listener.start()
        self._heartbeat.start()
        self._scheduling.start()
        for service in self.planned.services:
            service.start()
        for loop in (*self.planned.planning, *self.planned.tracking):
            loop.start()
        if self.retention is not None:
            self.retention.start()
        self.stuck.start()
        self.supervisor.watch(*self.loops())
        log.info("node %s started in %s mode with %s lock backend", self.id,
                 self.config.scheduler.mode.value, self.config.lock.backend)

    def loops(self) -> list[Loop]:
        """Every background loop of this node and of its parts."""
        wake = [self._listener] if self._listener is not None else []
        own: list[Loop] = [self.stuck] + ([self.retention] if self.retention else [])
        return [self._heartbeat, self._scheduling, *wake, *own, *self.planned.loops(),
                *self.runner.loops(), *self.locks.loops(), *self.listeners.loops()]

    @property
    def failure(self) -> LoopDeath | None:
        """Why this node gave up (a required loop died), or None."""
        return self.supervisor.failure

    def _failed(self, death: LoopDeath) -> None:
        """A required loop died: say so to ``/healthz``, then stop without draining."""
        log.critical("%s: node %s gives up its jobs, locks and presence and stops",
                     death.describe(), self.id)
        self._failure_mark.write(death)
        self.stop(drain_timeout=0)

    def heartbeat(self) -> None:
        self._keep_presence()
        self.metrics.running.set(self.runner.running_count())
        self.metrics.locks_held.set(self.scheduler.held_locks() + (self._presence is not None))
        self.metrics.held_ahead.set(len(self.scheduler.prefetch))
        self.metrics.active.set(int(self.scheduler.active))
        try:
            alive = self.store.servers.heartbeat(self.id, self.runner.running_count(),
                                                 self.scheduler.role)
            if not alive:
                self._register()
        except TRANSIENT:
            log.warning("heartbeat failed; will retry", exc_info=True)
        try:
            self._requeue_abandoned()
        except TRANSIENT:
            log.warning("could not look for abandoned jobs; will retry", exc_info=True)

    def _requeue_abandoned(self) -> None:
        """Give back jobs that the store says run here but no execution here runs.

        An execution whose last writes failed because the store was away just then
        (a PostgreSQL restart while a job was being re-queued after its segment lock
        went with the lock session) ends without them, and its job stayed RUNNING on
        this live node for good: no node rescues the jobs of a live one. A job found
        so at two heartbeats in a row, under the same claim token (not one claimed a
        moment ago and on its way to the runner), goes back to READY; the release is
        a compare-and-set on that token, so a late write of its execution is refused.
        """
        if self.ctx.stopping.is_set():
            self._abandoned = {}
            return
        known = {token.job_id for token in self.runner.running_tokens()}
        abandoned = {token.job_id: token for token in self.store.runs.running_on(self.id)
                     if token.job_id not in known}
        for job_id, token in abandoned.items():
            if (self._abandoned.get(job_id) == token
                    and self.store.runs.release(token, "no execution left on its node; "
                                                       "re-queued")):
                log.warning("job %s was RUNNING here without an execution: re-queued", job_id,
                            extra=job_fields(job_id, node=self.id))
        self._abandoned = abandoned

    def _register(self) -> None:
        """Write this node's row. A draining node advertises no capacity: the leader
        (leader mode) assigns jobs by free capacity, and a job assigned to a node that
        no longer starts any would wait for the end of its drain."""
        capacity = 0 if self.ctx.stopping.is_set() else self.config.capacity
        self.store.servers.register(self.id, socket.gethostname(), os.getpid(),
                                    self.config.scheduler.mode.value, capacity,
                                    tags={"version": __version__})

    def _keep_presence(self) -> None:
        """Take the presence lock again after a lost session (ZooKeeper expiry, a
        dropped PostgreSQL lock connection) ended it: without it, other nodes take this
        live node for dead and rescue every job it runs. Until then the schedulers
        claim nothing (``ctx.present`` is cleared when the lease is lost)."""
        if self._presence is None or self._presence.is_valid() or self._closed.is_set():
            return
        try:
            lease = self.locks.acquire(presence_key(self.id), blocking=False)
        except TRANSIENT as exc:  # the session is not back yet; next heartbeat
            log.warning("could not re-take the presence lock yet: %s", exc)
            return
        if lease is None:
            log.error("the presence lock of %s is held by another process", self.id)
            return
        self._presence = lease
        lease.on_lost(lambda _lease: self.ctx.present.clear())
        self.ctx.present.set()
        log.info("re-took the presence lock of %s", self.id)

    def stop_claiming(self) -> None:
        """The start of a drain: claim nothing more and let go of the scheduling locks
        (the scheduler loop releases them as it ends); running jobs go on."""
        self.ctx.stopping.set()
        self.ctx.wake.set()
        for planner in (*self.planned.planning, self.retention):
            if planner is not None:
                planner.stop()
        if self._drain_advertised:
            return
        self._drain_advertised = True
        try:
            self.store.servers.set_capacity(self.id, 0)
        except StoreError:  # the leader may assign a job or two more; the drain goes on
            log.warning("could not advertise the drain", exc_info=True)

    def stop(self, drain_timeout: float | None = None) -> bool:
        """Stop claiming, let running jobs finish up to ``drain_timeout``, release locks.

        Returns True when every running job finished. Jobs still running after the
        timeout are cancelled and put back to READY (:meth:`_give_back`). Stopping
        happens once: a second call (a signal while the supervisor stops a failed
        node) waits for the first and returns its result.
        """
        with self._stop_lock:
            if self._drained is None:
                self._drained = self._stop(drain_timeout)
            return self._drained

    def _stop(self, drain_timeout: float | None) -> bool:
        timeout = self.config.server.drain_timeout if drain_timeout is None else drain_timeout
        deadline = time.monotonic() + timeout
        self.stop_claiming()
        # A claim round under way when the drain began hands its jobs to the runner
        # before the runner is asked whether anything runs.
        self.scheduler.settle_claims(timeout)
        drained = self.runner.wait_idle(max(0.0, deadline - time.monotonic()))
        if not drained:
            self._give_back()
        self._closed.set()
        # A thread waiting on an unreachable lock service would hold the stop up.
        self.locks.abort_waits()
        for loop in (self._heartbeat, self._scheduling, *self.planned.planning,
                     *self.planned.tracking, self.retention, self.stuck):
            if loop is not None:
                loop.stop()
                loop.join(5)
        if self._listener is not None:
            self._listener.stop()
        self.runner.shutdown()
        self.listeners.stop()
        for service in self.planned.services:
            service.stop()
        self._close()
        return drained

    def _give_back(self) -> None:
        """Cancel the jobs still running and put each back to READY at once, its audit
        event saying why: ``node N drained`` when a drain ran out of time (they run
        again on a node that serves on, or on this one's next start, and no rescue
        takes this node for dead), ``node stopping`` when a failed node gives up
        without draining. A step that does not end within :data:`GIVE_BACK_WAIT` (a
        Python step cannot be interrupted) leaves its job RUNNING on this stopped
        node, for the rescue path."""
        running = self.runner.running_count()
        if self.failure is not None:
            log.warning("%s job(s) still running are cancelled and re-queued", running)
            self.runner.cancel_all(StopReason.NODE_STOPPING, requeue=True)
        else:
            log.warning("drain timeout: %s job(s) still running are cancelled and "
                        "re-queued", running)
            self.runner.cancel_all(StopReason.DRAINED, requeue=True, detail=(
                f"node {self.id} drained: still running after server.drain_timeout "
                f"({self.config.server.drain_timeout:g} s)"))
        self.runner.wait_idle(GIVE_BACK_WAIT)

    def _close(self) -> None:
        try:
            self.store.servers.mark_stopped(self.id)
        except StoreError:
            log.warning("could not mark node stopped", exc_info=True)
        if self._presence is not None:
            self._presence.release()
        self.locks.close()
        self.connections.dispose()
        self.store.dispose()
