"""``materialize PATTERN``: parse → instantiate → read → plan → write.

Planning runs on whichever node takes the request. The write is one transaction: a
compare-and-set of every row the plan changes (:meth:`ViewRepository.apply`), one
engine job per TRANSFORM submitted with ``submit_keyed`` on the same connection, and
the jobs' ids on their rows. A job whose upstream partitions are transformed or
joined waits (``after``, ``when: "done"``) for their *gates*
(:mod:`jobserver.views.gates`), which the tracker releases once each upstream is
materialized or failed after its retries: a failed dependency does not stop its
dependents, a retrying one holds them. A job's idempotency key names the partition
and the row version it was planned from (``view/<name>/<key>/<row_version>``), so
two nodes planning the same partition from the same read make one job; the one
whose compare-and-set then fails reads again and plans again (at most
:data:`MAX_REPLANS` times), now joining that job.
"""

from __future__ import annotations

import gc
import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from jobserver.exceptions import Conflict, InvalidRequest
from jobserver.requester import PLANNER_ITSELF, Requester
from jobserver.spec import AfterSpec, JobSpec, Policy, validate_job
from jobserver.store import Store
from jobserver.store.feed import start_cursor
from jobserver.store.jobs import KeyedSubmit
from jobserver.store.records import Actor
from jobserver.views.lattice import instantiate
from jobserver.views.patterns import parse_pattern
from jobserver.views.planner import plan
from jobserver.views.repos import view_repository
from jobserver.views.spec import load_view
from jobserver.views.templates import render_job
from jobserver.views.data import DataTimes
from jobserver.views.gates import make_gates, release
from jobserver.views.model import Action, Decision, Mode, StoredPartition, ViewAddress, ViewState
from jobserver.views.store import CasConflict, Change

log = logging.getLogger(__name__)

#: How many times a request plans again after losing a compare-and-set.
MAX_REPLANS = 5
#: The jobs table's idempotency keys are at most this long.
KEY_LIMIT = 200
#: Who submits view jobs (``jobs.submitted_by``).
VIEWS = Actor("views")
#: The view tracker's feed of final job events (:mod:`jobserver.views.tracker`).
JOBS_FEED = "views/jobs"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Outcome:
    """What one request decided and, unless planned only, the jobs it made or joined."""

    decisions: list[Decision]
    jobs: dict[ViewAddress, int] = field(default_factory=dict)
    planned_only: bool = False
    attempts: int = 1


def job_key(address: ViewAddress, row_version: int) -> str:
    """The idempotency key of the job transforming ``address`` planned from
    ``row_version`` (0: never stored)."""
    key = f"view/{address.path}/{row_version}"
    if len(key) <= KEY_LIMIT:
        return key
    return "view/" + hashlib.sha256(key.encode()).hexdigest()


class Materializer:
    def __init__(self, store: Store, policy: Policy,
                 clock: Callable[[], datetime] = utcnow,
                 data_time: Callable[[Mapping[str, Any]], Callable[[ViewAddress],
                                                                    datetime | None]]
                 | None = None,
                 render: Callable[..., JobSpec] = render_job,
                 parse: Callable[[dict[str, Any]], Any] = load_view,
                 data_root: Path | None = None) -> None:
        self._store = store
        self._repository = view_repository(store)
        self._render = render
        self._parse = parse
        self.policy = policy
        self._clock = clock
        self._data_time = data_time or (lambda views: DataTimes(store, views, data_root))
        self._specs: dict[tuple[str, str], Any] = {}

    def definitions(self) -> dict[str, Any]:
        """Every stored definition as the planning side's spec, parsed once per
        version."""
        found: dict[str, Any] = {}
        for definition in self._repository.definitions():
            cache_key = (definition.name, definition.spec_hash)
            if cache_key not in self._specs:
                self._specs[cache_key] = self._parse(definition.spec)
            found[definition.name] = self._specs[cache_key]
        return found

    def addresses(self, pattern: str) -> list[ViewAddress]:
        """The partitions ``pattern`` addresses, each checked against its view (422
        naming a partition of an unknown view or with values that do not fit)."""
        views = self.definitions()
        return instantiate(views, parse_pattern(pattern), recursive=False).order

    def materialize(self, pattern: str, mode: Mode, plan_only: bool = False,
                    requester: Requester = PLANNER_ITSELF) -> Outcome:
        return self.run(parse_pattern(pattern), mode, plan_only, requester)

    def run(self, addresses: list[ViewAddress], mode: Mode, plan_only: bool = False,
            requester: Requester = PLANNER_ITSELF) -> Outcome:
        """Plan ``addresses`` and, unless ``plan_only``, carry the plan out for
        ``requester``: the jobs it creates are charged to its submit budget first (a
        429 then writes nothing) and name it as their submitter."""
        with collector_paused():
            return self._run(addresses, mode, plan_only, requester)

    def _run(self, addresses: list[ViewAddress], mode: Mode, plan_only: bool,
             requester: Requester) -> Outcome:
        views = self.definitions()
        recursive = mode not in (Mode.TRANSFORM_ONLY, Mode.SET_ONLY)
        lattice = instantiate(views, addresses, recursive=recursive)
        data_time = self._data_time(views)
        for attempt in range(1, MAX_REPLANS + 1):
            stored = self._repository.read(lattice.order)
            decisions = plan(lattice, views, stored, mode, self._clock(), data_time)
            if plan_only:
                return Outcome(decisions, planned_only=True)
            if attempt == 1:  # a re-plan plans the same partitions: charged once
                requester.charge(sum(d.action is Action.TRANSFORM for d in decisions))
            try:
                return Outcome(decisions, self.write(views, decisions, stored,
                                                     requester.on_behalf(VIEWS.name)),
                               attempts=attempt)
            except CasConflict as exc:
                log.info("materialize: %s; planning again (attempt %d)", exc, attempt + 1)
        raise Conflict(f"view partitions kept changing while planning; tried {MAX_REPLANS} "
                       "times", {"retryable": True})

    def write(self, views: Mapping[str, Any], decisions: list[Decision],
              stored: Mapping[ViewAddress, StoredPartition],
              actor: Actor = VIEWS) -> dict[ViewAddress, int]:
        """Carry out ``decisions`` planned from ``stored`` in one transaction; returns
        the job of every partition transformed or joined. :class:`CasConflict` (nothing
        written) if any row changed since ``stored`` was read. A plan that changes
        no row (a re-plan with nothing changed) opens no transaction: every TRANSFORM,
        JOIN, SET and NO_DATA changes its row."""
        # A SKIP of a stored partition, most of a re-plan's decisions, writes nothing:
        # passed over before a change is worked out for each of the others.
        changes = [change for decision in decisions
                   if (decision.action is not Action.SKIP or decision.address not in stored)
                   and (change := _change(decision, stored.get(decision.address))) is not None]
        if not changes:
            return {}
        with self._repository.writing() as conn:
            return self._write(conn, views, decisions, stored, changes, actor)

    def _write(self, conn: Connection, views: Mapping[str, Any], decisions: list[Decision],
               stored: Mapping[ViewAddress, StoredPartition],
               changes: list[Change], actor: Actor) -> dict[ViewAddress, int]:
        if any(decision.action is Action.TRANSFORM for decision in decisions):
            # Before the jobs exist: the tracker, even one that has not run yet, reads
            # their ends (a reader it would make itself starts after every end so far).
            # And before any partition row is locked: two first makers of the cursor
            # wait on each other's insert, which deadlocked when the waiting one held
            # partition rows the other was about to write.
            start_cursor(conn, JOBS_FEED)
        self._repository.apply(conn, changes)
        self._release_left_flight(conn, decisions, stored, actor)
        jobs = {d.address: stored[d.address].job_id for d in decisions
                if d.action is Action.JOIN and stored[d.address].job_id is not None}
        made = self._submit(conn, views, decisions, stored, jobs, actor)
        self._repository.set_jobs(conn, made)
        jobs.update(made)
        return jobs  # type: ignore[return-value]

    def _release_left_flight(self, conn: Connection, decisions: list[Decision],
                             stored: Mapping[ViewAddress, StoredPartition],
                             actor: Actor) -> None:
        """A partition this plan takes out of flight other than by its job's end (a
        SET_ONLY of one being transformed) lets its dependents go: its gates are
        discarded with the row's change."""
        left = [d.address for d in decisions if d.action is not Action.JOIN
                and (row := stored.get(d.address)) is not None and row.state.in_flight]
        if left and release(conn, left, actor):
            self._store.tx.notify(conn)

    def _submit(self, conn: Connection, views: Mapping[str, Any], decisions: list[Decision],
                stored: Mapping[ViewAddress, StoredPartition],
                jobs: Mapping[ViewAddress, int | None], actor: Actor) -> dict[ViewAddress, int]:
        """One job per TRANSFORM, in waves: the jobs of a wave's upstream partitions
        are inserted by an earlier wave of the same transaction (or joined), so their
        gates can be made, and the wave's jobs linked to them, before it is inserted."""
        made: dict[ViewAddress, int] = {}
        for wave in _waves([d for d in decisions if d.action is Action.TRANSFORM]):
            upstream_jobs = {a: job for d in wave for a in d.upstream
                             if (job := made.get(a) or jobs.get(a)) is not None}
            gates = make_gates(self._store.jobs, conn, self.policy, actor, upstream_jobs,
                               fresh=made.values()) if upstream_jobs else {}
            items: dict[ViewAddress, KeyedSubmit] = {}
            for decision in wave:
                upstream = [upstream_jobs.get(a) for a in decision.upstream]
                spec = with_after(self.rendered(views, decision.address,
                                                decision.version_checksum),
                                  [gates[job] for job in upstream if job is not None])
                row = stored.get(decision.address)
                items[decision.address] = KeyedSubmit(
                    spec, validate_job(spec, self.policy),
                    job_key(decision.address, row.row_version if row else 0), None, actor)
            ids = self._store.jobs.submit_keyed(list(items.values()), conn=conn)
            made.update((address, ids[item.key]) for address, item in items.items())
        return made

    def rendered(self, views: Mapping[str, Any], address: ViewAddress,
                 version_checksum: str | None = None) -> JobSpec:
        """The job of ``address`` from its view's current definition; it records
        ``version_checksum`` (default: the definition's) as the version it runs."""
        spec = views.get(address.name)
        if spec is None:
            raise InvalidRequest(f"view {address.name} is not defined", [
                {"field": "pattern", "message": f"unknown view {address.name}"}])
        return self._render(spec, address, version_checksum=version_checksum)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block, and resumed after unless it
    was paused already (by another thread's block: the first to end resumes it).

    For a request that builds a lattice: some 500,000 objects (addresses, their
    dependencies, stored states, decisions) that hold no reference cycles, are freed
    by reference counting and live until the request ends. Meanwhile the collector
    would walk every live object again each time their number grew by a quarter,
    which cost a quarter of a large request's time and found nothing to free. It is
    process-wide: cycles another thread makes meanwhile wait for the block's end."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def with_after(spec: JobSpec, upstream: list[int]) -> JobSpec:
    """The job waiting for ``upstream`` jobs (its upstream partitions' gates) to be
    done: a gate is discarded once its partition is materialized or failed after its
    retries, so a failed dependency does not stop its dependents, which then run on
    incomplete data, as in Schedoscope."""
    if not upstream:
        return spec
    links = [AfterSpec(job=job, when="done") for job in sorted(set(upstream))]
    return spec.model_copy(update={"after": links})


def _waves(transforms: list[Decision]) -> list[list[Decision]]:
    depth: dict[ViewAddress, int] = {}
    for decision in transforms:  # lattice order: dependencies first
        depth[decision.address] = 1 + max((depth[a] for a in decision.upstream if a in depth),
                                          default=-1)
    waves: list[list[Decision]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for decision in transforms:
        waves[depth[decision.address]].append(decision)
    return waves


def _change(decision: Decision, row: StoredPartition | None) -> Change | None:
    """The compare-and-set a decision makes of its row, or None (SKIP)."""
    expected = row.row_version if row is not None else 0
    previous = row.state if row is not None else ViewState.RECEIVE
    address, action = decision.address, decision.action
    if action is Action.TRANSFORM:
        return Change(address, expected, previous, ViewState.WAITING,
                      {"job_id": None, "retries": 0}, decision.reason)
    if action is Action.JOIN:
        # Checked (and locked) unchanged: the job joined is still the partition's.
        return Change(address, expected, previous, previous, {}, bump=False) \
            if row is not None else None
    if action is Action.SET:
        return Change(address, expected, previous, ViewState.MATERIALIZED,
                      {"job_id": None, "retries": 0,
                       "version_checksum": decision.version_checksum,
                       "transformed_at": decision.transformed_at}, decision.reason)
    if action is Action.NO_DATA:
        return Change(address, expected, previous, ViewState.NO_DATA,
                      {"job_id": None, "retries": 0}, decision.reason)
    if row is None:  # SKIP of a partition never stored: store it as instantiated
        return Change(address, 0, ViewState.RECEIVE, ViewState.RECEIVE, {}, decision.reason)
    return None
