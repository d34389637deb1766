"""The shapes scenario measures the jobs it says it does: each shape is a job a user
could submit, with the steps, dependencies and sizes of its name; the payload step's
result is the 4 KB it claims; a peer's chain counts only when its last link ran; the
process-start floor counts the calls it made."""

from __future__ import annotations

import json

from bench.peers.shapes import _celery_window
from bench.shapes import SHAPES, _loop, _posix_spawn, shape_spec
from bench.steps import stamp
from jobserver.config import ShellStepConfig
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import State
from jobserver.steps import StepContext
from jobserver.steps.python import PythonSteps


def _validated(shape: str):
    spec = parse_job(json.dumps(shape_spec(shape)))
    return spec, validate_job(spec, Policy(lambda name: name == "bench.stamp", None))


def test_every_shape_is_a_job_a_user_could_submit() -> None:
    for shape in SHAPES:
        spec, _ = _validated(shape)
        assert spec.name == shape


def test_chain5_is_five_noop_steps_each_after_the_one_before() -> None:
    spec, deps = _validated("chain5")
    assert [step.type for step in spec.steps] == ["noop"] * 5
    assert deps == [[], ["s1"], ["s2"], ["s3"], ["s4"]]


def test_payload_has_1kb_of_params_and_its_step_returns_4kb() -> None:
    spec, _ = _validated("payload")
    assert len(spec.params["blob"]) == 1024
    steps = PythonSteps()
    steps.register("bench.stamp", stamp)
    ctx = StepContext(job_id=1, job_name="payload", step="s", attempt=1, job_attempt=1,
                      fence=1, node="n1", params=spec.params, shell=ShellStepConfig())
    outcome = steps.run(shape_spec("payload")["steps"][0], ctx)
    assert outcome.state == State.SUCCEED
    assert len(outcome.metrics["out"]) == 4096


def test_a_celery_chain_is_whole_when_its_last_link_ran_and_counts_by_its_links() -> None:
    done = "2026-01-01T00:00:01+00:00"
    results = [{"status": "SUCCESS", "result": [1767225600.0, n], "date_done": done}
               for n in (1, 2, 3, 4, 5, 1, 2, 3, 4, 1)]
    results.append({"status": "FAILURE", "result": None, "date_done": done})
    whole, failed, units, span = _celery_window(results, "chain5")
    assert (whole, failed, units) == (1, 1, 2.0)
    assert span == 1.0


def test_the_floor_loop_counts_every_process_it_started() -> None:
    row = _loop(_posix_spawn, ["/bin/true"], 2, 0.05)
    assert row["done"] >= 2 and row["jobs_per_s"] > 0 and row["per_call_ms"] > 0
