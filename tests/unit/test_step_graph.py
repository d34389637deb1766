"""StepGraph: which steps of a run may start, as the DAG loop and step threads ask."""

from __future__ import annotations

from jobserver.states import State
from jobserver.stepgraph import StepGraph
from jobserver.store.records import StepRecord


def _step(position: int, name: str, *depends_on: str,
          state: State = State.READY) -> StepRecord:
    return StepRecord(id=position + 1, job_id=1, position=position, name=name, type="noop",
                      spec={}, depends_on=list(depends_on), retries=0, retry_backoff=1.0,
                      retryable=True, state=state)


def _names(taken: list[tuple[StepRecord, bool]]) -> list[tuple[str, bool]]:
    return [(step.name, last) for step, last in taken]


def test_a_chain_hands_each_success_its_successor_and_marks_the_last() -> None:
    steps = [_step(0, "a"), _step(1, "b", "a"), _step(2, "c", "b")]
    graph = StepGraph(steps, parallelism=1)
    assert _names(graph.take()) == [("a", False)]
    assert graph.take() == []  # b waits for a
    assert _names(graph.succeeded(steps[0])) == [("b", False)]
    assert _names(graph.succeeded(steps[1])) == [("c", True)]
    assert graph.succeeded(steps[2]) == [] and graph.pending == []


def test_parallelism_bounds_what_runs_at_once() -> None:
    root = _step(0, "root")
    fan = [_step(i, f"f{i}", "root") for i in range(1, 5)]
    graph = StepGraph([root, *fan], parallelism=2)
    graph.take()
    assert _names(graph.succeeded(root)) == [("f1", False), ("f2", False)]
    assert graph.take() == []  # two run; the room is used up
    assert _names(graph.succeeded(fan[0])) == [("f3", False)]
    assert _names(graph.succeeded(fan[1])) == [("f4", False)]  # f3 still runs: not last


def test_a_failure_halts_and_nothing_more_is_taken() -> None:
    steps = [_step(0, "a"), _step(1, "b"), _step(2, "c", "a")]
    graph = StepGraph(steps, parallelism=2)
    assert _names(graph.take()) == [("a", False), ("b", False)]
    graph.failed(steps[1])
    assert graph.succeeded(steps[0]) == []
    assert [step.name for step in graph.pending] == ["c"]


def test_steps_given_back_are_pending_again_in_position_order() -> None:
    steps = [_step(0, "a"), _step(1, "b", "a"), _step(2, "c", "a"), _step(3, "d")]
    graph = StepGraph(steps, parallelism=3)
    graph.take()  # a and d
    taken = graph.succeeded(steps[0])
    assert _names(taken) == [("b", False), ("c", False)]
    graph.give_back(taken)
    assert [step.name for step in graph.pending] == ["b", "c"]
    assert graph.take() == []  # halted


def test_steps_that_already_succeeded_are_done_from_the_start() -> None:
    steps = [_step(0, "a", state=State.SUCCEED), _step(1, "b", "a")]
    graph = StepGraph(steps, parallelism=1)
    assert _names(graph.take()) == [("b", True)]
