"""A chaos cluster consuming a dataset: the dataset and its consumers declared through
the API, writers adding partitions in batches, a steady stream of consuming jobs per
consumer, and ``kill -9`` of the node running the most of them.

The dataset ``raw`` has the key ``n: int, w: string``; partition ``n`` comes from
writer ``n % 4`` (its metadata ``{"writer": n % 4}``) and has ``w`` = ``"abcd"[n //
4 % 4]``. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from jobserver.store.tables import jobs
from tests.chaos.cluster import ChaosCluster
from tests.chaos.consumer_audit import ConsumerPlan
from tests.helpers import wait_for
from tests.integration.nodes import HttpError

DATASET = "raw"
KEY = [{"name": "n", "type": "int"}, {"name": "w", "type": "string"}]
PARTITIONS = f"/api/v1/datasets/default/{DATASET}/partitions"
CONSUMERS = f"/api/v1/datasets/default/{DATASET}/consumers"
STEP = Path(__file__).with_name("consumer_step.py")
WRITERS = 4
#: Jobs of one consumer queued or running at once.
IN_FLIGHT = 8
#: A killed node stays down this long before it is started again.
KILL_DOWN = 1.0
#: The dead node's jobs are rescued (re-queued) within this after the kill.
RESCUE_DEADLINE = 30.0
#: Attempts at one request that a kill answered with a 5xx.
SERVER_ERROR_ATTEMPTS = 10


def plans(limits: tuple[int, int, int] = (50, 20, 50), poison: int = 197,
          max_retries: int = 3) -> list[ConsumerPlan]:
    """Three consumers: ``all`` (no filter), ``ab`` (``w in (a, b)``, whose runs fail
    whenever they hold a poison partition, ``n % poison == 0``) and ``odd`` (writers 1
    and 3 by metadata, ``n >= 100``)."""
    return [
        ConsumerPlan("all", [], lambda key, meta: True, limits[0], max_retries),
        ConsumerPlan("ab", ["w in (a, b)"], lambda key, meta: key["w"] in ("a", "b"),
                     limits[1], max_retries, poison),
        ConsumerPlan("odd", ["meta.writer in (1, 3)", "n >= 100"],
                     lambda key, meta: meta.get("writer") in (1, 3) and key["n"] >= 100,
                     limits[2], max_retries)]


def consumer_body(plan: ConsumerPlan) -> dict[str, Any]:
    return {"processing_limit": plan.limit, "max_retries": plan.max_retries,
            "filter": plan.filter}


def partition(n: int) -> dict[str, Any]:
    return {"key": {"n": n, "w": "abcd"[n // 4 % 4]}, "location": f"/raw/{n}",
            "metadata": {"writer": n % WRITERS}}


def job_spec(plan: ConsumerPlan, ledger: Path, fail_rate: float, seconds: float,
             index: int) -> dict[str, Any]:
    """A job consuming up to ``plan.limit`` partitions through ``plan``; its one shell
    step is :mod:`tests.chaos.consumer_step`."""
    argv = [sys.executable, "-S", str(STEP), str(ledger), plan.name, str(plan.poison),
            str(fail_rate), str(seconds)]
    return {"name": f"{plan.name}-{index}",
            "inputs": [{"dataset": DATASET, "consumer": plan.name, "limit": plan.limit}],
            "steps": [{"name": "consume", "type": "shell", "argv": argv}]}


@dataclass
class Kill:
    victim: str
    running: int                  # jobs RUNNING on it when it was killed
    rescued: int = 0
    took_over: float = 0.0        # seconds until another node rescued its jobs

    def __str__(self) -> str:
        return f"{self.victim}({self.running} running, {self.rescued} rescued " \
               f"in {self.took_over:.2f}s)"


@dataclass
class ConsumerLoad:
    cluster: ChaosCluster
    plans: list[ConsumerPlan]
    fail_rate: float
    step_seconds: float
    submitted: dict[str, list[int]] = field(default_factory=dict)
    kills: list[Kill] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    # -- declaring ----------------------------------------------------------------------
    def declare(self) -> None:
        api = self.cluster.api
        api.call("POST", "/api/v1/datasets", {"name": DATASET, "key": KEY}, expect=(201,))
        for plan in self.plans:
            api.call("PUT", f"{CONSUMERS}/{plan.name}", consumer_body(plan), expect=(201,))
            self.submitted[plan.name] = []

    def _call(self, method: str, path: str, body: Any, expect: tuple[int, ...]) -> Any:
        """A request that a killed node may answer with a 5xx: tried again (partition
        batches carry ``if_absent``, submits an ``Idempotency-Key``)."""
        for attempt in range(SERVER_ERROR_ATTEMPTS):
            try:
                return self.cluster.api.call(method, path, body, expect=expect)
            except HttpError as exc:
                if exc.status < 500 or attempt == SERVER_ERROR_ATTEMPTS - 1:
                    raise
            time.sleep(0.2)  # a back-off before trying a request again

    # -- writers ------------------------------------------------------------------------
    def start_writers(self, total: int, batch: int, seconds: float) -> None:
        """``WRITERS`` threads add ``total`` partitions in batches, spread over
        ``seconds``."""
        began = time.monotonic()
        for writer in range(WRITERS):
            ns = list(range(writer, total, WRITERS))
            self._spawn(f"writer-{writer}", partial(self._write, ns, batch, seconds, began))

    def _write(self, ns: list[int], batch: int, seconds: float, began: float) -> None:
        batches = [ns[i:i + batch] for i in range(0, len(ns), batch)]
        for index, chunk in enumerate(batches):
            time.sleep(max(0.0, began + seconds * index / len(batches) - time.monotonic()))
            self._call("POST", PARTITIONS, {"partitions": [partition(n) for n in chunk],
                                            "if_absent": True}, (200, 201))

    def writers_done(self) -> bool:
        return not any(t.is_alive() for t in self._threads if t.name.startswith("writer"))

    # -- consuming jobs -----------------------------------------------------------------
    def start_submitters(self) -> None:
        for plan in self.plans:
            self._spawn(f"submit-{plan.name}", partial(self._submit, plan))

    def _submit(self, plan: ConsumerPlan) -> None:
        """Keep up to ``IN_FLIGHT`` jobs of ``plan`` queued or running while its
        consumer has partitions to hand out (lag)."""
        ids = self.submitted[plan.name]
        while not self._stop.is_set():
            if self.lag(plan.name) > 0 and self.in_flight(plan.name) < IN_FLIGHT:
                spec = job_spec(plan, self.cluster.ledger, self.fail_rate, self.step_seconds,
                                len(ids))
                job = self._call("POST", "/api/v1/jobs", spec, (200, 201))
                ids.append(int(job["id"]))
                continue
            self._stop.wait(0.1)

    def lag(self, consumer: str) -> int:
        return self.cluster.store.consumers.get("default", DATASET, consumer).lag

    def in_flight(self, consumer: str) -> int:
        """Jobs of ``consumer`` (named after it) queued or running."""
        with self.cluster.store.tx.read() as conn:
            return int(conn.execute(select(func.count()).select_from(jobs).where(
                jobs.c.name.like(f"{consumer}-%"),
                jobs.c.state.in_(("READY", "RUNNING")))).scalar_one())

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by check_threads
                self.errors.append(exc)

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def check_threads(self) -> None:
        if self.errors:
            raise AssertionError(f"a load thread failed: {self.errors[0]!r}") from \
                self.errors[0]

    # -- faults -------------------------------------------------------------------------
    def kill_busiest(self) -> Kill:
        """``kill -9`` the node running the most jobs; once another node has rescued
        the jobs it left RUNNING (read after the kill: a job may end between a look and
        the kill), start it again."""
        cluster = self.cluster
        victim = cluster.busiest()
        after = cluster.max_event_id()
        killed_at = cluster.kill9(victim)
        orphans = cluster.running_on(victim)
        kill = Kill(victim, len(orphans))
        self.kills.append(kill)
        if orphans:
            wait_for(lambda: not cluster.running_on(victim, orphans), RESCUE_DEADLINE, 0.05,
                     f"the jobs {orphans} of {victim} to be rescued")
            kill.took_over = time.monotonic() - killed_at
            kill.rescued = len(cluster.rescue_events(victim, after))
        time.sleep(max(0.0, killed_at + KILL_DOWN - time.monotonic()))  # time spent down
        cluster.restart(victim)
        return kill

    # -- the end ------------------------------------------------------------------------
    def drain(self, timeout: float) -> None:
        """Until the writers are done, no consumer has lag, and every submitted job
        ended; then the submitters stop."""
        def drained() -> bool:
            self.check_threads()
            return (self.writers_done() and all(self.lag(p.name) == 0 for p in self.plans)
                    and all(self.in_flight(p.name) == 0 for p in self.plans))

        try:
            wait_for(drained, timeout, 0.2, "every partition to be consumed")
        finally:
            self._stop.set()
            for thread in self._threads:
                thread.join(30)
        self.check_threads()
        # a submitter may have sent one more job as the last lag went: it finds nothing
        wait_for(lambda: all(self.in_flight(p.name) == 0 for p in self.plans), 30, 0.2,
                 "the last consuming jobs to end")

    def close(self) -> None:
        self._stop.set()

