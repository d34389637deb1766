"""The security checks of the API, the store's tokens, ``serve`` and ZooKeeper ACLs.

API tests run on SQLite and PostgreSQL (the ``store`` fixture). Unknown fields, the body
size cap, pagination caps and malformed input have their cases in ``test_api.py``; the
output cap of shell steps is in ``test_runner.py``. This file covers the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select, update

from jobserver import cli
from jobserver.api import create_app
from jobserver.config import Config, load_config
from jobserver.exceptions import ConfigError
from jobserver.security import check_serve_auth
from jobserver.steps.python import PythonSteps
from jobserver.store import Store
from jobserver.store.engine import store_now
from jobserver.store.tables import api_tokens
from jobserver.store.tokens import SCOPES
from tests.helpers import free_port, job_spec
from tests.integration.nodes import JOBSERVER, listeners
from tests.integration.test_api import ROUTES

CONFIG_TOKEN = "config-token-0123456789abcdef"
JSON = "application/json"
ACTIONS = ("pause", "resume", "rerun", "discard")

# Which scope each route needs, written out by hand (not read from the code).
ROUTE_SCOPES = {("get", "/api/v1/jobs"): "read", ("post", "/api/v1/jobs"): "submit",
                ("post", "/api/v1/jobs/batch"): "submit",
                ("get", "/api/v1/jobs/1"): "read", ("get", "/api/v1/jobs/1/events"): "read",
                # The token handed to steps: the fence check only ('read' includes it).
                ("get", "/api/v1/jobs/1/fence/7"): "fence",
                ("get", "/api/v1/jobs/1/steps/s1/log"): "read",
                ("get", "/api/v1/cluster"): "read", ("get", "/api/v1/openapi.json"): "read",
                ("get", "/api/v1/changes"): "read",
                ("get", "/metrics"): "read",
                **{("post", f"/api/v1/jobs/1/{action}"): "operate" for action in ACTIONS},
                # A schedule submits jobs later: creating or changing one needs submit
                # (and shell for shell templates); switching it needs operate.
                ("get", "/api/v1/schedules"): "read", ("post", "/api/v1/schedules"): "submit",
                ("get", "/api/v1/schedules/default/nightly"): "read",
                ("put", "/api/v1/schedules/default/nightly"): "submit",
                ("delete", "/api/v1/schedules/default/nightly"): "operate",
                ("post", "/api/v1/schedules/default/nightly/enable"): "operate",
                ("post", "/api/v1/schedules/default/nightly/disable"): "operate",
                ("get", "/api/v1/schedules/default/nightly/jobs"): "read",
                ("get", "/api/v1/schedules/default/nightly/evaluations"): "read",
                # A dataset is data, not work: declaring one and adding partitions
                # needs submit; deleting either needs operate.
                ("get", "/api/v1/datasets"): "read", ("post", "/api/v1/datasets"): "submit",
                ("get", "/api/v1/datasets/default/nightly"): "read",
                ("put", "/api/v1/datasets/default/nightly"): "submit",
                ("delete", "/api/v1/datasets/default/nightly"): "operate",
                ("get", "/api/v1/datasets/default/nightly/partitions"): "read",
                ("post", "/api/v1/datasets/default/nightly/partitions"): "submit",
                ("delete", "/api/v1/datasets/default/nightly/partitions"): "operate",
                # Consumers as datasets: declaring needs submit; deleting one and
                # retrying its FAILED partitions operate.
                ("get", "/api/v1/datasets/default/nightly/consumers"): "read",
                ("get", "/api/v1/datasets/default/nightly/consumers/c1"): "read",
                ("put", "/api/v1/datasets/default/nightly/consumers/c1"): "submit",
                ("delete", "/api/v1/datasets/default/nightly/consumers/c1"): "operate",
                ("post", "/api/v1/datasets/default/nightly/consumers/c1/reset-failed"):
                    "operate",
                # A view definition is a job template: saving one, and materializing
                # (which submits its jobs), need submit; deleting and invalidating operate.
                ("get", "/api/v1/view-definitions"): "read",
                ("get", "/api/v1/view-definitions/app.pkg/Sales"): "read",
                ("put", "/api/v1/view-definitions/app.pkg/Sales"): "submit",
                ("delete", "/api/v1/view-definitions/app.pkg/Sales"): "operate",
                ("post", "/api/v1/views/materialize"): "submit",
                ("get", "/api/v1/materialize/app.pkg/Sales"): "submit",
                ("post", "/api/v1/views/invalidate"): "operate",
                ("get", "/api/v1/views"): "read",
                # Batch configs as view definitions; a run launches stage jobs: submit.
                ("get", "/api/v1/batches"): "read", ("get", "/api/v1/batches/audit"): "read",
                ("post", "/api/v1/batches/run"): "submit",
                ("get", "/api/v1/batches/runs/7"): "read",
                ("get", "/api/v1/batches/configs"): "read",
                ("get", "/api/v1/batches/configs/nightly"): "read",
                ("put", "/api/v1/batches/configs/nightly"): "submit",
                ("delete", "/api/v1/batches/configs/nightly"): "operate"}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def make_client(store: Store, tmp_path: Path) -> Callable[..., FlaskClient]:
    def build(config_tokens: bool = True, python_steps: PythonSteps | None = None,
              **env: str) -> FlaskClient:
        environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "data"), **env}
        if config_tokens:
            environ["JOBSERVER_API__TOKENS"] = CONFIG_TOKEN
        app = create_app(load_config(environ=environ), store=store, python_steps=python_steps)
        return app.test_client()
    return build


def post_job(client: FlaskClient, secret: str, spec: dict[str, Any] | None = None):
    return client.post("/api/v1/jobs", data=json.dumps(spec or job_spec()), content_type=JSON,
                       headers=bearer(secret))


def error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.get_data(True))
    return response.get_json()["error"]


def shell_job(name: str = "sh") -> dict[str, Any]:
    return job_spec(name=name, steps=[{"name": "a", "type": "noop"},
                                      {"name": "b", "type": "shell", "argv": ["true"]}])


# -- tokens in the store ------------------------------------------------------------------
def test_stored_tokens_keep_only_a_hash(store: Store) -> None:
    token, secret = store.tokens.create("ci", ["read", "submit"])
    assert secret.startswith("jst_") and len(secret) >= 40
    assert (token.name, token.scopes, token.expires_at, token.revoked_at) == \
        ("ci", ("read", "submit"), None, None)
    with store.tx.read() as conn:
        row = conn.execute(select(api_tokens)).mappings().one()
    assert row["token_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert not any(secret in str(value) for value in row.values()), "secret stored in clear"
    other, other_secret = store.tokens.create("ci", ["read"])
    assert other_secret != secret and other.id != token.id  # names need not be unique
    with pytest.raises(ValueError, match="unknown scope"):
        store.tokens.create("x", ["read", "root"])
    with pytest.raises(ValueError, match="name"):
        store.tokens.create("bad name", ["read"])


def test_every_route_needs_its_scope(make_client: Callable[..., FlaskClient],
                                     store: Store) -> None:
    assert set(ROUTE_SCOPES) == set(ROUTES), "a route without a documented scope"
    client = make_client()
    assert post_job(client, CONFIG_TOKEN).status_code == 201  # job 1 for the job routes
    for scope in SCOPES:
        token, secret = store.tokens.create(f"only-{scope}", [scope])
        for (method, path), needed in ROUTE_SCOPES.items():
            body = json.dumps(job_spec(name="by-" + scope)) if path == "/api/v1/jobs" else None
            response = getattr(client, method)(path, headers=bearer(secret), data=body,
                                               content_type=JSON if body else None)
            if scope == needed or (scope, needed) == ("read", "fence"):
                assert response.status_code not in (401, 403), (scope, method, path)
                continue
            err = error(response, 403)
            assert err["code"] == "forbidden" and needed in err["message"]
            assert err["details"] == {"required_scope": needed, "token": f"only-{scope}",
                                      "token_id": token.id}
            assert secret not in response.get_data(as_text=True)
    # Forbidden requests changed nothing: only the submit token's job was added.
    assert sorted(job.name for job in store.jobs.list()[0]) == ["by-submit", "job"]


def test_revoked_expired_and_unknown_tokens_are_401(make_client: Callable[..., FlaskClient],
                                                     store: Store) -> None:
    client = make_client()
    token, secret = store.tokens.create("soon-gone", ["read"], expires_in=3600)
    assert client.get("/api/v1/jobs", headers=bearer(secret)).status_code == 200
    with store.tx.write() as conn:  # an hour later
        conn.execute(update(api_tokens).where(api_tokens.c.id == token.id)
                     .values(expires_at=store_now(-1)))
    assert error(client.get("/api/v1/jobs", headers=bearer(secret)), 401)["message"] == \
        "token expired"
    assert store.tokens.get(token.id).expired and not store.tokens.get(token.id).active

    revoked, revoked_secret = store.tokens.create("leaked", ["read", "submit"])
    assert post_job(client, revoked_secret).status_code == 201
    store.tokens.revoke(revoked.id)
    response = post_job(client, revoked_secret)
    assert error(response, 401)["message"] == "token revoked"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    first = store.tokens.get(revoked.id).revoked_at
    assert store.tokens.revoke(revoked.id).revoked_at == first  # revoking again: no change

    for guess in (secret[:-1], "jst_" + "A" * 43, hashlib.sha256(secret.encode()).hexdigest()):
        assert error(client.get("/api/v1/jobs", headers=bearer(guess)), 401)["message"] == \
            "invalid token"
    assert store.jobs.count_by_state() == {"READY": 1}


def test_last_use_is_recorded(make_client: Callable[..., FlaskClient], store: Store) -> None:
    client = make_client()
    token, secret = store.tokens.create("watched", ["read"])
    assert token.last_used_at is None
    assert client.get("/api/v1/cluster", headers=bearer(secret)).status_code == 200
    used = store.tokens.get(token.id).last_used_at
    assert used is not None
    assert client.get("/api/v1/cluster", headers=bearer(secret)).status_code == 200
    assert store.tokens.get(token.id).last_used_at == used  # at most once a minute


def test_there_is_no_default_token(make_client: Callable[..., FlaskClient],
                                   store: Store) -> None:
    assert Config().api.tokens == [] and Config().api.auth is True
    client = make_client(config_tokens=False)
    for guess in ("", "changeme", "admin", "token", "secret", "jobserver", "null", CONFIG_TOKEN):
        response = client.get("/api/v1/jobs", headers=bearer(guess) if guess else {})
        assert response.status_code == 401, guess
    assert client.get("/healthz").status_code == 200  # the one public route


def test_config_tokens_have_every_scope(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client()
    assert post_job(client, CONFIG_TOKEN, shell_job()).status_code == 201
    assert client.post("/api/v1/jobs/1/pause", headers=bearer(CONFIG_TOKEN)).status_code == 200
    assert client.get("/metrics", headers=bearer(CONFIG_TOKEN)).status_code == 200


def test_shell_steps_need_the_shell_scope(make_client: Callable[..., FlaskClient],
                                          store: Store) -> None:
    client = make_client()
    _, plain = store.tokens.create("plain", ["submit"])
    _, shell = store.tokens.create("sheller", ["submit", "shell"])
    _, shell_only = store.tokens.create("shell-only", ["shell"])
    assert post_job(client, plain).status_code == 201  # noop steps: submit is enough
    err = error(post_job(client, plain, shell_job()), 403)
    assert err["code"] == "forbidden"
    assert [d["field"] for d in err["details"]] == ["steps[1].type"]
    assert "shell" in err["message"]
    assert store.jobs.count_by_state() == {"READY": 1}  # nothing stored
    assert error(post_job(client, shell_only, shell_job()), 403)["details"]["required_scope"] \
        == "submit"
    assert post_job(client, shell, shell_job()).status_code == 201
    assert store.jobs.count_by_state() == {"READY": 2}


def test_submits_are_rate_limited_per_token(make_client: Callable[..., FlaskClient],
                                            store: Store) -> None:
    client = make_client(JOBSERVER_API__SUBMIT_RATE="0.01", JOBSERVER_API__SUBMIT_BURST="2")
    fast, fast_secret = store.tokens.create("fast", ["submit", "read"])
    _, other_secret = store.tokens.create("other", ["submit"])
    assert [post_job(client, fast_secret).status_code for _ in range(2)] == [201, 201]
    response = post_job(client, fast_secret)
    err = error(response, 429)
    assert err["code"] == "rate_limited"
    retry_after = response.headers["Retry-After"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    assert err["details"] == {"token": "fast", "token_id": fast.id,
                              "retry_after": int(retry_after)}
    assert "'fast'" in err["message"] and fast_secret not in response.get_data(as_text=True)
    # Reads are not limited, and other callers have buckets of their own.
    assert client.get("/api/v1/jobs", headers=bearer(fast_secret)).status_code == 200
    assert post_job(client, other_secret).status_code == 201
    assert post_job(client, CONFIG_TOKEN).status_code == 201
    assert store.jobs.count_by_state() == {"READY": 4}


def test_every_answer_names_its_node(make_client: Callable[..., FlaskClient]) -> None:
    """Nodes may share an address: each answer, refusals and errors included, says
    which one gave it."""
    client = make_client(JOBSERVER_SERVER__ID="node-7", JOBSERVER_API__SUBMIT_BURST="1",
                         JOBSERVER_API__SUBMIT_RATE="0.01")
    answers = [client.get("/healthz"), client.get("/api/v1/jobs"),
               client.get("/api/v1/jobs", headers=bearer(CONFIG_TOKEN)),
               client.get("/api/v1/jobs/999999", headers=bearer(CONFIG_TOKEN)),
               client.get("/no/such/route", headers=bearer(CONFIG_TOKEN)),
               post_job(client, CONFIG_TOKEN), post_job(client, CONFIG_TOKEN)]
    assert [answer.status_code for answer in answers] == [200, 401, 200, 404, 404, 201, 429]
    assert {answer.headers["X-Jobserver-Node"] for answer in answers} == {"node-7"}


def test_auth_off_needs_no_token(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(config_tokens=False, JOBSERVER_API__AUTH="false")
    assert client.get("/api/v1/jobs").status_code == 200
    assert post_job(client, "anything", shell_job()).status_code == 201


# -- caps on what a request may carry -------------------------------------------------------
def _steps(count: int) -> list[dict[str, Any]]:
    return [{"name": f"s{i}", "type": "noop"} for i in range(count)]


CAPS = [
    ("name", job_spec(name="n" * 201), "name"),
    ("lock_key", job_spec(lock_key="k" * 201), "lock_key"),
    ("steps", job_spec(steps=_steps(201)), "steps"),
    ("step-name", job_spec(steps=[{"name": "s" * 101, "type": "noop"}]), "steps[0].name"),
    ("argv-item", job_spec(steps=[{"name": "a", "type": "shell", "argv": ["x" * 8193]}]),
     "steps[0].argv[0]"),
    ("argv-length", job_spec(steps=[{"name": "a", "type": "shell", "argv": ["x"] * 257}]),
     "steps[0].argv"),
    ("env-size", job_spec(steps=[{"name": "a", "type": "shell", "argv": ["true"],
                                  "env": {f"V{i}": "x" for i in range(65)}}]), "steps[0].env"),
    ("params", job_spec(params={"blob": "x" * (64 * 1024)}), "params"),
    ("python-args", job_spec(steps=[{"name": "a", "type": "python", "callable": "probe",
                                     "args": {"blob": "x" * (64 * 1024)}}]), "steps[0].args"),
    ("assigned-servers", job_spec(assigned_servers=[f"n{i}" for i in range(65)]),
     "assigned_servers"),
    ("retries", job_spec(steps=[{"name": "a", "type": "noop", "retries": 21}]),
     "steps[0].retries"),
]


@pytest.mark.parametrize("spec,field", [pytest.param(s, f, id=i) for i, s, f in CAPS])
def test_size_caps_name_the_field(make_client: Callable[..., FlaskClient], store: Store,
                                  spec: dict[str, Any], field: str) -> None:
    steps = PythonSteps()
    steps.register("probe", lambda ctx, **kw: None)
    client = make_client(python_steps=steps, JOBSERVER_API__MAX_BODY_BYTES=str(4 << 20))
    err = error(post_job(client, CONFIG_TOKEN, spec), 422)
    assert field in [d["field"] for d in err["details"]], err
    assert store.jobs.count_by_state() == {}


def test_params_just_under_the_cap_are_accepted(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client()
    blob = "x" * (64 * 1024 - len('{"blob":""}'))
    assert post_job(client, CONFIG_TOKEN, job_spec(params={"blob": blob})).status_code == 201


NON_JSON_NUMBERS = [
    ('{"name": "x", "steps": [{"name": "a", "type": "noop"}], "params": {"x": NaN}}', "params"),
    ('{"name": "x", "steps": [{"name": "a", "type": "noop"}], "params": {"x": [Infinity]}}',
     "params"),
    ('{"name": "x", "steps": [{"name": "a", "type": "python", "callable": "probe", '
     '"args": {"x": -Infinity}}]}', "steps[0].args"),
    ('{"name": "x", "steps": [{"name": "a", "type": "sleep", "seconds": NaN}]}',
     "steps[0].seconds"),
]


@pytest.mark.parametrize("body,field", NON_JSON_NUMBERS)
def test_nan_and_infinity_are_refused(make_client: Callable[..., FlaskClient], store: Store,
                                      body: str, field: str) -> None:
    """Python's JSON parser accepts them; PostgreSQL's json type and clients do not (this
    was a 500 on PostgreSQL and a response that was not JSON on SQLite)."""
    steps = PythonSteps()
    steps.register("probe", lambda ctx, **kw: None)
    client = make_client(python_steps=steps)
    response = client.post("/api/v1/jobs", data=body, content_type=JSON,
                           headers=bearer(CONFIG_TOKEN))
    assert field in [d["field"] for d in error(response, 422)["details"]]
    assert store.jobs.count_by_state() == {}


def test_operation_bodies_are_capped_too(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(JOBSERVER_API__MAX_BODY_BYTES="2048")
    assert post_job(client, CONFIG_TOKEN).status_code == 201
    response = client.post("/api/v1/jobs/1/pause", data="{" + " " * 4096 + "}",
                           content_type=JSON, headers=bearer(CONFIG_TOKEN))
    assert error(response, 413)["details"] == {"field": "body"}


# -- request strings are never code ---------------------------------------------------------
PROBE_MODULE = "jobserver_probe_never_imported"


def test_python_steps_only_by_registered_name(make_client: Callable[..., FlaskClient],
                                              store: Store, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / f"{PROBE_MODULE}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef fn(ctx):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    steps = PythonSteps()
    steps.register("demo.count_words", lambda ctx, **kw: None)
    client = make_client(python_steps=steps)
    for name in (f"{PROBE_MODULE}:fn", f"{PROBE_MODULE}.fn", "os.system", "builtins.eval",
                 "subprocess.run", "__import__", "jobserver.demo:count_words",
                 "jobserver.demo.count_words"):
        spec = job_spec(steps=[{"name": "a", "type": "python", "callable": name}])
        err = error(post_job(client, CONFIG_TOKEN, spec), 422)
        assert [d["field"] for d in err["details"]] == ["steps[0].callable"], name
    assert not marker.exists() and PROBE_MODULE not in sys.modules
    assert store.jobs.count_by_state() == {}
    spec = job_spec(steps=[{"name": "a", "type": "python", "callable": "demo.count_words"}])
    assert post_job(client, CONFIG_TOKEN, spec).status_code == 201


# -- serve refuses to start unsafe ---------------------------------------------------------
def _serve_config(store: Store, tmp_path: Path, **env: str) -> Config:
    return load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                                "JOBSERVER_DATABASE__URL": store.url, **env})


def test_serve_needs_a_config_or_stored_token(store: Store, tmp_path: Path) -> None:
    config = _serve_config(store, tmp_path)
    with pytest.raises(ConfigError) as refused:
        check_serve_auth(config)
    for hint in ("api.tokens", "JOBSERVER_API__TOKENS", "jobserver token create"):
        assert hint in refused.value.message
    token, _ = store.tokens.create("ops", ["read"])
    check_serve_auth(config)  # a stored token is enough
    store.tokens.revoke(token.id)
    with pytest.raises(ConfigError):
        check_serve_auth(config)
    check_serve_auth(_serve_config(store, tmp_path, JOBSERVER_API__TOKENS=CONFIG_TOKEN))


def test_serve_needs_a_token_table_too(tmp_path: Path) -> None:
    """A database never migrated has no tokens; serve refuses instead of crashing."""
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path / "fresh")})
    with pytest.raises(ConfigError, match="api.tokens"):
        check_serve_auth(config)


@pytest.mark.timeout(60)
def test_serve_with_auth_off_refuses_a_public_bind(tmp_path: Path) -> None:
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("JOBSERVER_")}
    env.update(JOBSERVER_DATA_DIR=str(tmp_path / "data"), JOBSERVER_API__AUTH="false",
               JOBSERVER_API__BIND=f"0.0.0.0:{port}", JOBSERVER_SERVER__ID="node-open")
    result = subprocess.run(JOBSERVER + ["serve"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=45)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "api.auth" in result.stderr and "loopback" in result.stderr, result.stderr
    assert not listeners(port)


# -- jobserver token create|list|revoke ----------------------------------------------------
def test_token_commands(store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch,
                        make_client: Callable[..., FlaskClient]) -> None:
    monkeypatch.delenv("JOBSERVER_CONFIG", raising=False)
    monkeypatch.setenv("JOBSERVER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JOBSERVER_DATABASE__URL", store.url)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = run("token", "create", "--name", "ci", "--scopes", "read,submit",
                         "--expires-in", "30d")
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("jst_") and "\n" not in secret and "only once" in err
    code, out, _ = run("token", "create", "--name", "deployer", "--scopes", "submit", "--shell")
    deployer_secret = out.strip()
    assert run("token", "create", "--name", "x", "--scopes", "read,root")[0] == 2
    assert run("token", "create", "--name", "x", "--scopes", "read", "--expires-in", "soon")[0] == 2

    client = make_client(config_tokens=False)
    assert post_job(client, secret).status_code == 201
    assert post_job(client, deployer_secret, shell_job()).status_code == 201

    code, out, _ = run("token", "list")
    assert code == 0 and secret not in out and deployer_secret not in out
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["ID", "NAME", "SCOPES", "EXPIRES", "REVOKED"]
    assert lines[1].split()[:3] == ["1", "ci", "read,submit"]
    assert lines[2].split()[:4] == ["2", "deployer", "submit,shell", "never"]
    listed = json.loads(run("token", "list", "--json")[1])
    assert [(t["id"], t["name"], t["active"]) for t in listed] == [(1, "ci", True),
                                                                   (2, "deployer", True)]
    assert listed[0]["expires_at"] and listed[0]["last_used_at"]

    code, out, _ = run("token", "revoke", "1")
    assert code == 0 and "revoked" in out
    assert error(post_job(client, secret), 401)["message"] == "token revoked"
    assert post_job(client, deployer_secret).status_code == 201
    assert json.loads(run("token", "list", "--json")[1])[0]["active"] is False
    assert run("token", "revoke", "99")[0] == 1


# -- ZooKeeper ACLs ------------------------------------------------------------------------
def test_zookeeper_nodes_are_private_with_credentials(zookeeper: str, tmp_path: Path) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from jobserver.node import make_lock_backend

    root = f"/jobserver-acl-{uuid.uuid4().hex[:8]}"
    config = load_config(environ={
        "JOBSERVER_DATA_DIR": str(tmp_path), "JOBSERVER_LOCK__BACKEND": "zookeeper",
        "JOBSERVER_ZOOKEEPER__HOSTS": zookeeper, "JOBSERVER_ZOOKEEPER__ROOT": root,
        "JOBSERVER_ZOOKEEPER__AUTH": "digest:jobserver:s3cret-pass",
        "JOBSERVER_SERVER__ID": "node-acl"})
    assert "s3cret" not in repr(config)
    store = Store(f"sqlite:///{tmp_path / 'fences.db'}")  # no fence is drawn here
    backend = make_lock_backend(config, store)
    strangers = [KazooClient(hosts=zookeeper),
                 KazooClient(hosts=zookeeper, auth_data=[("digest", "jobserver:wrong")])]
    try:
        lease = backend.acquire("scheduler/global", blocking=False)
        assert lease is not None
        path = backend._path("scheduler/global")
        [child] = backend._client.get_children(path)
        acl = backend._client.get_acls(f"{path}/{child}")[0]
        assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acl] == \
            [("digest", "jobserver", 31)]
        for stranger in strangers:
            stranger.start(timeout=10)
            for probe in (lambda: stranger.get_children(path),
                          lambda: stranger.get(f"{path}/{child}"),
                          lambda: stranger.delete(f"{path}/{child}"),
                          lambda: stranger.get_children(root),
                          lambda: stranger.create(f"{root}/locks/intruder")):
                with pytest.raises(NoAuthError):
                    probe()
        assert lease.is_valid() and backend.is_held("scheduler/global")
        lease.release()
        assert backend.lock_children("scheduler/global") == 0
    finally:
        for stranger in strangers:
            stranger.stop()
            stranger.close()
        backend.close()
        store.dispose()


def test_zookeeper_without_credentials_keeps_open_acls(zookeeper: str) -> None:
    from kazoo.security import OPEN_ACL_UNSAFE

    from locks.memory import record_nowhere
    from locks.zookeeper import ZooKeeperLockBackend

    backend = ZooKeeperLockBackend(zookeeper, "node-open", record_nowhere,
                                   root=f"/jobserver-open-{uuid.uuid4().hex[:8]}")
    try:
        lease = backend.acquire("k", blocking=False)
        path = backend._path("k")
        [child] = backend._client.get_children(path)
        assert backend._client.get_acls(f"{path}/{child}")[0] == OPEN_ACL_UNSAFE
        lease.release()
    finally:
        backend.close()


# -- the PostgreSQL role needs rights on its own schema only --------------------------------
def test_postgres_role_needs_only_its_own_schema(pg_url: str, tmp_path: Path) -> None:
    """The grants of docs/security.md ("The PostgreSQL role"), applied to a fresh role
    and database: migrations, submits, claims, tokens, advisory locks and LISTEN/NOTIFY
    all work without superuser, without CREATEDB and without any right on the
    ``public`` schema."""
    import select as select_module

    import psycopg2
    from sqlalchemy import create_engine, text

    from jobserver.store import WAKE_CHANNEL
    from locks.postgres import PostgresLockBackend
    from tests.conftest import PG_ADMIN_URL
    from tests.helpers import FakeLease

    suffix = uuid.uuid4().hex[:8]
    role, database = f"jobserver_role_{suffix}", f"jobserver_role_db_{suffix}"
    server = PG_ADMIN_URL.rsplit("/", 1)[0]
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"))
        conn.execute(text(f"CREATE DATABASE {database}"))
        conn.execute(text(f"REVOKE ALL ON DATABASE {database} FROM PUBLIC"))
        conn.execute(text(f"GRANT CONNECT ON DATABASE {database} TO {role}"))
    in_db = create_engine(f"{server}/{database}", isolation_level="AUTOCOMMIT")
    with in_db.connect() as conn:
        conn.execute(text("REVOKE ALL ON SCHEMA public FROM PUBLIC"))
        conn.execute(text(f"CREATE SCHEMA jobserver AUTHORIZATION {role}"))
        conn.execute(text(f"ALTER ROLE {role} IN DATABASE {database} SET search_path = jobserver"))
    in_db.dispose()
    url = server.replace("//postgres@", f"//{role}@") + f"/{database}"
    store = Store(url)
    backend = None
    try:
        store.upgrade()
        job, _ = store.jobs.submit(*_parsed(job_spec()))
        claimed = store.runs.claim("node-a", FakeLease(store), limit=1)
        assert [j.id for j in claimed] == [job.id]
        _, secret = store.tokens.create("ops", ["read"])
        assert store.tokens.authenticate(secret).token is not None
        with store.tx.read() as conn:
            schemas = {row[0] for row in conn.execute(text(
                "SELECT DISTINCT table_schema FROM information_schema.tables "
                "WHERE table_name IN ('jobs', 'api_tokens', 'alembic_version')"))}
            assert schemas == {"jobserver"}
            assert conn.execute(text("SELECT rolsuper FROM pg_roles "
                                     "WHERE rolname = current_user")).scalar() is False
        with pytest.raises(Exception, match="permission denied"):
            with store.tx.write() as conn:
                conn.execute(text("CREATE TABLE public.probe (x int)"))

        backend = PostgresLockBackend(url, "node-a", next_fence=store.epochs.bump,
                                      holder_of=store.epochs.holder)
        lease = backend.acquire("scheduler/global", blocking=False)
        assert lease is not None and backend.is_held("scheduler/global")
        lease.release()

        listener = psycopg2.connect(host="127.0.0.1", port=5432, user=role, dbname=database)
        listener.autocommit = True
        try:
            listener.cursor().execute(f"LISTEN {WAKE_CHANNEL}")
            store.jobs.submit(*_parsed(job_spec(name="wakes")))  # NOTIFYs on commit
            assert select_module.select([listener], [], [], 10)[0], "no NOTIFY arrived"
            listener.poll()
            assert [n.channel for n in listener.notifies] == [WAKE_CHANNEL]
        finally:
            listener.close()
    finally:
        if backend is not None:
            backend.close()
        store.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()


def _parsed(spec: dict[str, Any]) -> tuple[Any, list[list[str]]]:
    from jobserver.spec import Policy, parse_job, validate_job

    parsed = parse_job(json.dumps(spec))
    return parsed, validate_job(parsed, Policy(lambda name: False, None))
