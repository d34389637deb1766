"""Which old finished jobs retention keeps for the schedules
(:class:`~jobserver.planners.hooks.KeepRule`, asked by :mod:`jobserver.store.keep`):
a job a schedule's template names in ``after``, and the newest SUCCEED job of each
template a ``since_last_run`` constraint reads (its time is the constraint's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, exists, select

from jobserver.planners.hooks import KeepRule
from jobserver.schedules.tables import schedules
from jobserver.store.tables import jobs


@dataclass(frozen=True)
class ScheduleRefs:
    """What the schedules refer to: the job ids their templates wait for (``after``)
    and the template names whose newest successful run a ``since_last_run``
    constraint reads. Read once every few batches (:meth:`read`): parsing every
    schedule's spec per batch would cost more than the batch."""

    after: frozenset[int] = frozenset()
    last_success_of: frozenset[str] = frozenset()

    @classmethod
    def read(cls, conn: Connection) -> ScheduleRefs:
        after: set[int] = set()
        names: set[str] = set()
        for (spec,) in conn.execute(select(schedules.c.spec)):
            template = (spec or {}).get("template") or {}
            after.update(int(item["job"]) for item in template.get("after") or []
                         if isinstance(item, dict) and "job" in item)
            if any(isinstance(c, dict) and c.get("type") == "since_last_run"
                   for c in (spec or {}).get("constraints") or []):
                names.add(str(template.get("name")))
        return cls(frozenset(after), frozenset(names))


class NamedBySchedules(KeepRule):
    """Keeps the jobs the schedules name (:class:`ScheduleRefs`)."""

    def read(self, conn: Connection) -> ScheduleRefs:
        return ScheduleRefs.read(conn)

    def kept(self, conn: Connection, ids: Sequence[int], read: ScheduleRefs) -> set[int]:
        found = set(read.after.intersection(ids))
        if read.last_success_of:
            newer = jobs.alias("newer")
            found.update(conn.execute(select(jobs.c.id).where(
                jobs.c.id.in_(list(ids)), jobs.c.state == "SUCCEED",
                jobs.c.name.in_(sorted(read.last_success_of)),
                ~exists().where(newer.c.name == jobs.c.name, newer.c.state == "SUCCEED",
                                newer.c.id > jobs.c.id))).scalars())
        return found
