"""One claimed job on one node: its steps in DAG order, retries, cancellation.

Every write goes through the store's compare-and-set on the job's claim token; when
one is refused (:class:`FencedOff`) the execution stops at once. Ready steps run in
parallel up to the job's ``parallelism``; after a step fails for good no new step is
started, running ones finish, and the job goes to ERROR.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from jobserver.completer import RETRY_FOR, Completer
from jobserver.config import ShellStepConfig
from jobserver.events import EventBus, NodeEvent, StateChange
from jobserver.exceptions import FencedOff, StoreUnavailable
from jobserver.logs import job_fields
from jobserver.planners.hooks import OutputRefused
from jobserver.retrying import retry
from jobserver.states import State, StopReason
from jobserver.steps import StepContext, StepFunction
from jobserver.steps.log import StepLog
from jobserver.store import Store
from jobserver.stepgraph import StepGraph, StepRun, Taken
from jobserver.store.logs import LogKey
from jobserver.store.records import Completion, JobRecord, StepOutcome, StepRecord

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BACKOFF = 300.0
#: ``steps.log_limit_bytes``'s default.
LOG_LIMIT = 10 << 20


class JobExecution:
    def __init__(self, job: JobRecord, store: Store, step_types: dict[str, StepFunction],
                 shell: ShellStepConfig, bus: EventBus, completer: Completer,
                 api_url: str | None = None, log_limit: int = LOG_LIMIT) -> None:
        self.job = job
        self._api_url = api_url
        self._log_limit = log_limit
        self._completer = completer
        self._finished = False
        self._final_write: Future[bool] | None = None
        self.token = job.token()
        self._store = store
        self._bus = bus
        self._started = time.monotonic()
        self._step_types = step_types
        self._shell = shell
        self.cancelled = threading.Event()
        self.cancel_reason: StopReason | None = None
        self.cancel_detail: str | None = None
        self.requeue = False
        self.fenced_off = False
        # The partitions this run consumes, by input (see _take_inputs).
        self.inputs: dict[str, dict[str, Any]] = {}
        # Steps published as RUNNING and not yet as ended: {name: (step, attempt)}.
        self._running_steps: dict[str, tuple[StepRecord, int]] = {}

    def cancel(self, reason: StopReason, detail: str | None = None,
               requeue: bool = False) -> None:
        """Stop the job's running steps (subprocesses are killed); idempotent.

        ``detail``: words for the log and the audit trail in place of the reason's own.

        ``requeue``: this node gives the job up (shutdown, lost segment lock) and puts
        it back to READY at once, its interrupted steps included, rather than leaving
        it to orphan rescue. An operator's pause or discard is not re-queued.
        """
        if not self.cancelled.is_set():
            self.cancel_reason, self.cancel_detail = reason, detail
            self.requeue = requeue
            self.cancelled.set()

    def run(self) -> Future[bool] | None:
        """Run the job's steps. Returns the job's final write when it was handed to the
        group commit and is not committed yet: the job is over when that resolves (its
        events are published by then). None when the job is over already."""
        try:
            self._run()
        except FencedOff as exc:
            self._fenced(exc)
        except Exception as exc:
            log.exception("job %s failed inside the runner", self.job.id,
                          extra=self.log_fields())
            self.cancel(StopReason.INTERNAL_ERROR)
            if self._final_write is None:
                self._finish(State.ERROR, f"internal error: {type(exc).__name__}: {exc}")
        return self._final_write

    def log_fields(self, step: str | None = None, attempt: int | None = None) -> dict[str, Any]:
        """``extra=`` for a log line about this job (``attempt``: a step's attempt)."""
        return job_fields(self.job.id, step, attempt or self.token.attempt, self.token.node,
                          self.token.fence)

    def _cancel_message(self) -> str:
        return self.cancel_detail or str(self.cancel_reason)

    def _fenced(self, exc: FencedOff) -> None:
        self.fenced_off = True
        self.cancel(StopReason.FENCED, exc.message)
        log.warning("job %s stopped: %s", self.job.id, exc.message, extra=self.log_fields())
        self._bus.publish(NodeEvent("fenced_off", self.token.node, detail=exc.message))

    def _publish(self, old: State | None, new: State, step: StepRecord | None = None,
                 seconds: float | None = None, attempt: int | None = None,
                 message: str | None = None) -> None:
        if step is not None and new is State.RUNNING:
            self._running_steps[step.name] = (step, attempt or self.token.attempt)
        elif step is not None and old is State.RUNNING:
            self._running_steps.pop(step.name, None)
        self._bus.publish(StateChange(
            job_id=self.job.id, job_name=self.job.name, old=old, new=new,
            node=self.token.node, step=step.name if step else None,
            step_type=step.type if step else None, fence=self.token.fence,
            attempt=attempt or self.token.attempt, message=message, seconds=seconds))

    def _finish(self, state: State, error: str | None = None) -> None:
        try:
            if self._retrying(self._store.runs.finish_job, self.token, state, error):
                self._publish(State.RUNNING, state, seconds=time.monotonic() - self._started,
                              message=error)
        except FencedOff as exc:
            self._fenced(exc)

    def _retrying(self, write: Callable[..., T], *args: Any) -> T:
        """Run a store write, retrying while the store is unreachable (a restart, a
        failover) for up to ``RETRY_FOR`` seconds, as the group commit does. Giving up
        at once would end the execution with its job still RUNNING in the store and
        its runner slot free: the node would take more jobs than it has slots."""
        return retry(lambda: write(*args), on=StoreUnavailable, for_seconds=RETRY_FOR,
                     what=f"job {self.job.id}: store write", log_extra=self.log_fields())

    def _publish_operator_stop(self) -> None:
        """An operator paused or discarded this job through the API (in a process with
        no event bus): publish the change this node observed, for listeners and metrics."""
        if self.fenced_off or self.cancel_reason is None or not self.cancel_reason.by_operator:
            return
        state = self.cancel_reason.operator_state
        if state is None:  # start_step found the job no longer RUNNING: read which state
            try:
                job = self._store.jobs.get(self.job.id, with_steps=False)
            except Exception:  # noqa: BLE001 - only an event is at stake
                log.warning("could not read job %s", self.job.id, exc_info=True,
                            extra=self.log_fields())
                return
            if (job.node, job.fence, job.attempt) != (self.token.node, self.token.fence,
                                                       self.token.attempt):
                return
            state = job.state
        if state not in (State.STOPPED, State.DISCARDED):
            return
        message = f"{state.value.lower()} by operator"
        for step, attempt in list(self._running_steps.values()):  # discard moved them
            self._publish(State.RUNNING, state, step, attempt=attempt, message=message)
        self._publish(State.RUNNING, state, seconds=time.monotonic() - self._started,
                      message=message)

    # -- the DAG ------------------------------------------------------------------------
    def _run(self) -> None:
        if self.job.inputs and not self._take_inputs():
            return
        graph = StepGraph(self.job.steps or [], self.job.parallelism)
        failed: tuple[StepRecord, StepOutcome] | None = None
        in_flight: dict[Future[StepRun], StepRecord] = {}
        pool = (ThreadPoolExecutor(self.job.parallelism, thread_name_prefix=f"job{self.job.id}")
                if self.job.parallelism > 1 else None)
        try:
            while True:
                if failed is None and not self.cancelled.is_set():
                    for step, last in graph.take():
                        in_flight[self._launch(pool, graph, step, last)] = step
                if not in_flight:
                    break
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    step, run = in_flight.pop(future), future.result()
                    if run.outcome.state is not State.SUCCEED and failed is None:
                        failed = (step, run.outcome)
                    for successor, last in run.started:  # started by the step's own write
                        in_flight[self._launch(pool, graph, successor, last,
                                               successor.attempt + 1)] = successor
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        self._conclude(failed, graph.pending)

    def _take_inputs(self) -> bool:
        """Take what the job declares it consumes (the installed planners'
        :class:`~jobserver.planners.hooks.JobInputs`: consumers' partitions) before its
        first step runs; False when the run is over already (nothing to consume, an
        input gone, or the job no longer ours)."""
        assert self.job.inputs is not None
        inputs = self._store.hooks.inputs
        if inputs is None:
            raise RuntimeError(f"job {self.job.id} declares inputs, and no installed "
                               "planner takes them")
        taken = self._retrying(inputs.take, self.token, self.job.inputs)
        seconds = time.monotonic() - self._started
        if taken.outcome == "run":
            self.inputs = {item["input"]: item for item in taken.inputs}
            log.info("job %s consumes %d partition(s)", self.job.id, taken.count,
                     extra=self.log_fields())
            return True
        self._finished = True
        if taken.outcome == "succeeded":
            self._publish(State.RUNNING, State.SUCCEED, seconds=seconds,
                          message=taken.message or "nothing to consume; no step run")
        elif taken.outcome == "failed":
            self._publish(State.RUNNING, State.ERROR, seconds=seconds, message=taken.error)
        elif taken.outcome == "waiting":
            log.info("job %s: %s", self.job.id, taken.message or "nothing to consume",
                     extra=self.log_fields())
        else:
            self.cancel(StopReason.OPERATOR)
            self._publish_operator_stop()
        return False

    def _launch(self, pool: ThreadPoolExecutor | None, graph: StepGraph, step: StepRecord,
                last: bool, started: int | None = None) -> Future[StepRun]:
        """Run ``step`` on the pool, or here when the job runs one step at a time.
        ``started``: its attempt, when a predecessor's write started it already."""
        if pool is not None:
            return pool.submit(self._run_step, graph, step, last, started)
        future: Future[StepRun] = Future()
        try:
            future.set_result(self._run_step(graph, step, last, started))
        except BaseException as exc:  # re-raised by future.result() in _run
            future.set_exception(exc)
        return future

    def _conclude(self, failed: tuple[StepRecord, StepOutcome] | None,
                  pending: list[StepRecord]) -> None:
        if self._finished or self._final_write is not None:
            return  # the last step's write finishes the job too
        if self.requeue:
            self._retrying(self._store.runs.release, self.token,
                           f"{self._cancel_message()}; re-queued")
        elif self.cancelled.is_set():
            log.info("job %s: %s", self.job.id, self._cancel_message(), extra=self.log_fields())
            self._publish_operator_stop()
        elif failed is not None:
            step, outcome = failed
            self._finish(State.ERROR, f"step {step.name} failed: {outcome.error}")
        elif pending:
            names = ", ".join(step.name for step in pending)
            self._finish(State.ERROR, f"steps never became runnable: {names}")
        else:
            self._finish(State.SUCCEED)

    # -- one step, with retries --------------------------------------------------------
    def _run_step(self, graph: StepGraph, step: StepRecord, last: bool,
                  started: int | None) -> StepRun:
        """Run one step to its final outcome and write it, with the start of the steps
        its success lets run (see :meth:`_advance`)."""
        try:
            outcome, attempt = self._attempts(step, last, started)
        except BaseException:
            graph.failed(step)
            raise
        if attempt is None or outcome.state is not State.SUCCEED:
            graph.failed(step)
            if attempt is not None:
                self._write_end(step, attempt, outcome, last)
            return StepRun(outcome)
        if last:
            graph.succeeded(step, take_more=False)
            self._complete(step, attempt, outcome)
            return StepRun(outcome)
        return StepRun(outcome, self._advance(graph, step, attempt, outcome))

    def _attempts(self, step: StepRecord, last: bool,
                  started: int | None) -> tuple[StepOutcome, int | None]:
        """Run ``step``'s attempts until one is final; the outcome and that attempt
        (None: the job stopped before the step could start). Failed attempts that will
        be retried are written here; the final one is left to the caller."""
        retries_left = step.retries
        # The claim (or the previous step's write) already started this one.
        prestarted = started or (step.attempt if step.state is State.RUNNING else None)
        while True:
            attempt = prestarted or self._retrying(self._store.runs.start_step, self.token, step)
            prestarted = None
            if attempt is None:
                self.cancel(StopReason.OPERATOR)
                return StepOutcome(State.STOPPED, error="job no longer running"), None
            self._publish(State.READY, State.RUNNING, step, attempt=attempt)
            outcome = self._add_partitions(step, self._invoke(step, attempt))
            if (outcome.state is State.ERROR and outcome.retryable and retries_left > 0
                    and not self.cancelled.is_set()):
                delay = min(step.retry_backoff * 2 ** (step.retries - retries_left), MAX_BACKOFF)
                retries_left -= 1
                note = f"attempt {attempt} failed: {outcome.error}; retrying in {delay:g} s"
                self._record_step(step, attempt, replace(outcome, state=State.READY), note)
                if self.cancelled.wait(delay):
                    return StepOutcome(State.STOPPED, error="cancelled during retry backoff"), None
                continue
            return outcome, attempt

    def _write_end(self, step: StepRecord, attempt: int, outcome: StepOutcome,
                   last: bool) -> None:
        """Write a step's end that starts nothing after it."""
        if self.requeue and outcome.state is State.STOPPED:
            outcome = replace(outcome, state=State.READY)  # to be run again elsewhere
        if last and outcome.state is State.ERROR:
            self._complete(step, attempt, outcome)
        else:
            self._record_step(step, attempt, outcome)

    def _advance(self, graph: StepGraph, step: StepRecord, attempt: int,
                 outcome: StepOutcome) -> list[Taken]:
        """Write ``step``'s success together with the start of the steps it lets run,
        through the group commit; returns those steps (started). When the job is no
        longer RUNNING under this run's token (an operator paused it meanwhile), the
        step's end is written alone and nothing more starts, as before a step start
        that finds the job stopped."""
        successors = graph.succeeded(step, take_more=not self.cancelled.is_set())
        if not successors:
            self._record_step(step, attempt, outcome)
            return []
        completion = Completion(self.token, step, attempt, outcome,
                                start_next=tuple(successor for successor, _ in successors))
        if self._completer.submit(completion).result():
            self._publish(State.RUNNING, outcome.state, step, outcome.wall_seconds, attempt)
            return successors
        graph.give_back(successors)
        self._record_step(step, attempt, outcome)
        self.cancel(StopReason.OPERATOR)
        return []

    def _add_partitions(self, step: StepRecord, outcome: StepOutcome) -> StepOutcome:
        """Add what a successful step output (``StepOutcome.partitions``) before its
        SUCCEED is written, through the installed planners'
        :class:`~jobserver.planners.hooks.JobOutputs` (the datasets planner's
        partitions). Output that cannot be added fails the step, not retried; so does
        output when no installed planner takes it, rather than being dropped unseen."""
        if outcome.state is not State.SUCCEED or not outcome.partitions:
            return outcome
        outputs = self._store.hooks.outputs
        if outputs is None:
            return replace(outcome, state=State.ERROR, retryable=False,
                           error="the step output partitions, and no installed planner "
                                 "takes step outputs")
        try:
            added = self._retrying(outputs.add, self.token, step.name, outcome.partitions)
        except OutputRefused as exc:
            return replace(outcome, state=State.ERROR, error=exc.message, retryable=False)
        log.info("job %s step %s: %d partition(s) added", self.job.id, step.name, added,
                 extra=self.log_fields(step.name))
        return outcome

    def _complete(self, step: StepRecord, attempt: int, outcome: StepOutcome) -> None:
        """The job's last write: the step's outcome and the job's final state together.

        With a group commit the write is queued and this thread moves on; what follows
        the commit (events, freeing the runner's slot) runs when it resolves, so no
        thread waits on each job's commit.
        """
        succeeded = outcome.state is State.SUCCEED
        job_state = State.SUCCEED if succeeded else State.ERROR
        error = None if succeeded else f"step {step.name} failed: {outcome.error}"
        completion = Completion(self.token, step, attempt, outcome, job_state, error)
        future = self._completer.submit(completion)
        self._final_write = future
        future.add_done_callback(lambda done: self._final_write_done(done, completion))

    def _final_write_done(self, future: Future[bool], completion: Completion) -> None:
        try:
            self._completed(future.result(), completion)
        except FencedOff as exc:
            self._fenced(exc)
        except Exception:
            # The completer gave up after retrying for its whole window: the job stays
            # RUNNING in the store until the node's check for RUNNING jobs without an
            # execution puts it back to READY (see Node._requeue_abandoned).
            log.error("job %s: its final write failed", self.job.id, exc_info=True,
                      extra=self.log_fields())

    def _completed(self, written: bool, completion: Completion) -> None:
        if not written:  # an operator stopped the job first
            if self.cancelled.is_set():
                self._publish_operator_stop()
            return
        self._finished = True
        outcome, step = completion.outcome, completion.step
        self._publish(State.RUNNING, outcome.state, step, outcome.wall_seconds,
                      completion.attempt, outcome.error)
        assert completion.job_state is not None
        self._publish(State.RUNNING, completion.job_state,
                      seconds=time.monotonic() - self._started, message=completion.job_error)

    def _record_step(self, step: StepRecord, attempt: int, outcome: StepOutcome,
                     note: str | None = None) -> None:
        if self._retrying(self._store.runs.finish_step, self.token, step, attempt, outcome,
                          note):
            self._publish(State.RUNNING, outcome.state, step, outcome.wall_seconds, attempt,
                          note or outcome.error)

    def _claim_is_current(self) -> bool:
        """A step's check before an effect outside the job server: this run's claim
        is the job's claim in the store now (one read; store errors propagate)."""
        token = self.token
        return self._store.fences.check(token.job_id, token.fence, token.attempt).current

    def _invoke(self, step: StepRecord, attempt: int) -> StepOutcome:
        # The log writes nothing until output comes: a silent step costs no statement.
        step_log = StepLog(self._store.step_logs, LogKey(self.job.id, step.name, attempt),
                           self._log_limit)
        ctx = StepContext(job_id=self.job.id, job_name=self.job.name, step=step.name,
                          attempt=attempt, job_attempt=self.token.attempt,
                          fence=self.token.fence, node=self.token.node,
                          params=self.job.params, shell=self._shell, cancelled=self.cancelled,
                          started_monotonic=time.monotonic(), inputs=self.inputs,
                          api_url=self._api_url, fence_check=self._claim_is_current,
                          log=step_log, outputs=self._store.hooks.outputs)
        try:
            outcome = self._step_types[step.type](step.spec, ctx)
        except Exception as exc:
            log.exception("step %s of job %s raised", step.name, self.job.id,
                          extra=self.log_fields(step.name, attempt))
            outcome = StepOutcome(State.ERROR, error=f"{type(exc).__name__}: {exc}")
        # Before the attempt's end is written: a reader that sees it ended has its log.
        step_log.finish(outcome.output)
        return outcome
