"""The consumer chaos test's judge (:mod:`tests.chaos.consumer_audit`) passes what the
engine really does and finds each kind of wrong history: a history made by real job
runs (the chaos test's own shell step, no random failure) on one in-process runner,
then altered in one way per case."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete, update

from jobserver.datasets.consumer_spec import parse_consumer
from jobserver.datasets.spec import parse_dataset
from jobserver.datasets.tables import consumers, working_sets
from jobserver.store import Store
from jobserver.store.tables import events
from tests.chaos import consumer_audit
from tests.chaos.consumer_audit import ConsumerPlan
from tests.chaos.consumer_cluster import DATASET, KEY, job_spec, partition, plans
from tests.integration.test_runner import Harness, submit

#: n from 96: the partitions of ``odd`` below 100 are outside its filter.
NS = range(96, 136)
#: Small runs and a poison partition among few: n = 0, 7, 14, ... fail every run.
PLANS = plans(limits=(8, 4, 8), poison=7)


@dataclass
class Made:
    store: Store
    ledger: Path
    plans: list[ConsumerPlan]

    def judge(self) -> consumer_audit.Audit:
        return consumer_audit.audit(consumer_audit.read(self.store),
                                    consumer_audit.parse(self.ledger), self.plans)

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines()

    def write(self, lines: list[str]) -> None:
        self.ledger.write_text("".join(f"{line}\n" for line in lines))


def consume_all(harness: Harness, ledger: Path) -> None:
    """Consuming jobs, one per consumer with lag at a time, until none has lag."""
    store = harness.store
    for _ in range(200):
        behind = [plan for plan in PLANS
                  if store.consumers.get("default", DATASET, plan.name).lag > 0]
        if not behind:
            return
        ids = [submit(store, **job_spec(plan, ledger, 0.0, 0.0, index))
               for index, plan in enumerate(behind)]
        harness.claim()
        for job_id in ids:
            harness.finished(job_id)
    raise AssertionError("the consumers never caught up")


def build(store: Store, ledger: Path) -> Made:
    """The dataset, its consumers and partitions, all consumed by real runs."""
    store.datasets.create(parse_dataset({"name": DATASET, "key": KEY}))
    for plan in PLANS:
        store.consumers.put(parse_consumer({"dataset": DATASET, "name": plan.name,
                                            "processing_limit": plan.limit,
                                            "max_retries": plan.max_retries,
                                            "filter": plan.filter}))
    store.partitions.add("default", DATASET, [partition(n) for n in NS])
    harness = Harness(store)
    try:
        consume_all(harness, ledger)
    finally:
        harness.close()
    return Made(store, ledger, PLANS)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean history on SQLite, made once: each wrong one starts from a copy."""
    directory = tmp_path_factory.mktemp("consumer-history")
    store = Store(f"sqlite:///{directory / 'jobserver.db'}")
    store.upgrade()
    try:
        build(store, directory / "ledger")
    finally:
        store.dispose()
    return directory


@pytest.fixture
def made(template: Path, tmp_path: Path) -> Iterator[Made]:
    for name in ("jobserver.db", "ledger"):
        shutil.copy(template / name, tmp_path / name)
    store = Store(f"sqlite:///{tmp_path / 'jobserver.db'}")
    yield Made(store, tmp_path / "ledger", PLANS)
    store.dispose()


def _counted(made: Made, consumer: str) -> list[consumer_audit.Line]:
    """The ``ok`` lines of ``consumer``'s runs that SUCCEEDed, in file order."""
    history = consumer_audit.read(made.store)
    found = []
    for index, raw in enumerate(made.lines()):
        name, partition_id, n, job, attempt, fence, node, phase, at = raw.split()
        if name == consumer and phase == "ok" and (int(job), int(attempt)) in \
                history.succeeded:
            found.append(consumer_audit.Line(name, int(partition_id), int(n), int(job),
                                             int(attempt), int(fence), node, phase,
                                             float(at), index))
    return found


def forget_success(made: Made) -> None:
    line = _counted(made, "all")[0]
    with made.store.tx.write() as conn:
        conn.execute(delete(events).where(events.c.job_id == line.job,
                                          events.c.attempt == line.attempt,
                                          events.c.step.is_(None),
                                          events.c.to_state == "SUCCEED"))


def process_twice(made: Made) -> None:
    first, last = _counted(made, "all")[0], _counted(made, "all")[-1]
    again = (f"all {first.partition} {first.n} {last.job} {last.attempt} {last.fence} "
             f"{last.node}")
    made.write(made.lines() + [f"{again} take {last.at}", f"{again} ok {last.at}"])


def hand_after_success(made: Made) -> None:
    first = _counted(made, "odd")[0]
    other = _counted(made, "odd")[-1]
    again = (f"odd {first.partition} {first.n} {other.job} 9 {other.fence} {other.node}")
    made.write(made.lines() + [f"{again} take {other.at + 1}"])


def hand_filtered(made: Made) -> None:
    line = _counted(made, "ab")[-1]
    outside = next(record for record in consumer_audit.read(made.store).partitions.values()
                   if record.key["w"] in ("c", "d"))
    made.write(made.lines() + [f"ab {outside.id} {outside.key['n']} {line.job} "
                               f"{line.attempt} {line.fence} {line.node} take {line.at}"])


def fail_early(made: Made) -> None:
    with made.store.tx.write() as conn:
        conn.execute(update(working_sets).where(working_sets.c.state == "FAILED")
                     .values(attempts=3))


def leave_new(made: Made) -> None:
    with made.store.tx.write() as conn:
        conn.execute(update(working_sets).where(working_sets.c.state == "FAILED")
                     .values(state="NEW"))


def fail_but_succeed(made: Made) -> None:
    line = _counted(made, "odd")[0]
    lines = made.lines()
    lines[line.index] = lines[line.index].replace(" ok ", " fail ")
    made.write(lines)


def overlap(made: Made) -> None:
    first, last = _counted(made, "all")[0], _counted(made, "all")[-1]
    lines = made.lines()
    take = next(raw for raw in lines if raw.startswith(f"all {first.partition} ")
                and " take " in raw)
    inside = float(take.split()[-1]) + (first.at - float(take.split()[-1])) / 2
    lines.insert(first.index, f"all {first.partition} {first.n} {last.job} 9 "
                              f"{last.fence} {last.node} take {inside}")
    made.write(lines)


def miscount(made: Made) -> None:
    with made.store.tx.write() as conn:
        conn.execute(update(consumers).values(processed=consumers.c.processed + 1))


def test_a_clean_history_passes(store: Store, tmp_path: Path) -> None:
    result = build(store, tmp_path / "ledger").judge()
    assert result.problems == []
    wanted = {plan.name: sum(1 for n in NS
                             if plan.wants(partition(n)["key"], partition(n)["metadata"]))
              for plan in PLANS}
    assert {name: result.processed[name] + result.failed[name] for name in wanted} == wanted
    assert result.failed["ab"] > 0 and result.failed["all"] == result.failed["odd"] == 0
    assert result.failed_runs and not result.killed_runs


@pytest.mark.parametrize(("alter", "finding"), [
    (forget_success, "was lost: never processed, not FAILED"),
    (process_twice, "processed successfully 2 times"),
    (hand_after_success, "after its success in run"),
    (hand_filtered, "does not match the filter, yet was handed"),
    (fail_early, "is FAILED but after 3 attempts, not 4"),
    (leave_new, "was lost: never processed, not FAILED; row NEW"),
    (fail_but_succeed, "SUCCEEDed, but its step failed"),
    (overlap, "at once"),
    (miscount, "the store counts"),
], ids=lambda value: getattr(value, "__name__", "finding"))
def test_each_wrong_history_is_found(made: Made, alter: Callable[[Made], None],
                                     finding: str) -> None:
    alter(made)
    problems = made.judge().problems
    assert any(finding in problem for problem in problems), problems

