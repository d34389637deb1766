"""The and/or tree of a schedule's trigger, evaluated over what its leaves have seen.

A pending schedule-job holds a *trigger state*: a JSON object keyed by leaf path (see
:func:`jobserver.schedules.spec.leaves`) recording what each leaf has seen, e.g.
``{"0": {"satisfied": true}, "1": {"count": 3, "satisfied": false}}``. Each
:class:`Notification` (a fire time, a job that ended, new partitions) reaches one
leaf through :func:`deliver`; the tree fires when :func:`satisfied` says so. A leaf's
record is kept until the schedule-job leaves PENDING_TRIGGER, so an ``and`` remembers
each side until all are satisfied (CDAP's ``and(onProgramStatus(W1, COMPLETED),
onProgramStatus(W2, COMPLETED))``).

Everything here is pure: no store, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobserver.schedules.spec import (AndTrigger, JobStatusTrigger, LeafTrigger, OrTrigger,
                                      PartitionTrigger, TimeTrigger, Trigger, leaves, qualify)
from jobserver.schedules.words import time_words

KINDS = {TimeTrigger: "time", JobStatusTrigger: "job_status", PartitionTrigger: "partition"}


@dataclass(frozen=True)
class Notification:
    """Something that reached one leaf of a schedule's trigger.

    ``part`` is the leaf's path; ``at`` when it was seen. A time leaf's note carries
    its ``fire_time``; a job_status leaf's the ``job_id`` and final ``state``; a
    partition leaf's the ``count`` of new partitions.
    """

    part: str
    kind: str
    at: datetime
    fire_time: datetime | None = None
    job_id: int | None = None
    state: str | None = None
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict; datetimes as ISO 8601 strings."""
        # Spelled out rather than dataclasses.asdict, which deep-copies every field:
        # the evaluator turns one note per firing into JSON.
        return {"part": self.part, "kind": self.kind, "at": self.at.isoformat(),
                "fire_time": self.fire_time.isoformat() if self.fire_time else None,
                "job_id": self.job_id, "state": self.state, "count": self.count}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Notification:
        """The inverse of :meth:`to_json`."""
        fields = dict(data)
        for key in ("at", "fire_time"):
            if fields.get(key) is not None:
                fields[key] = datetime.fromisoformat(fields[key])
        return cls(**fields)


@dataclass(frozen=True)
class JobEvent:
    """An engine job reached a state; ``schedule`` is the "namespace/name" of the
    schedule that launched it, if one did."""

    job_id: int
    job_name: str
    state: str
    schedule: str | None


def leaf_at(trigger: Trigger, path: str) -> LeafTrigger:
    """The leaf at ``path``; raises KeyError if there is none."""
    for leaf_path, leaf in leaves(trigger):
        if leaf_path == path:
            return leaf
    raise KeyError(f"the trigger has no leaf at path {path!r}")


def _leaf_satisfied(leaf: LeafTrigger, record: dict[str, Any]) -> bool:
    if isinstance(leaf, PartitionTrigger):
        return int(record.get("count", 0)) >= leaf.count
    return bool(record.get("satisfied", False))


def deliver(trigger: Trigger, state: dict[str, Any], note: Notification) -> dict[str, Any]:
    """The trigger state after ``note`` reached its leaf; ``state`` is not changed.

    A time or job_status leaf is satisfied by its first note; a partition leaf once
    the counts of its notes add up to its ``count``. Raises ValueError if the note's
    part is not a leaf of this trigger or its kind is not that leaf's.
    """
    try:
        leaf = leaf_at(trigger, note.part)
    except KeyError as exc:
        raise ValueError(str(exc)) from None
    if KINDS[type(leaf)] != note.kind:
        raise ValueError(f"a {note.kind} notification cannot reach the "
                         f"{KINDS[type(leaf)]} leaf at {note.part!r}")
    record = dict(state.get(note.part, {}))
    if isinstance(leaf, PartitionTrigger):
        record["count"] = int(record.get("count", 0)) + note.count
        record["satisfied"] = record["count"] >= leaf.count
    else:
        record["satisfied"] = True
    return {**state, note.part: record}


def _satisfied(trigger: Trigger, state: dict[str, Any], path: str) -> bool:
    if isinstance(trigger, (AndTrigger, OrTrigger)):
        parts = (_satisfied(part, state, f"{path}.{index}" if path else str(index))
                 for index, part in enumerate(trigger.parts))
        return all(parts) if isinstance(trigger, AndTrigger) else any(parts)
    return _leaf_satisfied(trigger, state.get(path, {}))


def satisfied(trigger: Trigger, state: dict[str, Any]) -> bool:
    """Whether the whole tree fires on what its leaves have seen."""
    return _satisfied(trigger, state, "")


def satisfied_parts(trigger: Trigger, state: dict[str, Any]) -> list[str]:
    """The paths of the satisfied leaves, in tree order."""
    return [path for path, leaf in leaves(trigger)
            if _leaf_satisfied(leaf, state.get(path, {}))]


def matching_parts(trigger: Trigger, event: JobEvent, namespace: str) -> list[str]:
    """The paths of the job_status leaves that ``event`` satisfies: the job's name or
    the schedule that launched it is the leaf's, and its state one of the leaf's.
    A leaf's schedule without a namespace means ``namespace`` (the schedule's own)."""
    return [path for path, leaf in leaves(trigger)
            if isinstance(leaf, JobStatusTrigger) and event.state in leaf.states
            and _concerns(leaf, event, namespace)]


def _concerns(leaf: JobStatusTrigger, event: JobEvent, namespace: str) -> bool:
    if leaf.job is not None:
        return leaf.job == event.job_name
    return (leaf.schedule is not None and event.schedule is not None
            and qualify(leaf.schedule, namespace) == event.schedule)


def _leaf_words(leaf: LeafTrigger, record: dict[str, Any]) -> str:
    mark = "[x]" if _leaf_satisfied(leaf, record) else "[ ]"
    if isinstance(leaf, JobStatusTrigger):
        target = f"job {leaf.job}" if leaf.job is not None else f"schedule {leaf.schedule}"
        return f"{target} {'|'.join(leaf.states)} {mark}"
    if isinstance(leaf, PartitionTrigger):
        return f"dataset {leaf.dataset} {int(record.get('count', 0))}/{leaf.count} {mark}"
    return f"time {time_words(leaf)} {mark}"


def _explain(trigger: Trigger, state: dict[str, Any], path: str) -> str:
    if isinstance(trigger, (AndTrigger, OrTrigger)):
        parts = (_explain(part, state, f"{path}.{index}" if path else str(index))
                 for index, part in enumerate(trigger.parts))
        return f"{trigger.type}({', '.join(parts)})"
    return _leaf_words(trigger, state.get(path, {}))


def explain(trigger: Trigger, state: dict[str, Any]) -> str:
    """The tree with each leaf marked satisfied or not, e.g.
    "and(job W1 SUCCEED [x], job W2 SUCCEED [ ])"."""
    return _explain(trigger, state, "")


def fired_properties(trigger: Trigger, state: dict[str, Any]) -> dict[str, Any]:
    """The ``properties`` of the satisfied leaves merged in tree order (a later leaf
    wins): what a firing sets over the schedule's own properties."""
    merged: dict[str, Any] = {}
    for path, leaf in leaves(trigger):
        if _leaf_satisfied(leaf, state.get(path, {})):
            merged.update(leaf.properties)
    return merged
