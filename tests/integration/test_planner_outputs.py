"""What steps output and what jobs take in go through the planner seam
(``Planner.job_outputs``, ``JobInputs.check``), on SQLite and PostgreSQL: a plug-in
that takes step outputs gets a shell step's file and a python step's result; without
one, a shell step gets no output file and a step that outputs anyway fails saying so;
without a planner that takes inputs, a job declaring them is refused at submit."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.exceptions import ConfigError
from jobserver.planners.base import Planner
from jobserver.planners.hooks import OutputRefused
from jobserver.states import State
from jobserver.steps import StepResult
from jobserver.store import Store
from jobserver.store.hooks import PlannerHooks
from jobserver.store.records import ClaimToken
from tests.helpers import job_spec
from tests.integration.test_runner import PYTHON_STEPS, Harness, submit

TOKEN = "outputs-token-0123456789abcdef"


def _returns(ctx: Any, items: list[dict[str, Any]]) -> StepResult:
    return StepResult(partitions=items)


PYTHON_STEPS.register("test.outputs", _returns)


class Collected:
    """A plug-in's step outputs: lines of ``ACME_OUT``, kept in a list; an item with
    ``"bad"`` is refused."""

    env = "ACME_OUT"

    def __init__(self) -> None:
        self.added: list[tuple[int, str, list[Any]]] = []

    def read(self, path: Path) -> list[Any]:
        return [json.loads(line) for line in path.read_text().splitlines()] \
            if path.exists() else []

    def add(self, token: ClaimToken, step: str, items: list[Any]) -> int:
        if any("bad" in item for item in items):
            raise OutputRefused("acme: a bad item")
        self.added.append((token.job_id, step, items))
        return len(items)


class Collects(Planner):
    name = "collects"

    def __init__(self) -> None:
        self.outputs = Collected()

    def job_outputs(self, store: Store) -> Any:
        return self.outputs


@contextmanager
def running(store: Store, planners: Sequence[Planner]) -> Iterator[Harness]:
    """A runner over ``store``'s database with only ``planners`` installed."""
    other = Store(store.url, planners=planners)
    harness = Harness(other)
    try:
        yield harness
    finally:
        harness.close()
        other.dispose()


def run(harness: Harness, *steps: dict[str, Any]) -> Any:
    job_id = submit(harness.store, steps=list(steps))
    harness.claim()
    return harness.finished(job_id)


def test_a_plug_in_taking_outputs_gets_what_steps_output(store: Store) -> None:
    planner = Collects()
    with running(store, [planner]) as harness:
        job = run(harness,
                  {"name": "sh", "type": "shell",
                   "argv": ["sh", "-c", 'echo \'{"n": 1}\' > "$ACME_OUT"']},
                  {"name": "py", "type": "python", "callable": "test.outputs",
                   "args": {"items": [{"n": 2}]}, "depends_on": ["sh"]})
        assert job.state is State.SUCCEED
        assert planner.outputs.added == [(job.id, "sh", [{"n": 1}]),
                                         (job.id, "py", [{"n": 2}])]
        refused = run(harness, {"name": "py", "type": "python", "callable": "test.outputs",
                                "args": {"items": [{"bad": True}]}})
        assert refused.state is State.ERROR and "acme: a bad item" in refused.error


def test_without_a_planner_taking_outputs_a_step_that_outputs_fails(store: Store) -> None:
    with running(store, []) as harness:
        assert harness.store.hooks.outputs is None
        quiet = run(harness, {"name": "sh", "type": "shell", "argv": [
            "sh", "-c", 'test -z "${JOBSERVER_PARTITIONS_OUT+set}"']})
        assert quiet.state is State.SUCCEED  # no output file is offered
        job = run(harness, {"name": "py", "type": "python", "callable": "test.outputs",
                            "args": {"items": [{"n": 1}]}})
        assert job.state is State.ERROR
        assert "no installed planner takes step outputs" in job.error
        assert job.steps[0].attempt == 1  # not retried


def test_two_planners_may_not_both_take_outputs(store: Store) -> None:
    again = type("Again", (Collects,), {"name": "again"})()
    with pytest.raises(ConfigError, match="collects, again all take job outputs"):
        PlannerHooks().install([Collects(), again], store)


def test_without_a_planner_taking_inputs_a_job_with_inputs_is_refused(
        store: Store, tmp_path: Path) -> None:
    bare = Store(store.url, planners=[])
    try:
        environ = {"JOBSERVER_DATA_DIR": str(tmp_path), "JOBSERVER_API__TOKENS": TOKEN}
        client = create_app(load_config(environ=environ), store=bare).test_client()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        job = job_spec(inputs=[{"dataset": "raw", "consumer": "cleanse"}])
        for path, body, field in (("/api/v1/jobs", job, "inputs"),
                                  ("/api/v1/jobs/batch", {"jobs": [job]}, "jobs[0].inputs")):
            response = client.post(path, json=body, headers=headers)
            assert response.status_code == 422, response.get_data(as_text=True)
            details = response.get_json()["error"]["details"]
            assert [d["field"] for d in details] == [field]
        plain = client.post("/api/v1/jobs", json=job_spec(), headers=headers)
        assert plain.status_code == 201, plain.get_data(as_text=True)
    finally:
        bare.dispose()
