"""What users do with schedules: create, update, enable, disable, delete and read.

The life cycle is CDAP's. A schedule is created *disabled*. Enabling it starts its
clock afresh (the time it spent disabled is not caught up). Disabling it aborts every
schedule-job not yet launched (engine jobs already launched run on). An update is a
delete and a create in one: the generation goes up, the evaluator's trigger state is
reset and pending schedule-jobs are aborted, but the enabled flag stays (an enabled
schedule's time triggers count from the update). Deleting disables, then removes the
schedule with its schedule-jobs, evaluations and watches. A new or changed spec whose
triggers name a dataset, consumer or schedule that does not exist is refused
(:mod:`jobserver.schedules.references`). Enabling (or an update while enabled)
records where the partition feed stands, from which its partition triggers count
(:class:`~jobserver.schedules.partitions.Since`).

Every write is one transaction that first locks the schedule's row (``FOR UPDATE`` on
PostgreSQL; SQLite's write transactions are serial anyway). The evaluator locks the
same row before it changes a schedule's schedule-jobs, so the two never interleave:
a schedule-job is either aborted here or moved on there, never both. Every abort is
recorded as an evaluation with its reason.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from sqlalchemy import Connection, RowMapping, delete, insert, select, update

from jobserver.exceptions import Conflict, ConstraintViolation, NotFound
from jobserver.resources import (UNCHANGED, find_row, found_row, name_page, next_after,
                                 page_size, plan_put)
from jobserver.schedules.records import (ABORTED, LAUNCHED, PENDING_STATES, EvaluationRecord,
                                         ScheduleJobRecord, ScheduleRecord)
from jobserver.schedules.partitions import since_state
from jobserver.schedules.references import check_references
from jobserver.schedules.spec import ScheduleSpec, load_spec, spec_hash, watch_targets
from jobserver.schedules.store import insert_evaluations
from jobserver.schedules.tables import evaluations, schedule_jobs, schedules, watches
from jobserver.store import Transactions
from jobserver.store.jobs import discard_waiting
from jobserver.store.records import Actor

#: The reasons recorded on schedule-jobs aborted by a user's action.
DISABLED, UPDATED_REASON = "schedule disabled", "schedule updated"
#: Jobs launched ahead have fire times at most ``schedules.lead_time`` (≤ 300 s)
#: from now; a wider bound covers clocks apart.
LEAD_BOUND = timedelta(minutes=10)


def utcnow() -> datetime:
    """The schedules' clock; the evaluator reads the same one."""
    return datetime.now(timezone.utc)


class PutResult(NamedTuple):
    """What :meth:`ScheduleCatalog.put` did or, on a dry run, would do: the schedule
    after the put (on a dry run: as it is, None if it does not exist yet),
    ``created``, ``updated`` or ``unchanged``, and the top-level spec fields that
    change (with ``enabled`` when the flag changes)."""

    schedule: ScheduleRecord | None
    change: str
    changed: builtins.list[str]


class ScheduleCatalog:
    def __init__(self, tx: Transactions, clock: Callable[[], datetime] = utcnow) -> None:
        self._tx = tx
        self._clock = clock

    # -- writes -----------------------------------------------------------------------
    def create(self, spec: ScheduleSpec, enabled: bool = False, *,
               owner: Actor | None = None) -> ScheduleRecord:
        """Store a new schedule (disabled unless ``enabled``) saved by ``owner``;
        :class:`Conflict` if the namespace already has one of that name."""
        try:
            with self._tx.write() as conn:
                if find_row(conn, schedules, namespace=spec.namespace,
                            name=spec.name) is not None:
                    raise _exists(spec)
                check_references(conn, spec)
                schedule_id = self._insert(conn, spec, enabled, owner)
                return self._get(conn, schedule_id)
        except ConstraintViolation:
            raise _exists(spec) from None  # a concurrent create won the insert

    def update(self, spec: ScheduleSpec) -> ScheduleRecord:
        """Replace the spec of an existing schedule (see the module's docstring)."""
        with self._tx.write() as conn:
            row = self._locked(conn, spec.namespace, spec.name)
            check_references(conn, spec)
            self._replace(conn, row, spec)
            return self._get(conn, row["id"])

    def put(self, spec: ScheduleSpec, enabled: bool | None = None,
            dry_run: bool = False, may_switch: Callable[[], None] | None = None,
            owner: Actor | None = None) -> PutResult:
        """Create or update to match ``spec``, and enable or disable to match
        ``enabled`` (None: keep the flag; a new schedule is then disabled). Nothing is
        written when nothing changes, or on a ``dry_run``. ``may_switch`` is called,
        under the row's lock, when the put would switch the schedule on or off (a
        new one created enabled included): it raises when the caller may not. A new or
        changed spec records ``owner`` as the schedule's owner."""
        document, digest = spec.model_dump(mode="json"), spec_hash(spec)
        try:
            with self._tx.read() if dry_run else self._tx.write() as conn:
                row = find_row(conn, schedules, not dry_run, namespace=spec.namespace,
                               name=spec.name)
                change, changed = plan_put(row, document, digest, enabled)
                if may_switch is not None and ("enabled" in changed
                                               or (row is None and enabled)):
                    may_switch()
                if not dry_run and (row is None or digest != row["spec_hash"]):
                    check_references(conn, spec)
                if row is None and not dry_run:
                    return PutResult(self._get(conn, self._insert(conn, spec, bool(enabled),
                                                                  owner)), change, changed)
                if row is None or dry_run or change == UNCHANGED:
                    return PutResult(None if row is None else self._get(conn, row["id"]),
                                     change, changed)
                if digest != row["spec_hash"]:
                    self._replace(conn, row, spec, owner)
                if enabled is not None and enabled != row["enabled"]:
                    self._set_enabled(conn, row["id"], enabled, spec)
                return PutResult(self._get(conn, row["id"]), change, changed)
        except ConstraintViolation:
            raise _exists(spec) from None

    def enable(self, namespace: str, name: str) -> ScheduleRecord:
        """Enable: time triggers count from now on. Enabling an enabled schedule
        changes nothing."""
        with self._tx.write() as conn:
            row = self._locked(conn, namespace, name)
            if not row["enabled"]:
                self._set_enabled(conn, row["id"], True, load_spec(row["spec"]))
            return self._get(conn, row["id"])

    def disable(self, namespace: str, name: str) -> ScheduleRecord:
        """Disable, aborting every schedule-job not yet launched."""
        with self._tx.write() as conn:
            row = self._locked(conn, namespace, name)
            self._set_enabled(conn, row["id"], False)
            return self._get(conn, row["id"])

    def delete(self, namespace: str, name: str) -> None:
        """Remove the schedule and everything recorded about it: its schedule-jobs,
        pending ones included, evaluations and watches go with its row (ON DELETE
        CASCADE), which amounts to disabling it first. Engine jobs it launched run on,
        but for those launched ahead that may not start yet, which are discarded."""
        with self._tx.write() as conn:
            row = self._locked(conn, namespace, name)  # waits out an evaluator's round
            self._launched_ahead(conn, row["id"], "schedule deleted")
            conn.execute(delete(schedules).where(schedules.c.id == row["id"]))

    # -- reads ------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> ScheduleRecord:
        """The schedule with its pending schedule-job; :class:`NotFound` if none."""
        with self._tx.read() as conn:
            return self._get(conn, self._locked(conn, namespace, name, lock=False)["id"])

    def list(self, namespace: str | None = None, enabled: bool | None = None,
             limit: int = 50, after: tuple[str, str] | None = None,
             ) -> tuple[builtins.list[ScheduleRecord], tuple[str, str] | None]:
        """Ordered by (namespace, name); returns the page and the ``after`` of the next
        page (None on the last)."""
        limit = page_size(limit)
        query = name_page(schedules, limit, namespace, after)
        if enabled is not None:
            query = query.where(schedules.c.enabled == enabled)
        with self._tx.read() as conn:
            rows = conn.execute(query).mappings().all()
            page = rows[:limit]
            pending = self._pending(conn, [row["id"] for row in page])
        records = [ScheduleRecord.from_row(row, pending.get(row["id"])) for row in page]
        return records, next_after(rows, limit)

    def schedule_jobs(self, namespace: str, name: str, state: str | None = None,
                      limit: int = 50, before_id: int | None = None,
                      ) -> tuple[builtins.list[ScheduleJobRecord], int | None]:
        """The schedule's schedule-jobs, newest first; returns the page and the
        ``before_id`` of the next page (None on the last)."""
        table = schedule_jobs
        with self._tx.read() as conn:
            schedule_id = self._locked(conn, namespace, name, lock=False)["id"]
            query = select(table).where(table.c.schedule_id == schedule_id)
            if state is not None:
                query = query.where(table.c.state == state)
            rows = _page(conn, query, table.c.id, limit, before_id)
        return ([ScheduleJobRecord.from_row(row) for row in rows[:limit]],
                _next_id(rows, limit))

    def evaluations(self, namespace: str, name: str, limit: int = 50,
                    before_id: int | None = None,
                    ) -> tuple[builtins.list[EvaluationRecord], int | None]:
        """The schedule's evaluations, newest first, paged like :meth:`schedule_jobs`."""
        table = evaluations
        with self._tx.read() as conn:
            schedule_id = self._locked(conn, namespace, name, lock=False)["id"]
            query = select(table).where(table.c.schedule_id == schedule_id)
            rows = _page(conn, query, table.c.id, limit, before_id)
        return [EvaluationRecord.from_row(row) for row in rows[:limit]], _next_id(rows, limit)

    # -- inside a transaction -----------------------------------------------------------
    @staticmethod
    def _locked(conn: Connection, namespace: str, name: str, lock: bool = True) -> RowMapping:
        missing = NotFound(f"schedule {namespace}/{name} does not exist",
                           {"namespace": namespace, "name": name})
        return found_row(conn, schedules, missing, lock, namespace=namespace, name=name)

    def _insert(self, conn: Connection, spec: ScheduleSpec, enabled: bool,
                owner: Actor | None) -> int:
        now = self._clock()
        schedule_id = conn.execute(insert(schedules).values(
            namespace=spec.namespace, name=spec.name, generation=1,
            spec=spec.model_dump(mode="json"), spec_hash=spec_hash(spec), enabled=enabled,
            trigger_state=since_state(conn, spec) if enabled else {},
            next_check_at=now if enabled else None, created_at=now,
            updated_at=now, enabled_at=now if enabled else None, **_owner(owner),
        ).returning(schedules.c.id)).scalar_one()
        self._watch(conn, schedule_id, spec)
        return int(schedule_id)

    def _replace(self, conn: Connection, row: RowMapping, spec: ScheduleSpec,
                 owner: Actor | None = None) -> None:
        """An update: a new generation with a fresh trigger state; pending
        schedule-jobs of the old one are aborted. As for a new schedule, time
        triggers count from now: the evaluator's cursors start at ``enabled_at``."""
        now = self._clock()
        self._abort_pending(conn, row["id"], UPDATED_REASON)
        conn.execute(update(schedules).where(schedules.c.id == row["id"]).values(
            generation=schedules.c.generation + 1, spec=spec.model_dump(mode="json"),
            spec_hash=spec_hash(spec),
            trigger_state=since_state(conn, spec) if row["enabled"] else {},
            next_check_at=now if row["enabled"] else None, updated_at=now,
            enabled_at=now if row["enabled"] else row["enabled_at"], **_owner(owner)))
        self._watch(conn, row["id"], spec)

    def _set_enabled(self, conn: Connection, schedule_id: int, enabled: bool,
                     spec: ScheduleSpec | None = None) -> None:
        """Enable (a fresh trigger state: the disabled period is not caught up, and
        partition triggers count what commits after this transaction) or disable
        (abort what is pending; nothing is checked until enabled again). Enabling
        needs the schedule's ``spec``."""
        now = self._clock()
        values: dict[str, Any] = {"enabled": enabled, "updated_at": now}
        if enabled:
            assert spec is not None
            values.update(enabled_at=now, trigger_state=since_state(conn, spec),
                          next_check_at=now)
        else:
            values.update(next_check_at=None)
            self._abort_pending(conn, schedule_id, DISABLED)
        conn.execute(update(schedules).where(schedules.c.id == schedule_id).values(**values))

    def _abort_pending(self, conn: Connection, schedule_id: int, reason: str) -> int:
        """Abort every schedule-job of the schedule not yet launched, and every one
        launched ahead whose job may not start yet (that job is discarded), each
        recorded as an evaluation; returns how many. The caller holds the
        schedule's lock."""
        table = schedule_jobs
        rows: builtins.list[tuple[int, str, Any, int | None]] = [
            (row.id, row.state, row.fire_time, None) for row in conn.execute(
            select(table.c.id, table.c.state, table.c.fire_time).where(
                table.c.schedule_id == schedule_id, table.c.state.in_(PENDING_STATES)))]
        rows += self._launched_ahead(conn, schedule_id, reason)
        if not rows:
            return 0
        now = self._clock()
        conn.execute(update(table).where(table.c.id.in_([row[0] for row in rows]))
                     .values(state=ABORTED, reason=reason, next_check_at=None,
                             updated_at=now))
        insert_evaluations(conn, [
            {"schedule_id": schedule_id, "schedule_job_id": sj_id, "at": now,
             "outcome": "aborted", "fire_time": fire_time,
             "reason": reason if job_id is None else f"{reason}; job {job_id} discarded "
                                                     "before its fire time",
             "details": {"from_state": state, **({"job_id": job_id} if job_id else {})},
             "next_check_at": None}
            for sj_id, state, fire_time, job_id in rows])
        return len(rows)

    def _launched_ahead(self, conn: Connection, schedule_id: int,
                        reason: str) -> builtins.list[tuple[int, str, Any, int]]:
        """The schedule's LAUNCHED schedule-jobs whose jobs were launched ahead and
        may not start yet, those jobs discarded (``schedules.lead_time``) and the
        launch keys freed, so that enabling the schedule again before such a fire
        time launches it anew."""
        table = schedule_jobs
        recent = conn.execute(select(table.c.id, table.c.fire_time, table.c.job_id).where(
            table.c.schedule_id == schedule_id, table.c.state == LAUNCHED,
            table.c.fire_time > self._clock() - LEAD_BOUND)).all()
        discarded = set(discard_waiting(conn, [row.job_id for row in recent if row.job_id],
                                        f"{reason} before its fire time"))
        found = [(row.id, LAUNCHED, row.fire_time, row.job_id) for row in recent
                 if row.job_id in discarded]
        if found:  # their launch keys are free, as their jobs' are: see discard_waiting
            conn.execute(update(table).where(table.c.id.in_([row[0] for row in found]))
                         .values(launch_key=None))
        return found

    @staticmethod
    def _watch(conn: Connection, schedule_id: int, spec: ScheduleSpec) -> None:
        conn.execute(delete(watches).where(watches.c.schedule_id == schedule_id))
        targets = sorted(watch_targets(spec))
        if targets:
            conn.execute(insert(watches), [{"schedule_id": schedule_id, "kind": kind,
                                            "target": target} for kind, target in targets])

    def _get(self, conn: Connection, schedule_id: int) -> ScheduleRecord:
        row = conn.execute(select(schedules).where(schedules.c.id == schedule_id)
                           ).mappings().one()
        return ScheduleRecord.from_row(row, self._pending(conn, [schedule_id]).get(schedule_id))

    @staticmethod
    def _pending(conn: Connection,
                 schedule_ids: builtins.list[int]) -> dict[int, ScheduleJobRecord]:
        """Each schedule's newest schedule-job not yet launched nor aborted."""
        if not schedule_ids:
            return {}
        rows = conn.execute(select(schedule_jobs).where(
            schedule_jobs.c.schedule_id.in_(schedule_ids),
            schedule_jobs.c.state.in_(PENDING_STATES)).order_by(schedule_jobs.c.id)
        ).mappings().all()
        return {row["schedule_id"]: ScheduleJobRecord.from_row(row) for row in rows}


def _exists(spec: ScheduleSpec) -> Conflict:
    return Conflict(f"schedule {spec.namespace}/{spec.name} already exists",
                    {"field": "name", "namespace": spec.namespace, "name": spec.name})


def _owner(owner: Actor | None) -> dict[str, Any]:
    """The owner columns of a schedule saved by ``owner``."""
    return {"owner": None if owner is None else owner.name[:200],
            "owner_token_id": None if owner is None else owner.token_id}


def _page(conn: Connection, query: Any, id_column: Any, limit: int,
          before_id: int | None) -> builtins.list[RowMapping]:
    """Up to ``limit`` + 1 rows, newest first (the extra one tells that more follow)."""
    limit = page_size(limit)
    if before_id is not None:
        query = query.where(id_column < before_id)
    return list(conn.execute(query.order_by(id_column.desc()).limit(limit + 1)).mappings())


def _next_id(rows: builtins.list[RowMapping], limit: int) -> int | None:
    limit = page_size(limit)
    return int(rows[limit - 1]["id"]) if len(rows) > limit else None


__all__ = ["PutResult", "ScheduleCatalog"]
