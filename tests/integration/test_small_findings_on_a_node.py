"""Smaller findings of issues 33 and 34, as a user meets them on a running ``jobserver
serve`` (both stores) and a running launcher: a ``:name::type`` cast is refused when
the job is submitted, a shell comment leaves a view's version alone, the launcher's
banner names the PostgreSQL store it runs on, ``ui.secure_cookies = always`` marks
the dashboard's cookies Secure, and a config token no request could match stops
``serve`` with a message. The rules themselves have unit or Flask-client tests
(test_sql_steps, test_view_checksums, test_cluster_banner, test_ui_sessions,
test_config); these show them through the processes a user starts."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.helpers import job_spec, write_postgres_cluster_config
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401
from tests.integration.nodes import JOBSERVER, TOKEN, Harness
from tests.integration.test_sql_steps import CAST, CAST_MESSAGE


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_CONNECTIONS__WAREHOUSE__URL": "sqlite:///{data_dir}/warehouse.db",
            # served over plain http here, as behind a TLS proxy gunicorn does not trust
            "JOBSERVER_UI__SECURE_COOKIES": "always"}


def test_a_parameter_cast_is_refused_at_submit_by_a_running_node(
        attack_node: AttackNode) -> None:  # noqa: F811
    name = unique("cast-")
    body = job_spec(name, steps=[{"name": "load", "type": "sql", "connection": "warehouse",
                                  "statements": ["SELECT 1", CAST]}])
    status, reply = attack_node.call("POST", "/api/v1/jobs", body, token="sql")
    assert status == 422, reply
    assert reply["error"]["details"] == [{"field": "steps[0].statements[1]",
                                          "message": CAST_MESSAGE}]
    status, listed = attack_node.call("GET", f"/api/v1/jobs?name_contains={name}")
    assert status == 200 and listed["jobs"] == []


def view(script: str) -> dict[str, Any]:
    return {"structure": {"fields": [{"name": "id", "type": "bigint"}]},
            "transformation": {"job": {"steps": [
                {"name": "copy", "type": "shell", "argv": ["sh", "-c", script]}]}}}


def version(node: AttackNode, path: str, script: str) -> str:
    status, reply = node.call("PUT", path, view(script))
    assert status in (200, 201), reply
    status, reply = node.call("GET", path)
    assert status == 200, reply
    return reply["version_checksum"]


def test_a_shell_comment_leaves_a_views_version_alone_on_a_running_node(
        attack_node: AttackNode) -> None:  # noqa: F811
    path = f"/api/v1/view-definitions/app.comments/{unique('V')}"
    first = version(attack_node, path, 'set -eu\n# copy the day\ncp /in/a.csv /out/\n')
    assert version(attack_node, path, 'set -eu\n# copy one day\ncp /in/a.csv /out/\n') == first
    assert version(attack_node, path, 'set -eu\ncp /in/a.csv /out/  # as before\n') == first
    assert version(attack_node, path, 'set -eu\ncp /in/a.csv /stage/\n') != first


@pytest.mark.postgres
def test_the_launcher_names_its_postgresql_store_in_its_banner(pg_url: str,
                                                              tmp_path: Path) -> None:
    url = make_url(pg_url)
    config = write_postgres_cluster_config(tmp_path / "cluster.toml", pg_url,
                                           tmp_path / "data", TOKEN)
    harness = Harness(tmp_path)
    try:
        launcher = harness.spawn("launcher", harness.cluster_args(1, "--config", str(config)),
                                 harness.base_env())
        head = harness.wait_banner(launcher).splitlines()
        banner = next(line for line in head if line.startswith("jobserver cluster:"))
        assert banner == (f"jobserver cluster: 1 node (store: PostgreSQL {url.host}:"
                          f"{url.port}/{url.database}; locks: PostgreSQL advisory locks; "
                          "single mode)")
    finally:
        harness.cleanup()


def test_secure_cookies_always_marks_the_dashboards_cookie_on_a_running_node(
        attack_node: AttackNode) -> None:  # noqa: F811
    request = urllib.request.Request(attack_node.url + "/ui/sign-in",
                                     headers={"Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=30) as response:
        cookies = response.headers.get_all("Set-Cookie") or []
    sign_in = [cookie for cookie in cookies if cookie.startswith("jobserver_sign_in=")]
    assert len(sign_in) == 1, cookies
    assert "secure" in [part.strip().lower() for part in sign_in[0].split(";")]


def test_a_config_token_no_request_could_match_stops_serve_with_a_message(
        tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    env = harness.base_env(JOBSERVER_DATA_DIR=str(tmp_path / "data"),
                           JOBSERVER_API__TOKENS=f'["{TOKEN}", "short"]')
    done = subprocess.run([*JOBSERVER, "serve"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "api.tokens" in done.stderr and "at least 16 characters" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "data" / "jobserver.db").exists()  # refused before anything
