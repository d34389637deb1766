"""A chaos cluster running schedules: creating them through the API, finding the node
that evaluates them, and hurting that node (``kill -9``, ``SIGSTOP``).

The evaluator is found from the store, as an operator would: ``lock_epochs`` names
the node that drew the newest fence of the lock that seats it (see
:mod:`jobserver.planner`). Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import func, or_, select, text

from jobserver.planner import PLANNER_LOCK
from jobserver.schedules.tables import schedule_jobs, schedules
from jobserver.store.tables import epochs, jobs
from schedulers import ACTIVE_LOCK
from tests.chaos.cluster import ChaosCluster
from tests.helpers import wait_for
from tests.integration.nodes import Proc, descendants

#: Another node evaluates within the backend's failover bound plus this slack.
TAKEOVER_SLACK = 10.0
#: A restarted or woken node is registered alive again within this.
ALIVE_DEADLINE = 30.0
#: Every fire time up to the cutoff is handled this long after the run at the latest.
SETTLE_DEADLINE = 45.0
#: Every other session of the database, with what it waits for and its statement.
SESSIONS = ("SELECT pid, client_port, application_name, state, wait_event_type, wait_event, "
            "now() - xact_start AS in_transaction, left(query, 160) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid")
#: What a woken evaluator logs when it finds its lease superseded, and when the
#: transaction it was stopped in was ended under it (idle_in_transaction timeout).
FENCED_OFF_LOG = "schedules: fenced off"
FAILED_LOG = "schedules: a round failed"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def evaluator_key(mode: str) -> str:
    """The lock whose holder evaluates schedules in ``mode``."""
    return PLANNER_LOCK if mode == "distributed" else ACTIVE_LOCK[mode]  # type: ignore[index]


@dataclass
class Outage:
    """One fault of the evaluator and how the cluster got over it."""

    kind: str
    victim: str
    began: datetime
    successor: str | None = None
    took_over: float = 0.0          # seconds until another node drew the seat's fence
    resumed: float = 0.0            # seconds until a schedule launched a job again
    #: a stopped victim's process and the length of its log when it was stopped
    stopped: tuple[Proc, int] | None = None

    def window(self) -> tuple[datetime, datetime]:
        """From the fault until launches resumed."""
        return self.began, self.began + timedelta(seconds=self.resumed)

    def woken(self) -> str:
        """What the stopped evaluator's rounds met once woken (from its log)."""
        if self.stopped is None:
            return ""
        proc, offset = self.stopped
        text = proc.output()[offset:]
        return f" woken: fenced_off={text.count(FENCED_OFF_LOG)} failed={text.count(FAILED_LOG)}"

    def __str__(self) -> str:
        return (f"{self.kind} {self.victim}->{self.successor} took_over={self.took_over:.2f}s"
                f" resumed={self.resumed:.2f}s{self.woken()}")


class ScheduleCluster:
    def __init__(self, cluster: ChaosCluster) -> None:
        self.cluster = cluster
        self.key = evaluator_key(cluster.mode)
        self.outages: list[Outage] = []

    # -- schedules ----------------------------------------------------------------------
    def create(self, bodies: list[dict[str, Any]]) -> None:
        """Create each schedule (it starts disabled), then enable it, through the API."""
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(self._create, bodies))

    def _create(self, body: dict[str, Any]) -> None:
        api = self.cluster.api
        created = api.call("POST", "/api/v1/schedules", body, expect=(201,))
        assert created["enabled"] is False, created
        enabled = api.call("POST", f"/api/v1/schedules/default/{body['name']}/enable")
        assert enabled["enabled"] is True, enabled

    def launched_since(self, since: datetime) -> int:
        """Jobs launched by schedules (under a launch key) after ``since``."""
        with self.cluster.store.tx.read() as conn:
            return int(conn.execute(select(func.count()).select_from(jobs).where(
                jobs.c.idempotency_key.like("schedule/%"),
                jobs.c.created_at > since)).scalar() or 0)

    def evaluator(self) -> str | None:
        """The node that drew the newest fence of the evaluator's lock."""
        with self.cluster.store.tx.read() as conn:
            return conn.execute(select(epochs.c.holder).where(epochs.c.key == self.key)
                                ).scalar()

    # -- faults -------------------------------------------------------------------------
    def _victim(self, kind: str) -> Outage:
        victim = self.evaluator()
        assert victim in self.cluster.nodes, f"no evaluator to {kind}: {victim!r}"
        outage = Outage(kind, victim, utcnow())
        self.outages.append(outage)
        return outage

    def kill9_evaluator(self, down: float) -> Outage:
        """``kill -9`` the evaluator; once another node evaluates and ``down`` seconds
        have passed, start it again under the same id."""
        outage = self._victim("kill9")
        killed_at = self.cluster.kill9(outage.victim)
        self._wait_takeover(outage, killed_at, self.cluster.backend.failover_bound())
        time.sleep(max(0.0, killed_at + down - time.monotonic()))  # the time it stays down
        self.cluster.start_node(outage.victim)
        self.cluster.wait_registered(outage.victim, ALIVE_DEADLINE)
        return outage

    def sigstop_evaluator(self, pause: float) -> Outage:
        """``SIGSTOP`` the evaluator for ``pause`` seconds (past its lock session, so
        that another node takes over meanwhile), then ``SIGCONT`` it."""
        outage = self._victim("sigstop")
        proc = self.cluster.nodes[outage.victim]
        outage.stopped = (proc, len(proc.output()))
        stopped_at = self.cluster.sigstop(outage.victim)
        try:
            self._wait_takeover(outage, stopped_at,
                                self.cluster.backend.session_timeout() + 2.0)
            time.sleep(max(0.0, stopped_at + pause - time.monotonic()))  # the measured pause
        finally:
            self.cluster.sigcont(outage.victim)
        self.cluster.wait_registered(outage.victim, ALIVE_DEADLINE)
        return outage

    def _wait_takeover(self, outage: Outage, fault_at: float, bound: float) -> None:
        """Until another node holds the evaluator's seat and a schedule launched a job."""
        deadline = bound + TAKEOVER_SLACK
        def successor() -> str | None:
            holder = self.evaluator()
            return holder if holder not in (None, outage.victim) else None

        try:
            outage.successor = wait_for(successor, deadline, 0.05, f"another node than "
                                        f"{outage.victim} to evaluate schedules")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nsessions of the database:\n{self.sessions()}") \
                from None
        outage.took_over = time.monotonic() - fault_at
        wait_for(lambda: self.launched_since(outage.began), deadline, 0.05,
                 f"{outage.successor} to launch jobs after the {outage.kind}")
        outage.resumed = time.monotonic() - fault_at

    def sessions(self) -> str:
        """What each session of the nodes' PostgreSQL database is doing (says why a
        takeover is stuck)."""
        if self.cluster.store.dialect != "postgresql":
            return "(not PostgreSQL)"
        with self.cluster.store.tx.read() as conn:
            rows = conn.execute(text(SESSIONS)).all()
        return "\n".join("  " + " | ".join(str(value) for value in row) for row in rows)

    # -- the end ------------------------------------------------------------------------
    def settle(self, cutoff: datetime) -> None:
        """Until every fire time up to ``cutoff`` has been considered (each enabled
        schedule's next check is later) and no schedule-job of one is on its way."""
        def settled() -> bool:
            with self.cluster.store.tx.read() as conn:
                behind = conn.execute(select(func.count()).select_from(schedules).where(
                    schedules.c.enabled, or_(schedules.c.next_check_at.is_(None),
                                             schedules.c.next_check_at <= cutoff))).scalar()
                pending = conn.execute(select(func.count()).select_from(schedule_jobs).where(
                    schedule_jobs.c.state.not_in(("LAUNCHED", "ABORTED")),
                    schedule_jobs.c.fire_time <= cutoff)).scalar()
            return not behind and not pending

        wait_for(settled, SETTLE_DEADLINE, 0.2, f"fire times up to {cutoff} to be handled")

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used by each node's current process and its children so far."""
        tick = os.sysconf("SC_CLK_TCK")
        used = {}
        for node_id, proc in self.cluster.nodes.items():
            ticks = 0
            for pid in [proc.pid] + [info.pid for info in descendants(proc.pid)]:
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                ticks += int(stat[11]) + int(stat[12])  # utime, stime
            used[node_id] = ticks / tick
        return used
