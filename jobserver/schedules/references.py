"""What a schedule's triggers name must exist when the schedule is saved.

A partition trigger on a dataset that does not exist, or on a consumer the dataset
does not have, and a job-status trigger on a schedule that does not exist, would be
accepted and then never fire, without a word: nothing is ever added to a dataset that
is not there. CDAP's schedules (seed 002) name programs and datasets that exist; so
a save (create, or a changed spec) whose triggers name any such thing is refused, as
a bad request naming the field (``trigger.dataset``, ``trigger.parts[1].consumer``,
``trigger.schedule``), and so is a partition ``filter`` on a field the dataset's key
lacks (``trigger.filter[0]``). A job-status trigger on a ``job`` name is not checked:
any job submitted under that name counts, and none need exist yet. A trigger on the
schedule itself is allowed.

The check runs in the saving transaction, which holds the dataset's row in share
mode (on PostgreSQL) while it reads it. The other way round, deleting a dataset or a
consumer that a schedule names, in a partition trigger or in its job template's
``inputs``, is refused as a conflict naming each such schedule
(:func:`refuse_if_named`): the schedule would never fire again, or every run it
launches would end ERROR. The datasets planner does not know schedules: it asks the
installed planners' deletion guards (:class:`~jobserver.planners.hooks.DeletionGuard`),
and :class:`NamedBySchedule` is the schedules planner's. The deleting transaction
holds the dataset's row exclusively while it looks, so a save and a delete running
together cannot both pass. A filter
field that a dataset declared again without is recorded by the evaluator as an
``error`` evaluation. A dry run does not check, so that ``jobserver apply
--dry-run`` of a file declaring a dataset and a schedule on it passes; the apply in
file order needs the dataset first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, Text, cast, select

from jobserver.exceptions import Conflict, InvalidRequest
from jobserver.planners.hooks import Deletion, DeletionGuard
from jobserver.schedules.spec import (AndTrigger, JobStatusTrigger, OrTrigger,
                                      PartitionTrigger, ScheduleSpec, qualify)
from jobserver.schedules.tables import schedules
from jobserver.spec import refuse


def check_references(conn: Connection, spec: ScheduleSpec) -> None:
    """Raise :class:`InvalidRequest` (422) naming every trigger field of ``spec``
    that names a dataset, consumer, filter field or schedule that does not exist."""
    problems: list[dict[str, str]] = []
    for where, leaf in _leaves(spec.trigger, "trigger"):
        if isinstance(leaf, PartitionTrigger):
            problems += _dataset_problems(conn, spec, leaf, where)
        elif isinstance(leaf, JobStatusTrigger) and leaf.schedule is not None:
            problems += _schedule_problems(conn, spec, leaf.schedule, where)
    refuse(problems)


def _leaves(trigger: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every leaf of the tree with its field path, as parse errors name it."""
    if isinstance(trigger, (AndTrigger, OrTrigger)):
        for index, part in enumerate(trigger.parts):
            yield from _leaves(part, f"{where}.parts[{index}]")
    else:
        yield where, trigger


def _dataset_problems(conn: Connection, spec: ScheduleSpec, leaf: PartitionTrigger,
                      where: str) -> list[dict[str, str]]:
    from jobserver.datasets.records import DatasetRecord
    from jobserver.datasets.tables import consumers, datasets

    full = qualify(leaf.dataset, spec.namespace)
    namespace, _, name = full.partition("/")
    query = select(datasets).where(datasets.c.namespace == namespace, datasets.c.name == name)
    if conn.dialect.name == "postgresql":  # a delete of it waits, and then sees this save
        query = query.with_for_update(read=True)
    row = conn.execute(query).mappings().first()
    if row is None:
        return [{"field": f"{where}.dataset",
                 "message": f"dataset {full} does not exist; declare it before a schedule "
                            "that watches it"}]
    problems = []
    if leaf.consumer is not None and conn.execute(select(consumers.c.id).where(
            consumers.c.dataset_id == row["id"],
            consumers.c.name == leaf.consumer)).first() is None:
        problems.append({"field": f"{where}.consumer",
                         "message": f"dataset {full} has no consumer {leaf.consumer}"})
    if leaf.filter:
        from jobserver.datasets.filters import Filter

        try:
            Filter.parse(list(leaf.filter), DatasetRecord.from_row(row).partition_key,
                         f"{where}.filter")
        except InvalidRequest as exc:
            problems += [{"field": item["field"],
                          "message": f"{item['message']} (dataset {full})"}
                         for item in exc.details or []]
    return problems


def _schedule_problems(conn: Connection, spec: ScheduleSpec, ref: str,
                       where: str) -> list[dict[str, str]]:
    full = qualify(ref, spec.namespace)
    if full == spec.qualified_name:
        return []
    namespace, _, name = full.partition("/")
    if conn.execute(select(schedules.c.id).where(schedules.c.namespace == namespace,
                                                 schedules.c.name == name)).first() is None:
        return [{"field": f"{where}.schedule",
                 "message": f"schedule {full} does not exist; create it before a schedule "
                            "triggered by its runs"}]
    return []


#: Schedules a refused delete names at most (all are counted).
MAX_NAMED = 20


class NamedBySchedule(DeletionGuard):
    """The schedules planner's deletion guard: a dataset, or a consumer of one, that a
    schedule names is not deleted (:func:`refuse_if_named`)."""

    def refuse(self, conn: Connection, deletion: Deletion) -> None:
        if deletion.kind == "dataset":
            refuse_if_named(conn, deletion.namespace, deletion.name)
        elif deletion.kind == "consumer" and deletion.parent is not None:
            refuse_if_named(conn, deletion.namespace, deletion.parent, deletion.name)


def refuse_if_named(conn: Connection, namespace: str, dataset: str,
                    consumer: str | None = None) -> None:
    """Raise :class:`Conflict` (409) naming every schedule whose trigger or job
    template names the dataset ``namespace/dataset`` (with ``consumer``: that
    consumer of it), with the field of its spec that does.

    Call it in the deleting transaction after locking the dataset's row exclusively:
    a schedule being saved reads that row in share mode (:func:`check_references`),
    so either the delete sees the schedule or the save sees the dataset or consumer
    gone."""
    found = schedules_naming(conn, f"{namespace}/{dataset}", consumer)
    if not found:
        return
    thing = (f"consumer {consumer} of dataset {namespace}/{dataset}" if consumer
             else f"dataset {namespace}/{dataset}")
    fields: dict[str, list[str]] = {}
    for schedule, field in found:
        fields.setdefault(schedule, []).append(field)
    shown = ", ".join(f"{schedule} ({', '.join(named)})"
                      for schedule, named in list(fields.items())[:MAX_NAMED])
    more = f" and {len(fields) - MAX_NAMED} more" if len(fields) > MAX_NAMED else ""
    which = "that schedule" if len(fields) == 1 else "those schedules"
    raise Conflict(
        f"{thing} is named by schedule {shown}{more}: change or delete {which} first",
        [{"field": "consumer" if consumer else "name", "schedule": schedule,
          "message": f"named by schedule {schedule} in {field}"}
         for schedule, field in found[:MAX_NAMED]])


def schedules_naming(conn: Connection, full: str,
                     consumer: str | None = None) -> list[tuple[str, str]]:
    """``(schedule "ns/name", field)`` for each place a schedule names the dataset
    ``full`` (with ``consumer``: that consumer of it), ordered by schedule. A
    trigger's dataset is in the schedule's namespace unless qualified; a template
    input's in ``default``, as a run takes it."""
    word = consumer or full.partition("/")[2]
    rows = conn.execute(select(schedules.c.namespace, schedules.c.name, schedules.c.spec)
                        .where(cast(schedules.c.spec, Text).contains(word, autoescape=True))
                        .order_by(schedules.c.namespace, schedules.c.name)).all()
    return [(f"{row.namespace}/{row.name}", field) for row in rows
            for field in _naming(row.spec or {}, row.namespace, full, consumer)]


def _naming(spec: dict[str, Any], namespace: str, full: str,
            consumer: str | None) -> list[str]:
    """The fields of a stored spec (read as JSON: one this version cannot load still
    counts) that name the dataset ``full`` or its ``consumer``."""
    from jobserver.datasets.working_set import split_ref

    tail = "consumer" if consumer else "dataset"
    fields = [f"{where}.{tail}" for where, leaf in _raw_leaves(spec.get("trigger"), "trigger")
              if leaf.get("type") == "partition"
              and qualify(str(leaf.get("dataset", "")), namespace) == full
              and (consumer is None or leaf.get("consumer") == consumer)]
    inputs = (spec.get("template") or {}).get("inputs") or []
    fields += [f"template.inputs[{index}].{tail}" for index, item in enumerate(inputs)
               if isinstance(item, dict)
               and "/".join(split_ref(str(item.get("dataset", "")))) == full
               and (consumer is None or item.get("consumer") == consumer)]
    return fields


def _raw_leaves(trigger: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(trigger, dict):
        return
    if trigger.get("type") in ("and", "or"):
        for index, part in enumerate(trigger.get("parts") or []):
            yield from _raw_leaves(part, f"{where}.parts[{index}]")
    else:
        yield where, trigger
