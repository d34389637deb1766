"""The evaluator's side of the schedules' store: fenced reads and writes of due
schedules, schedule-jobs and evaluation records, and the event feed's cursor.

Every write happens in :meth:`EvaluatorStore.fenced`, a transaction that first checks
that the evaluator's lease is still the newest of its lock key (and, on PostgreSQL,
holds that row in share mode until it commits, so that a new holder's fence cannot
be recorded in between): an evaluator that lost its lock without noticing — paused,
partitioned, expired — has every write refused with :class:`FencedOff`. The API's
writes (``catalog``) lock the schedule row they change, as the evaluator does, so
that the two serialise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from jobserver.schedules.tables import evaluations, schedule_jobs, schedules, watches
from jobserver.store import Transactions
from jobserver.store.bulk import json_rows, update_many
from jobserver.store.epochs import fenced
from jobserver.store.feed import (Cursor, FinalEvent, final_events, head_of, load_cursor,
                                  save_cursor)
from jobserver.store.models import as_utc
from jobserver.store.tables import jobs

#: The feed cursor of the schedule evaluator's job-status triggers.
FEED = "schedules/job_status"
PENDING_STATES = ("PENDING_TRIGGER", "PENDING_CONSTRAINTS")


@dataclass
class Due:
    """An enabled schedule as the evaluator reads it."""

    id: int
    namespace: str
    name: str
    generation: int
    spec: dict[str, Any]
    trigger_state: dict[str, Any]
    enabled_at: datetime
    #: Whose submit rate its launches are charged to (:func:`owner_key`).
    owner_key: str = ""

    @property
    def qualified(self) -> str:
        return f"{self.namespace}/{self.name}"


def owner_key(owner: str | None, token_id: int | None, qualified: str) -> str:
    """The submit budget a schedule's launches take from: its owner's, as the API's
    limiter names it (a stored token by id, a config token by name), or, with no owner
    recorded, one of the schedule's own."""
    if token_id is not None:
        return f"token:{token_id}"
    return owner if owner is not None else f"schedule {qualified}"


@dataclass
class Draft:
    """A schedule-job being changed in an evaluation; ``id`` None until inserted."""

    schedule_id: int
    generation: int
    state: str
    created_at: datetime
    deadline_at: datetime
    id: int | None = None
    fire_time: datetime | None = None
    notifications: list[dict[str, Any]] = field(default_factory=list)
    trigger_state: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    next_check_at: datetime | None = None
    launch_key: str | None = None
    reason: str | None = None
    job_id: int | None = None

    def columns(self, now: datetime) -> dict[str, Any]:
        return {"schedule_id": self.schedule_id, "generation": self.generation,
                "state": self.state, "fire_time": self.fire_time,
                "notifications": self.notifications, "trigger_state": self.trigger_state,
                "properties": self.properties, "created_at": self.created_at,
                "updated_at": now, "deadline_at": self.deadline_at,
                "next_check_at": self.next_check_at, "launch_key": self.launch_key,
                "reason": self.reason, "job_id": self.job_id}


@dataclass(frozen=True)
class Evaluation:
    """One row of ``schedule_evaluations``; ``draft`` gives its schedule-job id once
    that is inserted."""

    schedule_id: int
    outcome: str
    reason: str
    draft: Draft | None = None
    fire_time: datetime | None = None
    details: dict[str, Any] = field(default_factory=dict)
    next_check_at: datetime | None = None


@dataclass(frozen=True)
class Overview:
    """The evaluator's work at a glance: the earliest next check of an enabled
    schedule or a pending schedule-job, how many are pending, whether any waits for
    its launch and whether any schedule watches job events, or datasets."""

    next_check: datetime | None
    pending: int
    launching: bool
    watches_jobs: bool
    watches_datasets: bool


@dataclass(frozen=True)
class Launch:
    """A schedule-job in PENDING_LAUNCH with what its job is made of."""

    id: int
    schedule_id: int
    generation: int
    launch_key: str
    fire_time: datetime | None
    created_at: datetime
    properties: dict[str, Any]
    spec: dict[str, Any]
    qualified: str
    owner_key: str = ""


class EvaluatorStore:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    @contextmanager
    def fenced(self, key: str, fence: int) -> Iterator[Connection]:
        """A write transaction that commits only while ``fence`` is the newest of
        ``key``; raises :class:`FencedOff` (writing nothing) otherwise."""
        with fenced(self._tx, key, fence, "another node evaluating schedules") as conn:
            yield conn

    # -- reads ----------------------------------------------------------------------
    @staticmethod
    def due_schedules(conn: Connection, now: datetime, limit: int,
                      ids: Iterable[int] | None = None) -> list[Due]:
        """Enabled schedules whose next check is due (or those of ``ids``), locked
        against the API's writes until the transaction ends."""
        query = select(schedules.c.id, schedules.c.namespace, schedules.c.name,
                       schedules.c.generation, schedules.c.spec, schedules.c.trigger_state,
                       schedules.c.enabled_at, schedules.c.created_at, schedules.c.owner,
                       schedules.c.owner_token_id)
        if ids is None:
            query = (query.where(schedules.c.enabled, schedules.c.next_check_at <= now)
                     .order_by(schedules.c.next_check_at).limit(limit))
        else:
            query = query.where(schedules.c.enabled, schedules.c.id.in_(list(ids)))
        if conn.dialect.name == "postgresql":
            query = query.with_for_update(of=schedules)
        return [Due(row.id, row.namespace, row.name, row.generation, row.spec,
                    dict(row.trigger_state or {}),
                    as_utc(row.enabled_at or row.created_at),  # type: ignore[arg-type]
                    owner_key(row.owner, row.owner_token_id, f"{row.namespace}/{row.name}"))
                for row in conn.execute(query)]

    @staticmethod
    def pending_of(conn: Connection, schedule_ids: list[int]) -> dict[int, Draft]:
        """Each schedule's schedule-job in PENDING_TRIGGER or PENDING_CONSTRAINTS."""
        if not schedule_ids:
            return {}
        rows = conn.execute(select(schedule_jobs).where(
            schedule_jobs.c.schedule_id.in_(schedule_ids),
            schedule_jobs.c.state.in_(PENDING_STATES))).mappings()
        return {row["schedule_id"]: _draft(row) for row in rows}

    @staticmethod
    def due_pending(conn: Connection, now: datetime, limit: int) -> list[Draft]:
        """Pending schedule-jobs whose constraints or deadline are due for a check."""
        rows = conn.execute(select(schedule_jobs).where(
            schedule_jobs.c.state.in_(PENDING_STATES), schedule_jobs.c.next_check_at <= now)
            .order_by(schedule_jobs.c.next_check_at).limit(limit)).mappings()
        return [_draft(row) for row in rows]

    @staticmethod
    def watchers(conn: Connection, targets: set[tuple[str, str]]) -> dict[tuple[str, str],
                                                                         list[int]]:
        """The schedules watching each (kind, target)."""
        found: dict[tuple[str, str], list[int]] = {}
        if not targets:
            return found
        names = {target for _kind, target in targets}
        rows = conn.execute(select(watches.c.kind, watches.c.target, watches.c.schedule_id)
                            .where(watches.c.target.in_(names)))
        for kind, target, schedule_id in rows:
            if (kind, target) in targets:
                found.setdefault((kind, target), []).append(schedule_id)
        return found

    @staticmethod
    def watches_kinds(conn: Connection, kinds: tuple[str, ...]) -> bool:
        """Whether any schedule watches a target of ``kinds``."""
        return conn.execute(select(watches.c.schedule_id).where(
            watches.c.kind.in_(kinds)).limit(1)).first() is not None

    @staticmethod
    def dataset_watchers(conn: Connection) -> dict[str, list[int]]:
        """The schedules watching each dataset ("namespace/name")."""
        found: dict[str, list[int]] = {}
        for target, schedule_id in conn.execute(select(watches.c.target, watches.c.schedule_id)
                                                .where(watches.c.kind == "dataset")):
            found.setdefault(target, []).append(schedule_id)
        return found

    @staticmethod
    def schedule_names(conn: Connection, ids: set[int]) -> dict[int, str]:
        if not ids:
            return {}
        rows = conn.execute(select(schedules.c.id, schedules.c.namespace, schedules.c.name)
                            .where(schedules.c.id.in_(list(ids))))
        return {row.id: f"{row.namespace}/{row.name}" for row in rows}

    @staticmethod
    def active_runs(conn: Connection, job_name: str) -> int:
        """READY or RUNNING jobs of a template (its job name), whoever launched them."""
        return int(conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.state.in_(("READY", "RUNNING")), jobs.c.name == job_name)).scalar() or 0)

    @staticmethod
    def last_success_start(conn: Connection, job_name: str) -> datetime | None:
        """When the newest successful run of a template started."""
        row = conn.execute(select(jobs.c.started_at).where(
            jobs.c.name == job_name, jobs.c.state == "SUCCEED")
            .order_by(jobs.c.id.desc()).limit(1)).first()
        return as_utc(row[0]) if row is not None else None

    def overview(self) -> Overview:
        """What the evaluator has to do, in one read transaction of index lookups."""
        with self._tx.read() as conn:
            first = conn.execute(select(func.min(schedules.c.next_check_at))
                                 .where(schedules.c.enabled)).scalar()
            pending, count = conn.execute(
                select(func.min(schedule_jobs.c.next_check_at), func.count())
                .where(schedule_jobs.c.state.in_(PENDING_STATES))).one()
            launching = conn.execute(select(schedule_jobs.c.id).where(
                schedule_jobs.c.state == "PENDING_LAUNCH").limit(1)).first() is not None
            jobs_watched = self.watches_kinds(conn, ("job", "schedule"))
            datasets_watched = self.watches_kinds(conn, ("dataset",))
        times = [as_utc(t) for t in (first, pending) if t is not None]
        return Overview(min(times) if times else None,  # type: ignore[type-var]
                        int(count), launching, jobs_watched, datasets_watched)

    def to_launch(self, limit: int) -> list[Launch]:
        with self._tx.read() as conn:
            rows = conn.execute(
                select(schedule_jobs, schedules.c.spec, schedules.c.namespace,
                       schedules.c.name, schedules.c.owner, schedules.c.owner_token_id)
                .join(schedules, schedules.c.id == schedule_jobs.c.schedule_id)
                .where(schedule_jobs.c.state == "PENDING_LAUNCH")
                .order_by(schedule_jobs.c.id).limit(limit)).mappings().all()
        return [Launch(row["id"], row["schedule_id"], row["generation"], row["launch_key"],
                       as_utc(row["fire_time"]), as_utc(row["created_at"]),  # type: ignore
                       row["properties"] or {}, row["spec"],
                       f"{row['namespace']}/{row['name']}",
                       owner_key(row["owner"], row["owner_token_id"],
                                 f"{row['namespace']}/{row['name']}")) for row in rows]

    # -- the job-status feed ------------------------------------------------------------
    @staticmethod
    def read_feed(conn: Connection, limit: int) -> tuple[Cursor, list[FinalEvent]]:
        cursor = load_cursor(conn, FEED)
        return cursor, final_events(conn, cursor, limit)

    @staticmethod
    def save_feed(conn: Connection, cursor: Cursor) -> None:
        save_cursor(conn, FEED, cursor)

    @classmethod
    def skip_feed(cls, conn: Connection) -> None:
        """Move the cursor to the head while no schedule watches job events. The
        head is read first, then the watches: a schedule whose enabling committed
        before that check keeps the cursor where it is, and one enabled after it
        was enabled after every event below the head (on PostgreSQL the head is the
        feed's horizon: transactions ended before it was read)."""
        head = head_of(conn)
        if not cls.watches_kinds(conn, ("job", "schedule")):
            save_cursor(conn, FEED, max(load_cursor(conn, FEED), head))

    # -- writes (inside fenced()) -------------------------------------------------------
    @staticmethod
    def save_schedules(conn: Connection, changes: list[tuple[int, dict[str, Any],
                                                             datetime | None]]) -> None:
        """Each schedule's new trigger state and next check time, in one batch."""
        rows = [{"id": schedule_id, "trigger_state": state, "next_check_at": next_check}
                for schedule_id, state, next_check in changes]
        if not rows:
            return
        if conn.dialect.name == "postgresql":
            json_rows(conn, "schedules_save", rows)
        else:
            update_many(conn, schedules, rows)

    @staticmethod
    def save_drafts(conn: Connection, drafts: list[Draft], now: datetime) -> None:
        """Insert the new schedule-jobs (their ids filled in) and update the others
        that are still pending (the API may have aborted one since it was read)."""
        new = [draft for draft in drafts if draft.id is None]
        old = [dict(draft.columns(now), id=draft.id) for draft in drafts if draft.id is not None]
        if new:
            rows = [draft.columns(now) for draft in new]
            if conn.dialect.name == "postgresql":
                ids = sorted(row[0] for row in json_rows(conn, "schedule_jobs_insert", rows))
            else:
                ids = list(conn.execute(insert(schedule_jobs).returning(
                    schedule_jobs.c.id, sort_by_parameter_order=True), rows).scalars())
            for draft, draft_id in zip(new, ids):
                draft.id = int(draft_id)
        if old and conn.dialect.name == "postgresql":
            json_rows(conn, "schedule_jobs_update", old)
        elif old:
            update_many(conn, schedule_jobs, old, schedule_jobs.c.state.in_(PENDING_STATES))

    @staticmethod
    def record(conn: Connection, rows: list[Evaluation], now: datetime) -> None:
        insert_evaluations(conn, [
            {"schedule_id": row.schedule_id,
             "schedule_job_id": row.draft.id if row.draft is not None else None,
             "at": now, "outcome": row.outcome, "fire_time": row.fire_time,
             "reason": row.reason, "details": row.details,
             "next_check_at": row.next_check_at} for row in rows])

    @staticmethod
    def mark_launched(conn: Connection, launched: list[tuple[Launch, int]],
                      now: datetime) -> set[int]:
        """PENDING_LAUNCH → LAUNCHED with their jobs; returns the schedule-job ids
        moved. One aborted meanwhile (disabled, updated, deleted) stays ABORTED and
        keeps the id of the job its launch made."""
        if not launched:
            return set()
        jobs_of = {launch.id: job_id for launch, job_id in launched}
        rows = [{"id": schedule_job, "job_id": job_id} for schedule_job, job_id in jobs_of.items()]
        if conn.dialect.name == "postgresql":
            moved = {int(row[0]) for row in json_rows(conn, "schedule_jobs_launched", rows,
                                                      now=now)}
        else:
            update_many(conn, schedule_jobs, [dict(row, state="LAUNCHED", reason=None,
                                                   updated_at=now) for row in rows],
                        schedule_jobs.c.state == "PENDING_LAUNCH")
            moved = {row.id for row in conn.execute(select(schedule_jobs.c.id).where(
                schedule_jobs.c.id.in_(list(jobs_of)), schedule_jobs.c.state == "LAUNCHED",
                schedule_jobs.c.job_id.isnot(None)))}
        for schedule_job in set(jobs_of) - moved:
            conn.execute(update(schedule_jobs).where(schedule_jobs.c.id == schedule_job,
                                                     schedule_jobs.c.job_id.is_(None))
                         .values(job_id=jobs_of[schedule_job]))
        return moved

    @staticmethod
    def launch_keys_taken(conn: Connection, keys: list[str]) -> dict[str, int]:
        """The schedule-jobs holding any of ``keys``, by key."""
        if not keys:
            return {}
        return dict(conn.execute(select(schedule_jobs.c.launch_key, schedule_jobs.c.id)
                                 .where(schedule_jobs.c.launch_key.in_(keys))).all())

    @staticmethod
    def free_launch_keys(conn: Connection, schedule_job_ids: list[int]) -> None:
        """Clear the launch keys of schedule-jobs whose jobs were discarded before
        they started, so that the same fire time can be launched again."""
        if schedule_job_ids:
            conn.execute(update(schedule_jobs).where(schedule_jobs.c.id.in_(schedule_job_ids))
                         .values(launch_key=None))

    @staticmethod
    def abort_launch(conn: Connection, launch: Launch, reason: str, now: datetime) -> bool:
        return bool(conn.execute(update(schedule_jobs).where(
            schedule_jobs.c.id == launch.id, schedule_jobs.c.state == "PENDING_LAUNCH")
            .values(state="ABORTED", reason=reason, updated_at=now)).rowcount)

    def prune(self, before: datetime) -> int:
        """Drop evaluation records older than ``before`` (schedules.evaluation_retention)."""
        with self._tx.write() as conn:
            return int(conn.execute(delete(evaluations).where(
                evaluations.c.at < before)).rowcount or 0)


def insert_evaluations(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert ``schedule_evaluations`` rows (dicts of their columns bar ``id``)."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        json_rows(conn, "schedule_evaluations_insert", rows)
    else:
        conn.execute(insert(evaluations), rows)


def _draft(row: Any) -> Draft:
    return Draft(schedule_id=row["schedule_id"], generation=row["generation"],
                 state=row["state"], created_at=as_utc(row["created_at"]),  # type: ignore
                 deadline_at=as_utc(row["deadline_at"]), id=row["id"],  # type: ignore
                 fire_time=as_utc(row["fire_time"]),
                 notifications=list(row["notifications"] or []),
                 trigger_state=dict(row["trigger_state"] or {}),
                 properties=dict(row["properties"] or {}),
                 next_check_at=as_utc(row["next_check_at"]), launch_key=row["launch_key"],
                 reason=row["reason"], job_id=row["job_id"])


