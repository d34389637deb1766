"""The fence check, as a step uses it before an effect outside the job server.

``GET /api/v1/jobs/<id>/fence/<fence>`` on SQLite and PostgreSQL (Flask's test client
on a real store, claims and takeovers through the store's own paths); ``jobserver
fence-check`` against a live API; ``StepContext.fence_is_current`` in a python step
run by a real runner; and a shell step of a real ``jobserver serve`` node calling
``jobserver fence-check`` with nothing but the variables its node gave it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobserver.api import create_app
from jobserver.cli import main
from jobserver.config import load_config
from jobserver.runner import Runner
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.steps import step_types
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from jobserver.store.records import ClaimToken
from tests.helpers import FakeLease, free_port, job_spec, wait_for
from tests.integration.nodes import JOBSERVER, MARK_VAR, TOKEN as NODE_TOKEN, Api, Harness
from tests.integration.test_apply import TOKEN, url  # noqa: F401  (the live API fixture)

AUTH = {"Authorization": f"Bearer {TOKEN}"}
STEP_VARS = ("JOBSERVER_JOB_ID", "JOBSERVER_FENCE", "JOBSERVER_JOB_ATTEMPT", "JOBSERVER_URL",
             "JOBSERVER_TOKEN")


def submit(store: Store, registry: PythonSteps | None = None, **fields: Any) -> int:
    spec = parse_job(json.dumps(job_spec(**fields)))
    registered = (registry or PythonSteps()).is_registered
    job, _ = store.jobs.submit(spec, validate_job(spec, Policy(registered, None)))
    return job.id


def claim(store: Store, node: str, lease: FakeLease | None = None) -> ClaimToken:
    [job] = store.runs.claim(node, lease or FakeLease(store), 1)
    return job.token()


def take_over(store: Store, token: ClaimToken, rescuer: str = "n2") -> ClaimToken:
    """What a rescue does when ``token``'s node is judged dead: the job goes back to
    READY and another node claims it under a newer fence."""
    assert store.servers.requeue_orphans(token.node, rescuer) == [(token.job_id, State.READY)]
    return claim(store, rescuer)


@pytest.fixture
def client(store: Store, tmp_path: Path) -> FlaskClient:
    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), "JOBSERVER_API__TOKENS": TOKEN}
    return create_app(load_config(environ=environ), store=store).test_client()


def check(client: FlaskClient, job_id: int, fence: int | str, attempt: int | None = None,
          headers: dict[str, str] | None = None) -> Any:
    query = "" if attempt is None else f"?attempt={attempt}"
    return client.get(f"/api/v1/jobs/{job_id}/fence/{fence}{query}", headers=headers or AUTH)


def answer(client: FlaskClient, job_id: int, fence: int, attempt: int | None = None
           ) -> dict[str, Any]:
    response = check(client, job_id, fence, attempt)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


# -- the route -------------------------------------------------------------------------------
def test_a_running_claim_is_current_until_another_claim_takes_the_job(
        client: FlaskClient, store: Store) -> None:
    job_id = submit(store)
    first = claim(store, "n1")
    assert answer(client, job_id, first.fence, first.attempt) == {
        "current": True, "job": job_id, "fence": first.fence, "attempt": first.attempt,
        "state": "RUNNING", "claim": {"node": "n1", "fence": first.fence, "attempt": 1}}
    assert answer(client, job_id, first.fence)["current"] is True  # the attempt is optional
    assert answer(client, job_id, first.fence + 1)["current"] is False
    assert answer(client, job_id, first.fence, first.attempt + 1)["current"] is False

    second = take_over(store, first)
    assert second.fence > first.fence and second.attempt == first.attempt + 1
    stale = answer(client, job_id, first.fence, first.attempt)
    assert stale == {"current": False, "job": job_id, "fence": first.fence,
                     "attempt": first.attempt, "state": "RUNNING",
                     "claim": {"node": "n2", "fence": second.fence, "attempt": 2}}
    assert answer(client, job_id, first.fence)["current"] is False
    assert answer(client, job_id, second.fence, second.attempt)["current"] is True


def test_a_claim_again_under_the_same_fence_is_told_apart_by_the_attempt(
        client: FlaskClient, store: Store) -> None:
    job_id = submit(store)
    lease = FakeLease(store)
    first = claim(store, "n1", lease)
    store.jobs.apply(job_id, Operation.PAUSE)
    assert answer(client, job_id, first.fence, first.attempt)["state"] == "STOPPED"
    assert answer(client, job_id, first.fence, first.attempt)["current"] is False
    store.jobs.apply(job_id, Operation.RESUME)
    again = claim(store, "n1", lease)  # the same node, under the same lease
    assert (again.fence, again.attempt) == (first.fence, first.attempt + 1)
    assert answer(client, job_id, first.fence, first.attempt)["current"] is False
    assert answer(client, job_id, again.fence, again.attempt)["current"] is True
    # Without the attempt the check cannot tell the two runs apart.
    assert answer(client, job_id, first.fence)["current"] is True


def test_a_job_not_running_is_never_current(client: FlaskClient, store: Store) -> None:
    waiting = submit(store)
    assert answer(client, waiting, 0) == {
        "current": False, "job": waiting, "fence": 0, "attempt": None, "state": "READY",
        "claim": {"node": None, "fence": 0, "attempt": 0}}
    token = claim(store, "n1")
    assert store.runs.finish_job(token, State.SUCCEED)
    done = answer(client, waiting, token.fence, token.attempt)
    assert (done["current"], done["state"]) == (False, "SUCCEED")


@pytest.mark.parametrize("fence,attempt,field", [
    ("abc", None, "fence"), ("-1", None, "fence"), ("01", None, "fence"),
    ("1.5", None, "fence"), (str(2**63), None, "fence"), ("1", "x", "attempt"),
    ("1", "-1", "attempt")])
def test_a_bad_fence_or_attempt_is_a_422_naming_it(client: FlaskClient, store: Store,
                                                   fence: str, attempt: str | None,
                                                   field: str) -> None:
    job_id = submit(store)
    query = "" if attempt is None else f"?attempt={attempt}"
    response = client.get(f"/api/v1/jobs/{job_id}/fence/{fence}{query}", headers=AUTH)
    assert response.status_code == 422 and response.is_json, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == "invalid_request" and error["details"][0]["field"] == field
    unknown = client.get(f"/api/v1/jobs/{job_id}/fence/1?colour=red", headers=AUTH)
    assert unknown.status_code == 422
    assert unknown.get_json()["error"]["details"][0]["field"] == "colour"


def test_an_unknown_job_is_a_404(client: FlaskClient, store: Store) -> None:
    for path in ("/api/v1/jobs/99/fence/1", "/api/v1/jobs/abc/fence/1",
                 f"/api/v1/jobs/{10**20}/fence/1"):
        response = client.get(path, headers=AUTH)
        assert response.status_code == 404 and response.is_json, path
        assert response.get_json()["error"]["code"] == "not_found"
    assert "job 99 does not exist" in check(client, 99, 1).get_json()["error"]["message"]


def test_a_fence_token_checks_fences_and_reads_nothing_else(client: FlaskClient,
                                                            store: Store) -> None:
    job_id = submit(store)
    token = claim(store, "n1")
    _, fence_only = store.tokens.create("steps", ["fence"])
    _, reader = store.tokens.create("reader", ["read"])
    _, submitter = store.tokens.create("ci", ["submit"])
    for secret in (fence_only, reader):
        response = check(client, job_id, token.fence, token.attempt,
                         {"Authorization": f"Bearer {secret}"})
        assert response.status_code == 200 and response.get_json()["current"] is True
    refused = client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization":
                                                             f"Bearer {fence_only}"})
    assert refused.status_code == 403
    assert refused.get_json()["error"]["details"]["required_scope"] == "read"
    response = check(client, job_id, token.fence, None, {"Authorization": f"Bearer {submitter}"})
    assert response.status_code == 403
    assert response.get_json()["error"]["details"]["required_scope"] == "fence"


# -- the python step's helper ------------------------------------------------------------------
def test_a_python_step_sees_its_claim_current_then_stale_after_a_takeover(
        store: Store) -> None:
    seen: list[bool] = []

    def guarded(ctx: Any) -> dict[str, int]:
        seen.append(ctx.fence_is_current())
        take_over(store, ClaimToken(ctx.job_id, ctx.node, ctx.fence, ctx.job_attempt))
        seen.append(ctx.fence_is_current())
        return {"effects": 0}

    steps = PythonSteps()
    steps.register("test.guarded", guarded)
    config = load_config(environ={})
    runner = Runner(store, step_types(steps), config.steps.shell, 2)
    runner.start()
    try:
        job_id = submit(store, steps, steps=[{"name": "s", "type": "python",
                                              "callable": "test.guarded"}])
        [job] = store.runs.claim("n1", FakeLease(store), 1)
        execution = runner.submit(job)
        wait_for(lambda: runner.running_count() == 0, 15, what="the run to end")
    finally:
        runner.cancel_all("test over")
        runner.wait_idle(10)
        runner.shutdown()
    assert seen == [True, False]
    assert execution.fenced_off  # its final write was refused too
    after = store.jobs.get(job_id)
    assert (after.state, after.node, after.attempt) == (State.RUNNING, "n2", 2)


# -- the command -------------------------------------------------------------------------------
@pytest.fixture
def fence_check(url: str, capsys: pytest.CaptureFixture[str],  # noqa: F811
                monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """``jobserver fence-check ARGS`` with ``env`` as the step's variables."""
    def call(*args: str, env: dict[str, str] | None = None,
             target: str | None = None, token: str = TOKEN) -> tuple[int, str, str]:
        for name in STEP_VARS:
            monkeypatch.delenv(name, raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        code = main(["fence-check", *args, "--url", target or url, "--token", token])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        return code, captured.out, captured.err
    return call


def step_vars(token: ClaimToken) -> dict[str, str]:
    return {"JOBSERVER_JOB_ID": str(token.job_id), "JOBSERVER_FENCE": str(token.fence),
            "JOBSERVER_JOB_ATTEMPT": str(token.attempt)}


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_the_command_exits_0_while_current_and_1_once_stale(
        fence_check: Callable[..., tuple[int, str, str]], store: Store) -> None:
    job_id = submit(store)
    first = claim(store, "n1")
    assert fence_check(env=step_vars(first)) == (
        0, f"job {job_id}: current (RUNNING under fence {first.fence}, attempt 1, on n1)\n", "")
    assert fence_check("--job", str(job_id), "--fence", str(first.fence))[0] == 0
    second = take_over(store, first)
    code, out, err = fence_check(env=step_vars(first))
    assert (code, err) == (1, "")
    assert out == (f"job {job_id}: stale (fence {first.fence}, attempt 1 asked; the job is "
                   f"RUNNING under fence {second.fence}, attempt 2, on n2)\n")
    assert fence_check("-q", env=step_vars(first)) == (1, "", "")
    assert fence_check("-q", env=step_vars(second)) == (0, "", "")
    assert fence_check("--job", str(job_id), "--fence", str(first.fence), "--attempt", "1",
                       env=step_vars(second))[0] == 1  # the options win over the variables


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_the_command_exits_2_in_one_line_when_it_cannot_answer(
        fence_check: Callable[..., tuple[int, str, str]], store: Store) -> None:
    job_id = submit(store)
    token = claim(store, "n1")
    cases = [
        ((), {}, "JOBSERVER_JOB_ID and JOBSERVER_FENCE not set"),
        ((), {"JOBSERVER_JOB_ID": str(job_id)}, "JOBSERVER_FENCE not set"),
        ((), {**step_vars(token), "JOBSERVER_FENCE": "x"}, "JOBSERVER_FENCE: 'x' is not"),
        (("--fence", "1"), {}, "give --job and --fence together"),
        (("--job", "abc", "--fence", "1"), {}, "--job: 'abc' is not an integer"),
        (("--job", "0", "--fence", "1"), {}, "--job: '0' is not an integer of at least 1"),
        (("--job", "99", "--fence", "1"), {}, "job 99 does not exist"),
    ]
    for args, env, message in cases:
        code, out, err = fence_check(*args, env=env)
        assert (code, out) == (2, ""), (args, env, code, out, err)
        assert err.startswith("jobserver fence-check: ") and message in err, err
        assert err.count("\n") == 1, err
    code, _, err = fence_check(env=step_vars(token), token="wrong-token-0123456789abcdef")
    assert (code, err) == (2, "jobserver fence-check: invalid token\n")
    code, _, err = fence_check(env=step_vars(token), target=f"http://127.0.0.1:{free_port()}")
    assert code == 2 and "cannot reach the API" in err and err.count("\n") == 1


# -- a real node --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_shell_step_of_a_real_node_checks_its_own_claim(tmp_path: Path) -> None:
    """The operator's setup from docs/jobs.md ("Guarding outside effects"): a token in
    the node's environment, passed to steps through ``steps.shell.env_passthrough``;
    the node adds ``JOBSERVER_URL``."""
    harness = Harness(tmp_path)
    try:
        port, effect = free_port(), tmp_path / "effect.txt"
        command = " ".join(shlex.quote(part) for part in JOBSERVER)
        node = harness.start_node(
            "node-1", port, tmp_path / "data", JOBSERVER_TOKEN=NODE_TOKEN,
            JOBSERVER_STEPS__SHELL__ENV_PASSTHROUGH=json.dumps(
                ["PATH", "HOME", MARK_VAR, "JOBSERVER_TOKEN"]))
        api = Api(f"http://127.0.0.1:{port}", NODE_TOKEN)
        harness.wait_nodes_ready(api, [node], port)
        job_id = api.submit(job_spec(name="guarded", steps=[
            {"name": "check", "type": "shell", "argv": [*JOBSERVER, "fence-check"]},
            {"name": "publish", "type": "shell", "argv": ["/bin/sh", "-c", (
                f'echo "$JOBSERVER_URL"; if {command} fence-check -q; then '
                f'echo "$JOBSERVER_JOB_ATTEMPT" > {shlex.quote(str(effect))}; fi')]}]))
        job = api.wait_job(job_id, timeout=30)
        steps = {step["name"]: step for step in api.job(job_id)["steps"]}
        assert steps["check"]["exit_code"] == 0, steps["check"]
        assert steps["check"]["output"].strip() == (
            f"job {job_id}: current (RUNNING under fence {job['fence']}, attempt 1, "
            "on node-1)")
        assert steps["publish"]["output"].strip() == f"http://127.0.0.1:{port}"
        assert effect.read_text() == "1\n"
        # The job is over: its claim is stale now, and the command says so (exit 1).
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
        result = subprocess.run(
            [*JOBSERVER, "fence-check", "--job", str(job_id), "--fence", str(job["fence"]),
             "--attempt", "1", "--url", f"http://127.0.0.1:{port}", "--token", NODE_TOKEN],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert result.returncode == 1, result.stderr
        assert result.stdout.startswith(f"job {job_id}: stale (fence {job['fence']}, attempt 1 "
                                        "asked; the job is SUCCEED"), result.stdout
        assert harness.terminate(node) == 0, node.tail()
    finally:
        harness.cleanup()


@pytest.mark.parametrize("bind,url", [("127.0.0.1:8080", "http://127.0.0.1:8080"),
                                      ("0.0.0.0:9000", "http://127.0.0.1:9000"),
                                      ("jobs.internal:80", "http://jobs.internal:80"),
                                      ("unix:/run/jobserver.sock", None)])
def test_a_step_is_pointed_at_its_own_nodes_api(bind: str, url: str | None) -> None:
    config = load_config(environ={"JOBSERVER_API__BIND": bind})
    assert config.api.local_url() == url
