"""Three of the smaller seed-fidelity findings, as a user meets them on a running
``jobserver serve`` (both stores) and a running launcher: a ``:name::type`` cast is
refused when the job is submitted, a shell comment leaves a view's version alone, and
the launcher's banner names the PostgreSQL store it runs on. The rules themselves have
unit tests (test_sql_steps, test_view_checksums, test_cluster_banner); these show
them through the processes a user starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.helpers import job_spec
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401
from tests.integration.nodes import TOKEN, Harness
from tests.integration.test_sql_steps import CAST, CAST_MESSAGE


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_CONNECTIONS__WAREHOUSE__URL": "sqlite:///{data_dir}/warehouse.db"}


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
    config = tmp_path / "cluster.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n'
                      f'[database]\nurl = "{pg_url}"\n'
                      '[lock]\nbackend = "postgres"\n'
                      f'[api]\ntokens = ["{TOKEN}"]\n')
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
