"""The consumer chaos test's judge: the store's final state and the ledger the steps
wrote (:mod:`tests.chaos.consumer_step`), partition by partition and consumer by
consumer.

A run *counts* only if the store holds a job-level SUCCEED event for its
``(job, attempt)``: that event is written in the transaction that takes the run's
partitions out of the working set. A step may have written ``ok`` and then lost its
node before that commit; its partitions went back to NEW and were handed out again,
which is correct. For each consumer and each partition of the dataset:

- a partition outside the consumer's filter was never handed to it (no ledger line,
  no working-set row);
- otherwise it was processed successfully exactly once (one counted run), after at
  most ``max_retries`` failed runs, by a run whose step wrote ``ok``, and no run was
  handed it after that one; its working-set row is gone or DONE;
- or it is FAILED with exactly ``max_retries + 1`` failed attempts, no counted run,
  and at most that many runs in the ledger (a run killed before its step wrote
  anything counts an attempt the ledger cannot show);
- never both, never neither (lost); a poison partition is never processed;
- no two runs held it at once (a run's ``take`` after the previous run's last line);
- each ledger run belongs to a job that consumes through that consumer.

The consumer's own totals (``processed``, FAILED rows) agree with the counts found.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.tables import consumers, datasets, partitions, working_sets
from jobserver.store import Store
from jobserver.store.tables import events, jobs

PHASES = ("take", "ok", "fail")


@dataclass(frozen=True)
class ConsumerPlan:
    """One consumer as the test declares it, with its filter as a predicate on a
    partition's key and metadata (judged independently of the server's filter code)."""

    name: str
    filter: list[str]
    wants: Callable[[dict[str, Any], dict[str, Any]], bool]
    limit: int
    max_retries: int = 3
    #: partitions whose ``n`` is a multiple of this fail every run (0: none)
    poison: int = 0

    def poisoned(self, key: dict[str, Any]) -> bool:
        return bool(self.poison) and key["n"] % self.poison == 0


@dataclass
class Line:
    consumer: str
    partition: int
    n: int
    job: int
    attempt: int
    fence: int
    node: str
    phase: str
    at: float
    index: int          # its place in the file


@dataclass
class Held:
    """One run's handling of one partition: its ``take`` and outcome lines."""

    job: int
    attempt: int
    node: str
    index: int
    take: float | None = None
    outcome: str | None = None   # ok | fail | None (killed before it ended)
    end: float | None = None

    @property
    def run(self) -> tuple[int, int]:
        return self.job, self.attempt


@dataclass
class Ledger:
    held: dict[tuple[str, int], list[Held]]      # (consumer, partition) -> in file order
    malformed: list[str]


def parse(path: Path) -> Ledger:
    held: dict[tuple[str, int], dict[tuple[int, int], Held]] = defaultdict(dict)
    malformed = []
    text = path.read_text() if path.exists() else ""
    for index, raw in enumerate(text.splitlines()):
        try:
            consumer, partition, _, job, attempt, _, node, phase, at = raw.split()
            if phase not in PHASES:
                raise ValueError(phase)
            runs = held[(consumer, int(partition))]
            key = (int(job), int(attempt))
            item = runs.setdefault(key, Held(key[0], key[1], node, index))
            if phase == "take":
                item.take = float(at)
            else:
                item.outcome, item.end = phase, float(at)
        except ValueError:
            malformed.append(raw)
    return Ledger({key: sorted(runs.values(), key=lambda h: h.index)
                   for key, runs in held.items()}, malformed)


@dataclass
class History:
    """What the store holds at the end, read once."""

    partitions: dict[int, PartitionRecord]
    #: consumer -> partition id -> working-set row (state, attempts, job_id, ...)
    working: dict[str, dict[int, Any]]
    #: consumer -> partitions that left the working set processed (purged DONE rows)
    purged: dict[str, int]
    succeeded: set[tuple[int, int]]              # runs with a job-level SUCCEED
    consumer_of: dict[int, str]                  # job id -> the consumer it consumes by


def read(store: Store, dataset: str = "raw", namespace: str = "default") -> History:
    with store.tx.read() as conn:
        found = DatasetRecord.from_row(conn.execute(select(datasets).where(
            datasets.c.namespace == namespace, datasets.c.name == dataset)).mappings().one())
        history = History({}, {}, {}, set(), {})
        for mapping in conn.execute(select(partitions).where(
                partitions.c.dataset_id == found.id)).mappings():
            history.partitions[mapping["id"]] = PartitionRecord.from_row(
                mapping, found.partition_key)
        _working_sets(conn, found.id, history)
        history.succeeded = {(row.job_id, row.attempt) for row in conn.execute(
            select(events.c.job_id, events.c.attempt).where(
                events.c.step.is_(None), events.c.to_state == "SUCCEED"))}
        for row in conn.execute(select(jobs.c.id, jobs.c.inputs).where(
                jobs.c.inputs.is_not(None))):
            if row.inputs:
                history.consumer_of[row.id] = row.inputs[0]["consumer"]
    return history


def _working_sets(conn: Connection, dataset_id: int, history: History) -> None:
    names = {}
    for row in conn.execute(select(consumers).where(consumers.c.dataset_id == dataset_id)):
        names[row.id] = row.name
        history.purged[row.name] = int(row.processed)
        history.working[row.name] = {}
    for row in conn.execute(select(working_sets).where(
            working_sets.c.consumer_id.in_(list(names)))):
        history.working[names[row.consumer_id]][row.partition_id] = row


@dataclass
class Audit:
    """Counts per consumer, facts about the run, and the problems found."""

    processed: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    runs: set[tuple[int, int]] = field(default_factory=set)   # runs that took partitions
    counted_runs: set[tuple[int, int]] = field(default_factory=set)
    failed_runs: set[tuple[int, int]] = field(default_factory=set)  # their step failed
    killed_runs: set[tuple[int, int]] = field(default_factory=set)  # took, never ended
    #: runs whose step wrote ``ok`` but whose SUCCEED never committed
    uncounted_ok: set[tuple[int, int]] = field(default_factory=set)
    retries: int = 0            # partition handed out again after a run that did not count
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        per = " ".join(f"{name}:{self.processed[name]}/{self.failed[name]}"
                       for name in sorted(self.processed))
        return (f"processed/FAILED {per} | runs={len(self.runs)} counted="
                f"{len(self.counted_runs)} step_failed={len(self.failed_runs)} "
                f"killed={len(self.killed_runs)} ok_not_counted={len(self.uncounted_ok)} "
                f"retries={self.retries} problems={len(self.problems)}")


def audit(history: History, ledger: Ledger, plans: list[ConsumerPlan]) -> Audit:
    result = Audit()
    result.problems += [f"malformed ledger line {line!r}" for line in ledger.malformed]
    known = {plan.name for plan in plans}
    for (consumer, partition), held in sorted(ledger.held.items()):
        if consumer not in known or partition not in history.partitions:
            result.problems.append(f"ledger names {consumer} partition {partition}, which "
                                   "the store does not have")
    for plan in plans:
        _consumer(history, ledger, plan, result)
    return result


def _consumer(history: History, ledger: Ledger, plan: ConsumerPlan, result: Audit) -> None:
    working = history.working.get(plan.name, {})
    processed = failed = 0
    for partition_id, record in sorted(history.partitions.items()):
        held = ledger.held.get((plan.name, partition_id), [])
        row = working.get(partition_id)
        name = f"{plan.name}: partition {partition_id} (n={record.key['n']})"
        _runs(history, plan, name, held, result)
        if not plan.wants(record.key, record.metadata):
            if held or row is not None:
                result.problems.append(f"{name} does not match the filter, yet was handed "
                                       f"to runs {[h.run for h in held]}; row {_row(row)}")
            continue
        verdict = _partition(history, plan, name, record, held, row, result)
        processed += verdict == "processed"
        failed += verdict == "FAILED"
    result.processed[plan.name], result.failed[plan.name] = processed, failed
    done = sum(1 for row in working.values() if row.state == "DONE")
    failed_rows = sum(1 for row in working.values() if row.state == "FAILED")
    if (history.purged.get(plan.name, 0) + done, failed_rows) != (processed, failed):
        result.problems.append(
            f"{plan.name}: the store counts {history.purged.get(plan.name, 0)} + {done} "
            f"processed and {failed_rows} FAILED; the audit found {processed} and {failed}")


def _runs(history: History, plan: ConsumerPlan, name: str, held: list[Held],
          result: Audit) -> None:
    """Facts about each run that held the partition, and what is wrong with them."""
    for item in held:
        result.runs.add(item.run)
        if history.consumer_of.get(item.job) != plan.name:
            result.problems.append(f"{name}: job {item.job} consumes by "
                                   f"{history.consumer_of.get(item.job)!r}, not this consumer")
        if item.outcome is None:
            result.killed_runs.add(item.run)
        elif item.outcome == "fail":
            result.failed_runs.add(item.run)
        counted = item.run in history.succeeded
        if counted:
            result.counted_runs.add(item.run)
            if item.outcome != "ok":
                result.problems.append(f"{name}: run {item.run} SUCCEEDed, but its step "
                                       f"{'failed' if item.outcome else 'never ended'}")
        elif item.outcome == "ok":
            result.uncounted_ok.add(item.run)
    ordered = sorted((h for h in held if h.take is not None), key=lambda h: h.take or 0.0)
    for first, second in zip(ordered, ordered[1:]):
        if first.end is not None and second.take is not None and second.take < first.end:
            result.problems.append(f"{name}: held by runs {first.run} and {second.run} at "
                                   f"once ({second.take:.3f} < {first.end:.3f})")


def _partition(history: History, plan: ConsumerPlan, name: str, record: PartitionRecord,
               held: list[Held], row: Any, result: Audit) -> str:
    """One partition the consumer wants: ``processed``, ``FAILED`` or ``wrong``."""
    counted = [item for item in held if item.run in history.succeeded]
    if len(counted) > 1:
        result.problems.append(f"{name} processed successfully {len(counted)} times: "
                               f"runs {[item.run for item in counted]}")
        return "wrong"
    if row is not None and row.state == "FAILED":
        return _failed(plan, name, counted, held, row, result)
    if not counted:
        result.problems.append(f"{name} was lost: never processed, not FAILED; row "
                               f"{_row(row)}, runs {[(h.run, h.outcome) for h in held]}")
        return "wrong"
    success = counted[0]
    before = held[:held.index(success)]
    after = held[held.index(success) + 1:]
    wrong = []
    if after:
        wrong.append(f"was handed to runs {[h.run for h in after]} after its success in "
                     f"run {success.run}")
    if len(before) > plan.max_retries:
        wrong.append(f"failed {len(before)} runs before its success, more than max_retries")
    if row is not None and row.state != "DONE":
        wrong.append(f"was processed by run {success.run}, yet its row is {_row(row)}")
    if plan.poisoned(record.key):
        wrong.append(f"is poison, yet run {success.run} processed it")
    result.problems += [f"{name} {text}" for text in wrong]
    result.retries += len(before)
    return "wrong" if wrong else "processed"


def _failed(plan: ConsumerPlan, name: str, counted: list[Held], held: list[Held], row: Any,
            result: Audit) -> str:
    """A FAILED partition: no counted run, exactly max_retries + 1 failed attempts."""
    limit = plan.max_retries + 1
    wrong = [f"processed by run {counted[0].run}"] if counted else []
    if row.attempts != limit:
        wrong.append(f"after {row.attempts} attempts, not {limit}")
    if len(held) > limit:
        wrong.append(f"handed to {len(held)} runs")
    result.problems += [f"{name} is FAILED but {text}" for text in wrong]
    result.retries += max(0, len(held) - 1)
    return "wrong" if wrong else "FAILED"


def _row(row: Any) -> str:
    if row is None:
        return "none"
    return (f"{row.state} attempts={row.attempts} job={row.job_id}/{row.job_attempt} "
            f"error={(row.last_error or '')[:80]!r}")
