"""The views' store: definitions, view partitions and their state changes.

Every write of a view partition is a compare-and-set on its ``row_version`` (absent
rows count as version 0 and are inserted only if still absent): two nodes planning
the same partitions from the same reads cannot both write, the second sees
:class:`CasConflict` and plans again from what the first committed. Rows are written
in (view, key) order so that concurrent writers lock them in one order. Each state
change also writes a ``view_events`` row in the same transaction, which the tracker
hands to the view scheduling listeners in commit order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import groupby
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, Connection, String, and_, any_, bindparam, delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from jobserver.exceptions import Conflict
from jobserver.store import Transactions
from jobserver.store.bulk import json_rows
from jobserver.store.engine import store_now
from jobserver.store.epochs import fenced
from jobserver.store.models import as_utc
from jobserver.store.records import Actor
from jobserver.views.gates import release
from jobserver.views.model import StoredPartition, ViewAddress, ViewState
from jobserver.views.tables import view_events, view_partitions, views

_STATES = {state.value: state for state in ViewState}
#: Keys per statement on SQLite (its bound-parameter limit is 32,766).
SQLITE_CHUNK = 5000


class CasConflict(Conflict):
    """A view partition changed since it was read: plan again (a 409 if it reaches a
    client)."""


@dataclass(frozen=True)
class Definition:
    name: str
    spec: dict[str, Any]
    structure_checksum: str
    version_checksum: str
    spec_hash: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Change:
    """One compare-and-set write: ``expected`` row_version (0: absent) → ``values``."""

    address: ViewAddress
    expected: int
    previous: ViewState
    state: ViewState
    values: dict[str, Any]
    message: str | None = None
    bump: bool = True


@dataclass(frozen=True)
class PartitionRow:
    """A view partition as listings show it."""

    address: ViewAddress
    stored: StoredPartition
    updated_at: datetime
    message: str | None


class ViewRepository:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    @property
    def dialect(self) -> str:
        return self._tx.dialect

    # -- definitions ------------------------------------------------------------------
    def put(self, name: str, spec: dict[str, Any], structure: str, version: str,
            spec_hash: str) -> tuple[str, int]:
        """Create or replace a definition; returns (``created`` | ``updated`` |
        ``unchanged``, partitions reset). A changed structure checksum resets every
        partition of the view to RECEIVE without timestamp or checksum (Schedoscope
        drops and recreates the table)."""
        with self._tx.write() as conn:
            row = conn.execute(select(views.c.spec_hash, views.c.structure_checksum)
                               .where(views.c.name == name)).first()
            now = store_now()
            values = {"spec": spec, "structure_checksum": structure,
                      "version_checksum": version, "spec_hash": spec_hash, "updated_at": now}
            if row is None:
                conn.execute(insert(views).values(name=name, created_at=now, **values))
                return "created", 0
            if row.spec_hash == spec_hash:
                return "unchanged", 0
            conn.execute(update(views).where(views.c.name == name).values(**values))
            reset = 0 if row.structure_checksum == structure else reset_partitions(
                conn, name, "structure changed")
            return "updated", reset

    def get(self, name: str) -> Definition | None:
        with self._tx.read() as conn:
            row = conn.execute(select(views).where(views.c.name == name)).mappings().first()
        return _definition(row) if row is not None else None

    def definitions(self) -> list[Definition]:
        with self._tx.read() as conn:
            rows = conn.execute(select(views).order_by(views.c.name)).mappings().all()
        return [_definition(row) for row in rows]

    def delete(self, name: str) -> bool:
        """Drop a definition and what the store knows of its partitions; the gates of
        those in flight are discarded (:mod:`jobserver.views.gates`): no tracker will
        settle them, and their dependents must not wait for ever."""
        with self._tx.write() as conn:
            flying = conn.execute(select(view_partitions.c["values"]).where(
                view_partitions.c.view == name,
                view_partitions.c.state.in_([s.value for s in ViewState if s.in_flight])))
            if release(conn, [address_of(name, values) for (values,) in flying],
                       Actor("views")):
                self._tx.notify(conn)
            conn.execute(delete(view_partitions).where(view_partitions.c.view == name))
            return bool(conn.execute(delete(views).where(views.c.name == name)).rowcount)

    # -- partitions -------------------------------------------------------------------
    def read(self, addresses: Iterable[ViewAddress],
             conn: Connection | None = None) -> dict[ViewAddress, StoredPartition]:
        """The stored partitions among ``addresses`` (absent ones are left out): one
        statement per view (``key = ANY(array)`` on PostgreSQL)."""
        if conn is None:
            with self._tx.read() as own:
                return self.read(addresses, own)
        by_view: dict[str, dict[str, ViewAddress]] = defaultdict(dict)
        for address in addresses:
            by_view[address.name][address.key] = address
        found: dict[ViewAddress, StoredPartition] = {}
        states = _STATES
        for name, keyed in by_view.items():
            # Once per stored row of a request (100,000 for a large lattice): tuples
            # unpacked, a dict lookup for the state, no per-row function call; the
            # column type made the timestamp UTC already.
            for key, state, checksum, at, job_id, retries, version in self._rows_of(
                    conn, name, list(keyed)):
                found[keyed[key]] = StoredPartition(states[state], checksum, at, job_id,
                                                    retries, version)
        return found

    def _rows_of(self, conn: Connection, name: str, keys: list[str]) -> Iterator[Any]:
        columns = (view_partitions.c.key, view_partitions.c.state,
                   view_partitions.c.version_checksum, view_partitions.c.transformed_at,
                   view_partitions.c.job_id, view_partitions.c.retries,
                   view_partitions.c.row_version)
        if self.dialect == "postgresql":
            keys_param = bindparam("keys", keys, type_=ARRAY(String))
            # fetchall: one call for the view's rows, not one fetch per row.
            yield from conn.execute(select(*columns).where(
                view_partitions.c.view == name,
                view_partitions.c.key == any_(keys_param))).all()
            return
        for start in range(0, len(keys), SQLITE_CHUNK):
            yield from conn.execute(select(*columns).where(
                view_partitions.c.view == name,
                view_partitions.c.key.in_(keys[start:start + SQLITE_CHUNK]))).all()

    def apply(self, conn: Connection, changes: list[Change]) -> None:
        """Compare-and-set every change in (view, key) order, recording an event for
        each state change; :class:`CasConflict` (the caller's transaction rolls back)
        when any row moved since it was read. Consecutive rows never stored are
        inserted by one statement per run (a first ``materialize`` of a large lattice
        stores them all), still in that order."""
        now = clock(conn)
        events: list[dict[str, Any]] = []
        ordered = sorted(changes, key=lambda c: (c.address.name, c.address.key))
        for new_rows, run in groupby(ordered, key=lambda c: c.expected == 0):
            batch = list(run)
            if new_rows:
                self._insert_new(conn, batch, now)
            for change in batch:
                if not new_rows and not self._compare_and_set(conn, change, now):
                    raise CasConflict(f"view partition {change.address} changed meanwhile")
                if change.state is not change.previous:
                    events.append(_event(change, now))
        if events and self.dialect == "postgresql":
            json_rows(conn, "view_events_insert", events)
        elif events:
            conn.execute(insert(view_events), events)

    def _insert_new(self, conn: Connection, changes: list[Change], now: datetime) -> None:
        """Insert rows never stored; :class:`CasConflict` if any exists meanwhile."""
        maker = pg_insert if self.dialect == "postgresql" else sqlite_insert
        rows = [{"view": c.address.name, "key": c.address.key, "values": list(c.address.values),
                 "row_version": 1, "job_id": None, "retries": 0, "version_checksum": None,
                 "transformed_at": None, **c.values, "state": c.state.value,
                 "updated_at": now, "message": c.message} for c in changes]
        statement = maker(view_partitions).on_conflict_do_nothing().returning(
            view_partitions.c.key)
        # RETURNING, not rowcount: a skipped insert's rowcount is not 0 on every driver.
        inserted = conn.execute(statement, rows).all()
        if len(inserted) != len(rows):
            taken = {c.address.key for c in changes} - {row.key for row in inserted}
            raise CasConflict(f"view partition {changes[0].address.name}/{min(taken)} was "
                              "stored meanwhile")

    def _compare_and_set(self, conn: Connection, change: Change, now: datetime) -> bool:
        address = change.address
        values = dict(change.values, state=change.state.value, updated_at=now,
                      message=change.message)
        where = and_(view_partitions.c.view == address.name,
                     view_partitions.c.key == address.key,
                     view_partitions.c.row_version == change.expected)
        if not change.bump:  # a check that also locks the row until commit
            return bool(conn.execute(update(view_partitions).where(where).values(
                row_version=view_partitions.c.row_version)).rowcount)
        return bool(conn.execute(update(view_partitions).where(where).values(
            row_version=view_partitions.c.row_version + 1, **values)).rowcount)

    def set_jobs(self, conn: Connection, jobs: Mapping[ViewAddress, int]) -> None:
        """Record the jobs just submitted for rows this transaction already holds: one
        statement (PostgreSQL: the rows as one JSON document; SQLite: executemany)."""
        if not jobs:
            return
        if self.dialect == "postgresql":
            json_rows(conn, "view_partitions_set_jobs", [
                {"view": a.name, "key": a.key, "job_id": job_id} for a, job_id in jobs.items()])
            return
        conn.execute(update(view_partitions).where(
            view_partitions.c.view == bindparam("b_view"),
            view_partitions.c.key == bindparam("b_key")).values(job_id=bindparam("b_job")),
            [{"b_view": a.name, "b_key": a.key, "b_job": job_id} for a, job_id in jobs.items()])

    def invalidate(self, addresses: Iterable[ViewAddress]) -> int:
        """Put the stored ones among ``addresses`` back to RECEIVE (their timestamp and
        checksum kept: only the state says "transform at the next request"); a
        partition being transformed keeps its job. Returns how many changed."""
        wanted = list(addresses)
        with self._tx.write() as conn:
            stored = self.read(wanted, conn)
            changes = [Change(address, row.row_version, row.state, ViewState.RECEIVE,
                              {"job_id": None, "retries": 0}, "invalidated")
                       for address, row in stored.items()
                       if not row.state.in_flight and row.state is not ViewState.RECEIVE]
            self.apply(conn, changes)
        return len(changes)

    def listing(self, addresses: Iterable[ViewAddress] | None = None,
                view_names: Iterable[str] | None = None, state: ViewState | None = None,
                limit: int = 10_000) -> list[PartitionRow]:
        """Stored partitions: those of ``addresses`` or of whole views."""
        query = select(view_partitions)
        if state is not None:
            query = query.where(view_partitions.c.state == state.value)
        with self._tx.read() as conn:
            if addresses is not None:
                wanted = {(a.name, a.key): a for a in addresses}
                stored = self.read(wanted.values(), conn)
                names = sorted({a.name for a in stored})
                query = query.where(view_partitions.c.view.in_(names))
                rows = [row for row in conn.execute(query).mappings()
                        if (row["view"], row["key"]) in wanted]
            else:
                if view_names is not None:
                    query = query.where(view_partitions.c.view.in_(list(view_names)))
                rows = list(conn.execute(query.order_by(view_partitions.c.view,
                                                        view_partitions.c.key)
                                         .limit(limit)).mappings())
        rows.sort(key=lambda row: (row["view"], row["key"]))
        return [_listed(row) for row in rows[:limit]]

    def counts_by_state(self) -> dict[str, int]:
        with self._tx.read() as conn:
            return {state: int(count) for state, count in conn.execute(
                select(view_partitions.c.state, func.count()).group_by(
                    view_partitions.c.state))}

    @contextmanager
    def fenced(self, key: str, fence: int) -> Iterator[Connection]:
        """A write transaction that commits only while ``fence`` is the newest of
        ``key`` (the planner seat's lease); :class:`FencedOff` otherwise."""
        with fenced(self._tx, key, fence, "another node tracking views") as conn:
            yield conn

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        with self._tx.write() as conn:
            yield conn


def reset_partitions(conn: Connection, name: str, message: str) -> int:
    """Every partition of view ``name`` back to RECEIVE, no timestamp or checksum;
    in-flight ones keep their job (its end is tracked as usual)."""
    now = clock(conn)
    rows = conn.execute(select(view_partitions.c.key, view_partitions.c["values"],
                               view_partitions.c.state).where(
        view_partitions.c.view == name)).mappings().all()
    conn.execute(update(view_partitions).where(view_partitions.c.view == name).values(
        version_checksum=None, transformed_at=None, updated_at=now, message=message,
        row_version=view_partitions.c.row_version + 1))
    idle = [row for row in rows if not ViewState(row["state"]).in_flight]
    if idle:
        conn.execute(update(view_partitions).where(
            view_partitions.c.view == name,
            view_partitions.c.key.in_([row["key"] for row in idle])).values(
            state=ViewState.RECEIVE.value, job_id=None, retries=0))
    events = [{"view": name, "key": row["key"], "values": row["values"],
               "previous": row["state"], "new": ViewState.RECEIVE.value, "job_id": None,
               "message": message, "at": now}
              for row in idle if row["state"] != ViewState.RECEIVE.value]
    if events:
        conn.execute(insert(view_events), events)
    return len(rows)


def clock(conn: Connection) -> datetime:
    """The store's time, read once for the rows of one transaction."""
    now = as_utc(conn.execute(select(store_now())).scalar())
    assert now is not None
    return now


def address_of(name: str, values: Iterable[str | None]) -> ViewAddress:
    package, _, view = name.rpartition("/")
    return ViewAddress(package, view, tuple(values))


def _event(change: Change, now: datetime) -> dict[str, Any]:
    return {"view": change.address.name, "key": change.address.key,
            "values": list(change.address.values), "previous": change.previous.value,
            "new": change.state.value, "job_id": change.values.get("job_id"),
            "message": change.message, "at": now}


def _listed(row: Any) -> PartitionRow:
    return PartitionRow(address_of(row["view"], row["values"]),
                        StoredPartition(ViewState(row["state"]), row["version_checksum"],
                                        as_utc(row["transformed_at"]), row["job_id"],
                                        int(row["retries"]), int(row["row_version"])),
                        as_utc(row["updated_at"]), row["message"])  # type: ignore[arg-type]


def _definition(row: Any) -> Definition:
    return Definition(row["name"], row["spec"], row["structure_checksum"],
                      row["version_checksum"], row["spec_hash"],
                      as_utc(row["created_at"]), as_utc(row["updated_at"]))  # type: ignore
