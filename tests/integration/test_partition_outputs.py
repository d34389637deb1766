"""Job steps add partitions: a shell step through ``JOBSERVER_PARTITIONS_OUT``, a
python step by returning a ``StepResult``; added when the step succeeds, checked like
an API batch, and bad output fails the step with a message and adds nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobserver.datasets.spec import parse_dataset
from jobserver.states import Operation, State
from jobserver.steps import StepResult
from jobserver.store import Store
from tests.integration.test_runner import PYTHON_STEPS, Harness, submit


def _returns(ctx: Any, partitions: list[dict[str, Any]]) -> StepResult:
    return StepResult(metrics={"partitions": len(partitions)}, partitions=partitions)


PYTHON_STEPS.register("test.partitions", _returns)


@pytest.fixture
def harness(store: Store) -> Iterator[Harness]:
    store.datasets.create(parse_dataset({"name": "raw", "key": [
        {"name": "date", "type": "date"}, {"name": "hour", "type": "int"}]}))
    h = Harness(store)
    yield h
    h.close()


def shell(*lines: str) -> dict[str, Any]:
    """A shell step writing ``lines`` to its partitions file."""
    text = "\n".join(lines)
    return {"name": "write", "type": "shell",
            "argv": ["sh", "-c", f"printf '%s\\n' '{text}' > \"$JOBSERVER_PARTITIONS_OUT\""]}


def stored(store: Store) -> list[tuple[dict[str, Any], int | None, str | None]]:
    _, page, _ = store.partitions.list("default", "raw", [], newest_first=False)
    return [(p.key, p.job_id, p.step) for p in page]


def test_a_shell_step_adds_the_partitions_it_writes(harness: Harness) -> None:
    job_id = submit(harness.store, steps=[
        shell('{"dataset": "raw", "key": {"date": "2026-11-01", "hour": 1}, "location": "/a"}',
              '{"dataset": "default/raw", "key": {"date": "2026-11-01", "hour": 2}, '
              '"location": "/b", "metadata": {"rows": 5}}'),
        {"name": "after", "type": "noop"}])
    harness.claim()
    assert harness.finished(job_id).state is State.SUCCEED
    assert stored(harness.store) == [({"date": "2026-11-01", "hour": 1}, job_id, "write"),
                                     ({"date": "2026-11-01", "hour": 2}, job_id, "write")]


def test_a_python_step_returns_partitions(harness: Harness) -> None:
    job_id = submit(harness.store, steps=[{
        "name": "py", "type": "python", "callable": "test.partitions", "args": {"partitions": [
            {"dataset": "raw", "key": {"date": "2026-11-02", "hour": h}, "location": "/p"}
            for h in range(3)]}}])
    harness.claim()
    job = harness.finished(job_id)
    assert job.state is State.SUCCEED and job.steps[0].metrics == {"partitions": 3}
    assert [key["hour"] for key, _, step in stored(harness.store)] == [0, 1, 2]


def test_a_rerun_step_finds_its_own_partitions(harness: Harness) -> None:
    """The same job's same step adds the same keys again (a rerun, or a run after its
    node died): they are there already, and the step succeeds."""
    job_id = submit(harness.store, steps=[
        shell('{"dataset": "raw", "key": {"date": "2026-11-01", "hour": 1}, "location": "/a"}')])
    harness.claim()
    assert harness.finished(job_id).state is State.SUCCEED
    harness.store.jobs.apply(job_id, Operation.RERUN)
    harness.claim()
    assert harness.finished(job_id).state is State.SUCCEED
    assert len(stored(harness.store)) == 1


@pytest.mark.parametrize("line,message", [
    ('{"dataset": "raw", "key": {"date": "2026-11-01"}, "location": "/a"}',
     "partition output #1: key.hour: missing"),
    ('{"dataset": "raw", "key": {"date": "2026-11-01", "hour": "x"}, "location": "/a"}',
     "partition output #1: key.hour: expected an integer"),
    ('{"dataset": "nope", "key": {"date": "2026-11-01", "hour": 1}, "location": "/a"}',
     "partition output #1: dataset default/nope does not exist"),
    ("not json", "JOBSERVER_PARTITIONS_OUT line 1: not valid JSON"),
])
def test_bad_output_fails_the_step_and_adds_nothing(harness: Harness, line: str,
                                                    message: str) -> None:
    good = '{"dataset": "raw", "key": {"date": "2026-11-05", "hour": 1}, "location": "/a"}'
    job_id = submit(harness.store, steps=[
        {**shell(line, good), "retries": 2, "retry_backoff": 0}])
    harness.claim()
    job = harness.finished(job_id)
    assert job.state is State.ERROR and message in job.error, job.error
    assert job.steps[0].attempt == 1  # the same output would fail again: not retried
    assert stored(harness.store) == []


def test_a_key_added_by_someone_else_fails_the_step(harness: Harness) -> None:
    harness.store.partitions.add("default", "raw", [
        {"key": {"date": "2026-11-01", "hour": 1}, "location": "/api"}])
    job_id = submit(harness.store, steps=[
        shell('{"dataset": "raw", "key": {"date": "2026-11-01", "hour": 2}, "location": "/a"}',
              '{"dataset": "raw", "key": {"date": "2026-11-01", "hour": 1}, "location": "/b"}')])
    harness.claim()
    job = harness.finished(job_id)
    assert job.state is State.ERROR and "already has the partition" in job.error
    assert "(date=2026-11-01, hour=1)" in job.error
    assert [key["hour"] for key, _, _ in stored(harness.store)] == [1]  # hour 2: not added


def test_a_failed_step_adds_nothing(harness: Harness) -> None:
    step = shell('{"dataset": "raw", "key": {"date": "2026-11-01", "hour": 1}, "location": "/a"}')
    step["argv"][2] += "; exit 3"
    job_id = submit(harness.store, steps=[step])
    harness.claim()
    assert harness.finished(job_id).state is State.ERROR
    assert stored(harness.store) == []
