"""The pure half of ``materialize``: what to do with each partition of a lattice, and why.

:func:`plan` walks the lattice in order (dependencies first), so every partition's
outcome is known when its dependents are decided. A partition absent from ``stored``
is in RECEIVE and was never transformed. In DEFAULT mode the first rule that applies
decides:

1. in flight (waiting, transforming, retrying with a job) → JOIN that job;
2. a noop view: NO_DATA without data; invalidated (RECEIVE after it was set) → SET
   with a new timestamp, the time it is set or the data's if newer, so that every
   dependent sees a newer dependency and transforms (Schedoscope's use of invalidate:
   a NoOp view corrected by an outside ETL process); never set, not materialized, or
   its data newer than its timestamp → SET at the data's time; else SKIP (data older
   than the timestamp were there when it was set);
3. every dependency decided NO_DATA → NO_DATA;
4. never transformed, or invalidated → TRANSFORM;
5. a dependency transformed, joined or set to a new timestamp by this plan → TRANSFORM;
6. a dependency's timestamp newer than its own → TRANSFORM;
7. its stored version checksum is not the current one → TRANSFORM;
8. it failed last time → TRANSFORM;
9. else SKIP.

RESET_TRANSFORMATION_CHECKSUMS makes rule 7 a SET of the current checksum (the
timestamp kept). RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS runs nothing: each
TRANSFORM becomes a SET of the current checksum and the newest of its own and its
dependencies' timestamps, so that a DEFAULT plan right after is all SKIP. TRANSFORM_ONLY
and SET_ONLY decide the addressed partitions only, ignoring dependencies. Dependencies
that failed do not stop their dependents, retrying ones hold them: the runtime links a
job to its upstream partitions' gates (:mod:`jobserver.views.gates`), released once
each upstream is materialized or failed after its retries.

Cost: one dict lookup per lattice edge and per partition, no pydantic, the version
checksum computed once per view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone

from jobserver.views.checksums import version_checksum
from jobserver.views.lattice import Lattice
from jobserver.views.model import (Action, Decision, Mode, StoredPartition, ViewAddress,
                                   ViewState)
from jobserver.views.spec import ViewSpec
from jobserver.views.templates import render_location

DataTime = Callable[[ViewAddress], "datetime | None"]
UNSTORED = StoredPartition(ViewState.RECEIVE, None, None, None, 0, 0)
_SET, _SKIP, _JOIN, _TRANSFORM, _NO_DATA = (Action.SET, Action.SKIP, Action.JOIN,
                                            Action.TRANSFORM, Action.NO_DATA)


def iso(moment: datetime | None) -> str:
    """``2015-05-04T01:00:00Z`` (naive means UTC); ``never`` for None."""
    if moment is None:
        return "never"
    if moment.tzinfo is not timezone.utc:  # the store's are UTC already: no conversion
        moment = (moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None
                  else moment.astimezone(timezone.utc))
    return moment.isoformat()[:-len("+00:00")] + "Z"


def short(checksum: str | None) -> str:
    return "none" if checksum is None else checksum[:8] + "…"


def plan(lattice: Lattice, views: Mapping[str, ViewSpec],
         stored: Mapping[ViewAddress, StoredPartition], mode: Mode, now: datetime,
         data_time: DataTime) -> list[Decision]:
    """One decision per partition of ``lattice`` (the addressed ones only for
    TRANSFORM_ONLY and SET_ONLY), in lattice order."""
    planner = _Planner(views, stored, mode, now, data_time)
    if mode in (Mode.TRANSFORM_ONLY, Mode.SET_ONLY):
        return [planner.only(address) for address in lattice.order
                if address in lattice.addressed]
    dependencies = lattice.dependencies
    return [planner.decide(address, dependencies[address]) for address in lattice.order]


class _Planner:
    def __init__(self, views: Mapping[str, ViewSpec],
                 stored: Mapping[ViewAddress, StoredPartition], mode: Mode, now: datetime,
                 data_time: DataTime) -> None:
        self.views, self.stored, self.mode = views, stored, mode
        self.now, self.data_time = now, data_time
        # Per view name: its current version checksum and whether it is noop.
        self.facts: dict[str, tuple[str, bool]] = {}
        # Per decided partition, by id (the lattice's addresses are interned, and an
        # id hashes in C where an address hashes in Python, once per edge): its
        # action, its timestamp once the plan is done (None: none or not yet known),
        # and whether this plan gives it a new one.
        self.outcomes: dict[int, tuple[Action, datetime | None, bool]] = {}

    def view(self, address: ViewAddress) -> tuple[str, bool]:
        found = self.facts.get(address.name)
        if found is None:
            spec = self.views[address.name]
            found = self.facts[address.name] = (version_checksum(spec), spec.noop)
        return found

    def only(self, address: ViewAddress) -> Decision:
        """TRANSFORM_ONLY and SET_ONLY: the partition alone."""
        own = self.stored.get(address, UNSTORED)
        checksum, noop = self.view(address)
        if self.mode is Mode.SET_ONLY:
            return Decision(address, Action.SET, "SET_ONLY", version_checksum=checksum,
                            transformed_at=self.now)
        if own.job_id is not None and own.state.in_flight:
            return Decision(address, Action.JOIN, f"being transformed by job {own.job_id}")
        if noop:
            return self.noop(address, own, checksum)
        return Decision(address, Action.TRANSFORM, "TRANSFORM_ONLY", version_checksum=checksum)

    def decide(self, address: ViewAddress, dependencies: Sequence[ViewAddress]) -> Decision:
        own = self.stored.get(address, UNSTORED)
        checksum, noop = self.view(address)
        if own.job_id is not None and own.state.in_flight:
            decision = Decision(address, Action.JOIN, f"being transformed by job {own.job_id}")
        elif noop:
            decision = self.noop(address, own, checksum)
        else:
            decision = self.transformed(address, own, checksum, dependencies)
        action = decision.action
        if action is _SET:
            at = decision.transformed_at
            self.outcomes[id(address)] = (action, at, at != own.transformed_at)
        elif action is _SKIP or action is _JOIN:
            self.outcomes[id(address)] = (action, own.transformed_at, False)
        else:
            self.outcomes[id(address)] = (action, None, False)
        return decision

    def noop(self, address: ViewAddress, own: StoredPartition, checksum: str) -> Decision:
        """Rule 2: a noop view is materialized exactly when its data is there, and set
        anew when invalidated."""
        seen = self.data_time(address)
        if seen is None:
            location = render_location(self.views[address.name], address)
            reason = (f"no _SUCCESS flag at {location.rstrip('/')}/_SUCCESS" if location
                      else "no matching dataset partition")
            return Decision(address, Action.NO_DATA, reason)
        stamp = own.transformed_at
        if own.state is ViewState.RECEIVE and stamp is not None:  # invalidated
            at = max(self.now, seen)
            return Decision(address, Action.SET, f"invalidated; data at {iso(seen)}; set "
                            f"at {iso(at)}", version_checksum=checksum, transformed_at=at)
        if stamp is None or own.state is not ViewState.MATERIALIZED or seen > stamp:
            return Decision(address, Action.SET, f"data at {iso(seen)}",
                            version_checksum=checksum, transformed_at=seen)
        if seen == stamp:
            return Decision(address, Action.SKIP, f"data at {iso(seen)} unchanged")
        return Decision(address, Action.SKIP, f"data at {iso(seen)}, set at {iso(stamp)}")

    def transformed(self, address: ViewAddress, own: StoredPartition, checksum: str,
                    dependencies: Sequence[ViewAddress]) -> Decision:
        """Rules 3 to 9 for a view with a job transformation, then the mode."""
        outcomes = self.outcomes
        no_data, moved, newest, newest_at = bool(dependencies), None, None, None
        upstream: list[ViewAddress] = []
        for dependency in dependencies:
            action, at, new = outcomes[id(dependency)]
            if action is not _NO_DATA:
                no_data = False
            if action is _TRANSFORM or action is _JOIN:
                upstream.append(dependency)
                moved = moved or dependency
            elif new:
                moved = moved or dependency
            if at is not None and (newest_at is None or at > newest_at):
                newest, newest_at = dependency, at
        if no_data:
            return Decision(address, Action.NO_DATA, "all dependencies have no data")
        reason = _stale(own, checksum, moved, newest, newest_at)
        if reason is None:
            return Decision(address, Action.SKIP, f"materialized at {iso(own.transformed_at)}; "
                            "dependencies older; version unchanged")
        if self.mode is Mode.RESET_TRANSFORMATION_CHECKSUMS and reason.startswith(_VERSION):
            return Decision(address, Action.SET, "transformation version checksum reset "
                            f"({short(own.version_checksum)} → {short(checksum)})",
                            version_checksum=checksum, transformed_at=own.transformed_at)
        if self.mode is Mode.RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS:
            at = max((t for t in (own.transformed_at, newest_at) if t is not None),
                     default=self.now)
            return Decision(address, Action.SET, f"{reason}; set to {iso(at)} without "
                            "transforming", version_checksum=checksum, transformed_at=at)
        return Decision(address, Action.TRANSFORM, reason, upstream=tuple(upstream),
                        version_checksum=checksum)


_VERSION = "transformation version changed"


def _stale(own: StoredPartition, checksum: str, moved: ViewAddress | None,
           newest: ViewAddress | None, newest_at: datetime | None) -> str | None:
    """Why a partition must be transformed (rules 4 to 8), or None (rule 9)."""
    if own.transformed_at is None:
        return "never transformed"
    if own.state is ViewState.RECEIVE:
        return "invalidated"
    if moved is not None:
        return f"dependency {moved.path} is transformed by this request"
    if newest is not None and newest_at is not None and newest_at > own.transformed_at:
        return (f"dependency {newest.path} newer ({iso(newest_at)}) than own "
                f"({iso(own.transformed_at)})")
    if own.version_checksum != checksum:
        return f"{_VERSION} ({short(own.version_checksum)} → {short(checksum)})"
    if own.state is ViewState.FAILED:
        return "failed last time"
    return None
