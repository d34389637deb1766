"""The bounded pool that runs claimed jobs, and the watcher that stops them.

One scheduler loop claims jobs and hands them here; ``free_slots()`` tells it how many
it may claim, so the pool never queues work it cannot start. A single watcher loop asks
the store every ``WATCH_INTERVAL`` seconds whether any job this node runs was paused,
discarded or taken by another owner, and cancels those executions. A read that fails
because the store is unavailable changes nothing. The watcher and the group commit are
the runner's loops (:meth:`Runner.loops`), supervised by the node.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from jobserver.completer import RETRY_FOR, Completer
from jobserver.config import ShellStepConfig
from jobserver.events import EventBus
from jobserver.execution import LOG_LIMIT, JobExecution
from jobserver.loops import Loop, Periodic
from jobserver.states import StopReason
from jobserver.steps import StepFunction
from jobserver.store import Store
from jobserver.store.records import ClaimToken, JobRecord

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.5
#: How long a stopping runner waits for the group commit's last batch.
COMPLETER_JOIN = RETRY_FOR + 5


class WorkerPool:
    """Up to ``size`` threads running submitted calls in order of submission.

    A :class:`~concurrent.futures.ThreadPoolExecutor` without the futures: nobody
    waits on a job's call (its outcome goes to the store and the event bus), and a
    future with its condition and locks is costly on the scheduler's hot path.
    Threads start as calls arrive and no idle one is there to take them. They are
    not supervised loops: each call's failure is logged and the thread goes on. Like
    the loops they stop with :meth:`stop` and :meth:`join`.
    """

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one release per thread waiting for a call
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        """Run ``call(*args)`` on a pool thread; RuntimeError once shut down."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is shut down")
            self._calls.put((call, args))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()

    def stop(self) -> None:
        """Drop calls not started yet and let every thread end after its current call."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._calls.get_nowait()
                except queue.Empty:
                    break
            for _ in self._threads:
                self._calls.put(None)

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds in all for the threads; True once all ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            call, args = item
            try:
                call(*args)
            except BaseException:  # noqa: BLE001 - a call's failure must not end the thread
                log.exception("%s: a call raised", self._name)
            del item, call, args  # drop references before waiting for the next call
            self._idle.release()


class Runner:
    def __init__(self, store: Store, step_types: dict[str, StepFunction],
                 shell: ShellStepConfig, capacity: int,
                 on_slot_freed: Callable[[], None] = lambda: None,
                 bus: EventBus | None = None, api_url: str | None = None,
                 log_limit: int = LOG_LIMIT) -> None:
        """``api_url``: this node's API, handed to shell steps as ``JOBSERVER_URL``;
        ``log_limit``: ``steps.log_limit_bytes``, the most of a step attempt's output
        its log keeps."""
        self._store = store
        self._api_url = api_url
        self._log_limit = log_limit
        self.bus = bus or EventBus()
        self._completer = Completer(store)
        self._step_types = step_types
        self._shell = shell
        self.capacity = capacity
        self._on_slot_freed = on_slot_freed
        # Twice the capacity: a job whose final write is in flight keeps its thread's
        # follow-up work (releasing its segment lock) apart from the jobs that took
        # its slot; see free_slots.
        self._pool = WorkerPool(2 * capacity, "runner")
        self._running: dict[int, JobExecution] = {}
        #: Jobs whose steps are done and whose final write is queued, not committed.
        self._finishing: set[int] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._watcher = Periodic("runner-watch", WATCH_INTERVAL, self.check_running)
        self.fenced_off_count = 0

    def loops(self) -> list[Loop]:
        """The runner's background loops, for the node's supervisor."""
        return [self._completer, self._watcher]

    def start(self) -> None:
        self._completer.start()
        self._watcher.start()

    def free_slots(self) -> int:
        """Jobs this node may start now. A job whose steps are done no longer takes a
        slot while its final write waits for the group commit, so the next claim
        overlaps that commit; at most ``capacity`` such jobs wait at once."""
        with self._lock:
            executing = len(self._running) - len(self._finishing)
            return max(0, min(self.capacity - executing,
                              2 * self.capacity - len(self._running)))

    def running_count(self) -> int:
        with self._lock:
            return len(self._running)

    def running_tokens(self) -> list[ClaimToken]:
        with self._lock:
            return [execution.token for execution in self._running.values()]

    def submit(self, job: JobRecord, on_done: Callable[[], None] | None = None) -> JobExecution:
        """Run ``job``; ``on_done`` is called when its execution ends (e.g. to release
        the job's segment lock)."""
        execution = JobExecution(job, self._store, self._step_types, self._shell, self.bus,
                                 self._completer, self._api_url,
                                 self._log_limit)
        with self._lock:
            self._running[job.id] = execution
        self._pool.submit(self._execute, execution, on_done)
        return execution

    def cancel(self, job_id: int, reason: StopReason, detail: str | None = None,
               requeue: bool = False) -> bool:
        """Stop ``job_id`` if this runner runs it (see :meth:`JobExecution.cancel`);
        False when it does not, e.g. because it ended already."""
        with self._lock:
            execution = self._running.get(job_id)
        if execution is not None:
            execution.cancel(reason, detail, requeue)
        return execution is not None

    def _execute(self, execution: JobExecution, on_done: Callable[[], None] | None) -> None:
        final_write = None
        try:
            final_write = execution.run()
        finally:
            if final_write is None:
                self._finished(execution, on_done)
        if final_write is not None:
            # The job stays in _running (cancels, the watcher and drains still see it)
            # until its final write is committed; its slot is free at once.
            with self._lock:
                self._finishing.add(execution.job.id)
            self._on_slot_freed()
            final_write.add_done_callback(lambda _: self._after_final_write(execution, on_done))

    def _after_final_write(self, execution: JobExecution,
                           on_done: Callable[[], None] | None) -> None:
        if on_done is None:
            self._finished(execution, None)
            return
        try:  # releasing a lock may block: not in the group commit's writer thread
            self._pool.submit(self._finished, execution, on_done)
        except RuntimeError:  # the pool is stopped
            self._finished(execution, on_done)

    def _finished(self, execution: JobExecution, on_done: Callable[[], None] | None) -> None:
        if on_done is not None:
            try:
                on_done()
            except Exception:
                log.warning("cleanup after job %s failed", execution.job.id, exc_info=True,
                            extra=execution.log_fields())
        with self._lock:
            self._running.pop(execution.job.id, None)
            self._finishing.discard(execution.job.id)
            if execution.fenced_off:
                self.fenced_off_count += 1
            self._idle.notify_all()
        self._on_slot_freed()

    def cancel_all(self, reason: StopReason, requeue: bool = False,
                   detail: str | None = None) -> None:
        with self._lock:
            executions = list(self._running.values())
        for execution in executions:
            execution.cancel(reason, detail, requeue)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no job runs; False if some still run after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._idle:
            return self._idle.wait_for(lambda: not self._running,
                                       max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Stop the watcher and the pool, and let the group commit write what is
        queued (it may retry for up to its ``RETRY_FOR`` while the store is out)."""
        self._watcher.stop()
        self._pool.stop()
        self._completer.stop()
        self._watcher.join(5)
        self._completer.join(COMPLETER_JOIN)

    def check_running(self) -> None:
        """Cancel executions whose job was paused, discarded or taken over."""
        with self._lock:
            executions = {job_id: e for job_id, e in self._running.items()}
        if not executions:
            return
        verdicts = self._store.runs.watch(e.token for e in executions.values())
        for job_id, reason in verdicts.items():
            log.info("job %s must stop on this node: %s", job_id, reason,
                     extra=executions[job_id].log_fields())
            executions[job_id].cancel(reason)
