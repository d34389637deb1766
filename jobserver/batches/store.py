"""The control table and batch runs: every read and write of them.

Composite operations (plan a run, launch a stage, settle finished stages) take the
caller's connection: they must commit together with the engine submit they go with.
Every change of a stage's status is a compare-and-set on what the writer read (its
status and launch count), so two runs, two API nodes or two trackers racing over the
same stage change it once; the loser sees zero rows and reads again. The runtime
audit's launch rows (:mod:`jobserver.batches.launches`) are opened and closed by those
same compare-and-sets, so a launch has one row and a settle closes it once.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from jobserver.batches.compose import context_key
from jobserver.batches.launches import close_launch, name_job, open_launch
from jobserver.batches.records import (BatchRecord, PlanItem, RunRecord, RunStatus,
                                       StageRecord, Status, overall)
from jobserver.batches.tables import batch_runs, batch_stages, batches
from jobserver.exceptions import NotFound
from jobserver.states import State
from jobserver.store import Transactions
from jobserver.store.engine import store_now
from jobserver.store.records import SYSTEM, Actor
from jobserver.store.tables import jobs

MAX_PAGE = 500
FINAL_JOB_STATES = (State.SUCCEED.value, State.ERROR.value, State.DISCARDED.value,
                    State.STOPPED.value)


@dataclass(frozen=True)
class Finished:
    """A RUNNING stage whose job has ended: what the tracker settles."""

    batch_id: int
    stage: str
    job_id: int
    job_state: State
    error: str | None
    finished_at: datetime | None
    launch: int  # the stage's runs: the launch its job belongs to


@dataclass(frozen=True)
class BatchFilter:
    system: str | None = None
    location: str | None = None
    status: Status | None = None
    since: date | None = None
    until: date | None = None
    limit: int = 100


class BatchStore:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction for the composite operations below."""
        with self._tx.write() as conn:
            yield conn

    # -- batches ------------------------------------------------------------------------
    @staticmethod
    def last_business_date(conn: Connection, system: str, location: str,
                           context: dict[str, str]) -> date | None:
        found = conn.execute(select(func.max(batches.c.business_date)).where(
            batches.c.system == system, batches.c.location == location,
            batches.c.context_key == context_key(context))).scalar()
        return None if found is None else _date(found)

    @staticmethod
    def create_batches(conn: Connection, system: str, location: str, context: dict[str, str],
                       dates: builtins.list[date], stages: builtins.list[str]) -> int:
        """Add a batch per date not in the table yet, its stages NOT_STARTED; the count."""
        key = context_key(context)
        existing = {_date(d) for d in conn.execute(select(batches.c.business_date).where(
            batches.c.system == system, batches.c.location == location,
            batches.c.context_key == key, batches.c.business_date.in_(dates))).scalars()}
        added = 0
        for day in dates:
            if day in existing:
                continue
            batch_id = conn.execute(insert(batches).values(
                system=system, location=location, context=dict(context), context_key=key,
                business_date=day, status=Status.NOT_STARTED.value, created_at=store_now(),
                updated_at=store_now()).returning(batches.c.id)).scalar_one()
            conn.execute(insert(batch_stages).values(updated_at=store_now()), [
                {"batch_id": batch_id, "stage": stage, "position": index,
                 "status": Status.NOT_STARTED.value, "runs": 0}
                for index, stage in enumerate(stages)])
            added += 1
        return added

    def open_batches(self, conn: Connection, system: str, location: str,
                     context: dict[str, str],
                     day: date | None = None) -> builtins.list[BatchRecord]:
        """The batches not SUCCESS yet (or the one of ``day``), earliest first."""
        query = select(batches).where(batches.c.system == system,
                                      batches.c.location == location,
                                      batches.c.context_key == context_key(context))
        if day is not None:
            query = query.where(batches.c.business_date == day)
        else:
            query = query.where(batches.c.status != Status.SUCCESS.value)
        rows = conn.execute(query.order_by(batches.c.business_date)).mappings().all()
        return self._with_stages(conn, rows)

    @staticmethod
    def _with_stages(conn: Connection, rows: Any) -> builtins.list[BatchRecord]:
        ids = [row["id"] for row in rows]
        stages: dict[int, builtins.list[StageRecord]] = {i: [] for i in ids}
        if ids:
            for row in conn.execute(select(batch_stages).where(batch_stages.c.batch_id.in_(ids))
                                    .order_by(batch_stages.c.position)).mappings():
                stages[row["batch_id"]].append(StageRecord.from_row(row))
        return [BatchRecord.from_row(row, stages[row["id"]]) for row in rows]

    def list(self, where: BatchFilter) -> builtins.list[BatchRecord]:
        """Batches matching ``where``, newest business date first."""
        query = select(batches)
        for column, value in ((batches.c.system, where.system),
                              (batches.c.location, where.location)):
            if value is not None:
                query = query.where(column == value)
        if where.status is not None:
            query = query.where(batches.c.status == where.status.value)
        if where.since is not None:
            query = query.where(batches.c.business_date >= where.since)
        if where.until is not None:
            query = query.where(batches.c.business_date <= where.until)
        limit = max(1, min(where.limit, MAX_PAGE))
        query = query.order_by(batches.c.business_date.desc(), batches.c.id.desc()).limit(limit)
        with self._tx.read() as conn:
            return self._with_stages(conn, conn.execute(query).mappings().all())

    def get(self, batch_id: int) -> BatchRecord:
        """One batch with its stages; :class:`NotFound` if none."""
        with self._tx.read() as conn:
            rows = conn.execute(select(batches).where(batches.c.id == batch_id)).mappings().all()
            if not rows:
                raise NotFound(f"batch {batch_id} does not exist", {"batch_id": batch_id})
            return self._with_stages(conn, rows)[0]

    def business_dates(self, system: str | None = None, location: str | None = None,
                       before: date | None = None, limit: int = 14) -> builtins.list[date]:
        """The newest ``limit`` business dates that have a batch (of ``system`` and
        ``location`` when given), before ``before`` when given, newest first."""
        query = select(batches.c.business_date).distinct()
        for column, value in ((batches.c.system, system), (batches.c.location, location)):
            if value is not None:
                query = query.where(column == value)
        if before is not None:
            query = query.where(batches.c.business_date < before)
        query = query.order_by(batches.c.business_date.desc()).limit(max(1, min(limit, MAX_PAGE)))
        with self._tx.read() as conn:
            return [_date(day) for day in conn.execute(query).scalars()]

    # -- stages -------------------------------------------------------------------------
    @staticmethod
    def stage(conn: Connection, batch_id: int, stage: str) -> StageRecord:
        row = conn.execute(select(batch_stages).where(
            batch_stages.c.batch_id == batch_id, batch_stages.c.stage == stage)).mappings().first()
        if row is None:
            raise NotFound(f"batch {batch_id} has no stage {stage!r}", {"stage": stage})
        return StageRecord.from_row(row)

    def claim_stage(self, conn: Connection, seen: StageRecord, run_id: int) -> bool:
        """Mark the stage RUNNING for ``run_id`` if it is still as ``seen``: the one
        compare-and-set that makes a launch happen once, and opens its audit row."""
        won = conn.execute(update(batch_stages).where(
            batch_stages.c.batch_id == seen.batch_id, batch_stages.c.stage == seen.stage,
            batch_stages.c.status == seen.status.value, batch_stages.c.runs == seen.runs)
            .values(status=Status.RUNNING.value, runs=seen.runs + 1, run_id=run_id,
                    message=None, started_at=store_now(), finished_at=None,
                    updated_at=store_now())).rowcount == 1
        if won:
            open_launch(conn, seen.batch_id, seen.stage, seen.runs + 1, run_id, seen.job_id)
            self._refresh_batch(conn, seen.batch_id)
        return won

    @staticmethod
    def set_stage_job(conn: Connection, batch_id: int, stage: str, job_id: int) -> None:
        """The stage's newest launch (and its audit row) runs engine job ``job_id``."""
        conn.execute(update(batch_stages).where(batch_stages.c.batch_id == batch_id,
                                                batch_stages.c.stage == stage)
                     .values(job_id=job_id, updated_at=store_now()))
        name_job(conn, batch_id, stage, job_id)

    @staticmethod
    def finished_stages(conn: Connection, limit: int = 200) -> builtins.list[Finished]:
        """RUNNING stages whose job has ended (SUCCEED, ERROR, DISCARDED, STOPPED)."""
        rows = conn.execute(select(batch_stages.c.batch_id, batch_stages.c.stage,
                                   jobs.c.id, jobs.c.state, jobs.c.error, jobs.c.finished_at,
                                   batch_stages.c.runs)
                            .join(jobs, jobs.c.id == batch_stages.c.job_id)
                            .where(batch_stages.c.status == Status.RUNNING.value,
                                   jobs.c.state.in_(FINAL_JOB_STATES)).limit(limit)).all()
        return [Finished(int(r[0]), r[1], int(r[2]), State(r[3]), r[4], r[5], int(r[6]))
                for r in rows]

    def settle(self, conn: Connection, done: Finished) -> bool:
        """The stage's status from its job's end, its launch closed in the audit;
        False if it moved on meanwhile."""
        status = Status.SUCCESS if done.job_state is State.SUCCEED else Status.FAILED
        message = None if status is Status.SUCCESS else (
            done.error or f"the stage's job {done.job_id} ended {done.job_state.value}")
        changed = conn.execute(update(batch_stages).where(
            batch_stages.c.batch_id == done.batch_id, batch_stages.c.stage == done.stage,
            batch_stages.c.status == Status.RUNNING.value,
            batch_stages.c.job_id == done.job_id, batch_stages.c.runs == done.launch).values(
                status=status.value, message=message, finished_at=done.finished_at,
                updated_at=store_now())).rowcount == 1
        if changed:
            close_launch(conn, done.batch_id, done.stage, done.launch, done.job_id, status,
                         message, done.finished_at)
            self._refresh_batch(conn, done.batch_id)
        return changed

    @staticmethod
    def _refresh_batch(conn: Connection, batch_id: int) -> None:
        statuses = [Status(s) for s in conn.execute(select(batch_stages.c.status).where(
            batch_stages.c.batch_id == batch_id)).scalars()]
        conn.execute(update(batches).where(batches.c.id == batch_id).values(
            status=overall(statuses).value, updated_at=store_now()))

    # -- runs ---------------------------------------------------------------------------
    @staticmethod
    def insert_run(conn: Connection, system: str, location: str, context: dict[str, str],
                   stage: str | None, plan: builtins.list[PlanItem], status: RunStatus,
                   message: str | None = None, requester: Actor = SYSTEM) -> int:
        final = status is not RunStatus.RUNNING
        return int(conn.execute(insert(batch_runs).values(
            requested_by=requester.name[:200], requested_by_token_id=requester.token_id,
            system=system, location=location, context=dict(context), stage=stage,
            status=status.value, plan=[item.as_json() for item in plan], position=0,
            message=message, created_at=store_now(), updated_at=store_now(),
            finished_at=store_now() if final else None).returning(batch_runs.c.id)).scalar_one())

    @staticmethod
    def run_in(conn: Connection, run_id: int) -> RunRecord:
        row = conn.execute(select(batch_runs).where(batch_runs.c.id == run_id)).mappings().first()
        if row is None:
            raise NotFound(f"batch run {run_id} does not exist", {"run_id": run_id})
        return RunRecord.from_row(row)

    def run(self, run_id: int) -> RunRecord:
        with self._tx.read() as conn:
            return self.run_in(conn, run_id)

    @staticmethod
    def active_runs(conn: Connection) -> builtins.list[int]:
        return [int(i) for i in conn.execute(select(batch_runs.c.id).where(
            batch_runs.c.status == RunStatus.RUNNING.value).order_by(batch_runs.c.id)).scalars()]

    @staticmethod
    def move_run(conn: Connection, run: RunRecord, position: int, status: RunStatus,
                 message: str | None = None) -> bool:
        """Compare-and-set the run's progress from what ``run`` read."""
        values: dict[str, Any] = {"position": position, "status": status.value,
                                  "updated_at": store_now()}
        if status is not RunStatus.RUNNING:
            values.update(finished_at=store_now(), message=message)
        return conn.execute(update(batch_runs).where(
            batch_runs.c.id == run.id, batch_runs.c.position == run.position,
            batch_runs.c.status == RunStatus.RUNNING.value).values(**values)).rowcount == 1

    def progress(self) -> builtins.list[tuple[str, str, date | None, int]]:
        """Per system and location: the newest SUCCESS business date and how many
        batches after it are not SUCCESS (the lag in periods)."""
        with self._tx.read() as conn:
            newest = dict(((s, loc), _date(d)) for s, loc, d in conn.execute(
                select(batches.c.system, batches.c.location, func.max(batches.c.business_date))
                .where(batches.c.status == Status.SUCCESS.value)
                .group_by(batches.c.system, batches.c.location)))
            found = []
            for system, location in conn.execute(select(batches.c.system, batches.c.location)
                                                 .distinct()).all():
                best = newest.get((system, location))
                query = select(func.count()).where(batches.c.system == system,
                                                   batches.c.location == location,
                                                   batches.c.status != Status.SUCCESS.value)
                if best is not None:
                    query = query.where(batches.c.business_date > best)
                found.append((system, location, best, int(conn.execute(query).scalar_one())))
            return found


def _date(value: date | str) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)
