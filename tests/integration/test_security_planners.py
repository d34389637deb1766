"""The planners obey the engine's rules, tried as an attacker would against a real
``jobserver serve`` on each store: a parameter is data, a scope is a scope, every job a
request creates counts against its token, and the planners record who asked.

The views are the shipped ``examples/views.yaml``, applied by an admin; the attacker
holds a stored token with ``read,submit`` unless a test says otherwise.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from jobserver.store.tables import jobs
from tests.helpers import wait_for
from tests.integration.attack import apply_example_views, AttackNode, attack_node, unique  # noqa: F401

WAREHOUSE = "{data_dir}/warehouse.db"


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    # A warehouse the sql steps may reach, holding a table an attacker wants gone.
    return {"JOBSERVER_CONNECTIONS__WAREHOUSE__URL": f"sqlite:///{WAREHOUSE}"}


@pytest.fixture(scope="module")
def node(attack_node: AttackNode) -> AttackNode:  # noqa: F811
    """The node with the example lattice applied and the warehouse's secrets table."""
    apply_example_views(attack_node)
    with sqlite3.connect(attack_node.data_dir / "warehouse.db") as conn:
        conn.execute("CREATE TABLE secrets (name TEXT, value TEXT)")
        conn.execute("INSERT INTO secrets VALUES ('api', 'hunter2')")
    return attack_node


def job_names(node: AttackNode, like: str) -> list[str]:
    with node.store.tx.read() as conn:
        return list(conn.execute(select(jobs.c.name).where(jobs.c.name.like(like))).scalars())


def job_ids(node: AttackNode, like: str) -> list[int]:
    with node.store.tx.read() as conn:
        return list(conn.execute(select(jobs.c.id).where(jobs.c.name.like(like))
                                 .order_by(jobs.c.id)).scalars())


def error(status: int, reply: Any, expected: int) -> dict[str, Any]:
    assert status == expected, (status, reply)
    return reply["error"]


# -- 1. a view parameter is data ---------------------------------------------------------
def test_a_shell_payload_in_a_pattern_is_refused_before_planning(node: AttackNode,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    value = f"x;id>{urllib.parse.quote(str(target), safe='')};"
    pattern = f"app.eci.stage/Search/{value}/2015/05/03"
    failure = error(*node.call("POST", "/api/v1/views/materialize",
                               {"pattern": pattern, "mode": "TRANSFORM_ONLY"}, "submit"), 422)
    assert failure["details"][0]["field"] == "pattern"
    assert "is not a string" in failure["message"] and "expected a match" in failure["message"]
    # Schedoscope's GET form and the dashboard's form take the same path.
    error(*node.call("GET", f"/api/v1/materialize/{pattern}?mode=TRANSFORM_ONLY",
                     token="submit"), 422)
    status, page = node.browser("submit").form(
        "/ui/views/materialize", {"pattern": pattern, "mode": "TRANSFORM_ONLY", "digest": "x"})
    assert status == 422 and "is not a string" in page, (status, page[:500])
    assert job_names(node, "view app.eci.stage/Search/x%") == []
    assert not target.exists()


def test_a_template_may_not_paste_a_parameter_into_code(node: AttackNode) -> None:
    name = f"app.sec/{unique('Paste')}"
    for step, field in (
            ({"type": "shell", "argv": ["sh", "-c", "echo ${shop}"]}, "argv[2]"),
            ({"type": "sql", "connection": "warehouse",
              "statements": ["SELECT '${shop}'"]}, "statements[0]")):
        body = {"parameters": [{"name": "shop"}], "structure": {"fields": [
            {"name": "id", "type": "bigint"}]}, "transformation": {"job": {"steps": [
                {"name": "t", **step}]}}}
        failure = error(*node.call("PUT", f"/api/v1/view-definitions/{name}", body), 422)
        assert failure["details"][0]["field"] == f"transformation.job.steps[0].{field}"
        assert "JOBSERVER_PARAM_SHOP" in failure["message"]
    error(*node.call("GET", f"/api/v1/view-definitions/{name}"), 404)


def test_a_sql_value_is_bound_never_spliced(node: AttackNode) -> None:
    """A view that lets any value through its own pattern still cannot reach the
    warehouse with it: the sql step binds ``:who`` as a value."""
    name = f"app.sec/{unique('Bound')}"
    body = {"parameters": [{"name": "who", "pattern": "[^/]{1,80}"}],
            "structure": {"fields": [{"name": "id", "type": "bigint"}]},
            "transformation": {"job": {"steps": [{
                "name": "q", "type": "sql", "connection": "warehouse",
                "statements": ["SELECT count(*) FROM secrets WHERE name = :who"]}]}}}
    status, reply = node.call("PUT", f"/api/v1/view-definitions/{name}", body)
    assert status == 201, reply
    evil = "x'; DELETE FROM secrets; SELECT '"
    status, reply = node.call("POST", "/api/v1/views/materialize",
                              {"pattern": f"{name}/{evil}", "mode": "TRANSFORM_ONLY"}, "submit")
    assert status == 200, reply
    job_id = reply["decisions"][0]["job_id"]
    job = node.api().wait_job(job_id, timeout=60)
    assert job["params"]["who"] == evil
    with sqlite3.connect(node.data_dir / "warehouse.db") as conn:
        assert conn.execute("SELECT count(*) FROM secrets").fetchone() == (1,)


def test_a_value_cannot_climb_out_of_the_data_root(node: AttackNode) -> None:
    """``..`` is no value (12): the flag outside ``views.data_root`` is never looked
    for, and SET_ONLY cannot mark such a partition materialized."""
    outside = node.data_dir / "views" / "source" / "x"  # beside source/search/
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "_SUCCESS").touch()
    for mode in ("DEFAULT", "SET_ONLY"):
        failure = error(*node.call("POST", "/api/v1/views/materialize", {
            "pattern": "app.eci.source/Search/../x/e()/e()", "mode": mode}, "submit"), 422)
        assert failure["details"][0]["field"] == "pattern"
        assert "'..' is not a string (shop)" in failure["message"]
    status, reply = node.call("GET", "/api/v1/views?pattern=app.eci.source/Search/../x/e()/e()",
                              token="read")
    assert status == 422, reply
    assert job_names(node, "view app.eci.source/Search/..%") == []


# -- 7. switching a schedule is an operator's act ---------------------------------------
def schedule(name: str, **more: Any) -> dict[str, Any]:
    return {"namespace": "sec", "name": name, "trigger": {"type": "time", "cron": "0 3 * * *"},
            "template": {"name": "nightly", "steps": [{"name": "a", "type": "noop"}]}, **more}


def test_submit_cannot_switch_a_schedule_through_its_body(node: AttackNode) -> None:
    name = unique("sw")
    failure = error(*node.call("POST", "/api/v1/schedules", schedule(name, enabled=True),
                               "submit"), 403)
    assert failure["details"][0]["field"] == "enabled" and "operate" in failure["message"]
    error(*node.call("GET", f"/api/v1/schedules/sec/{name}", token="read"), 404)
    status, reply = node.call("PUT", f"/api/v1/schedules/sec/{name}", schedule(name), "submit")
    assert status == 201 and reply["schedule"]["enabled"] is False, reply
    error(*node.call("PUT", f"/api/v1/schedules/sec/{name}", schedule(name, enabled=True),
                     "submit"), 403)
    assert node.call("GET", f"/api/v1/schedules/sec/{name}", token="read")[1]["enabled"] is False
    # Saying what it already is switches nothing; operate may switch it.
    assert node.call("PUT", f"/api/v1/schedules/sec/{name}", schedule(name, enabled=False),
                     "submit")[0] == 200
    status, reply = node.call("PUT", f"/api/v1/schedules/sec/{name}",
                              schedule(name, enabled=True), "operate")
    assert status == 200 and reply["schedule"]["enabled"] is True, reply


# -- 8 and 11. every job counts against its requester, who is recorded -----------------
def test_a_materialize_is_charged_per_job_and_names_its_requester(node: AttackNode) -> None:
    _, secret = node.store.tokens.create(unique("burst"), ["read", "submit"])
    pattern = "app.eci.stage/Search/SHOP77/rymd(20150101-20151231)"  # 365 partitions
    status, reply = node.call("POST", "/api/v1/views/materialize",
                              {"pattern": pattern, "mode": "TRANSFORM_ONLY"}, token="admin",
                              headers={"Authorization": f"Bearer {secret}"})
    failure = error(status, reply, 429)
    assert "365 jobs exceeds api.submit_burst (200)" in failure["message"]
    assert job_names(node, "view app.eci.stage/Search/SHOP77/%") == []
    status, reply = node.call("POST", "/api/v1/views/materialize", {
        "pattern": "app.eci.stage/Search/SHOP77/rymd(20150101-20150102)",
        "mode": "TRANSFORM_ONLY"}, token="submit")
    assert status == 200 and reply["counts"] == {"transform": 2}, reply
    job = node.api().job(reply["decisions"][0]["job_id"])
    assert job["submitted_by"]["name"] == "views for attacker-submit", job["submitted_by"]
    assert job["submitted_by"]["token_id"] is not None


def test_who_changed_a_definition_is_recorded(node: AttackNode) -> None:
    name = unique("hist")
    path = f"/api/v1/schedules/sec/{name}"
    assert node.call("PUT", path, schedule(name), "submit")[0] == 201
    assert node.call("PUT", path, schedule(name), "submit")[0] == 200  # unchanged
    assert node.call("PUT", f"{path}?dry_run=true", schedule(name, description="x"),
                     "submit")[0] == 200
    status, _ = node.browser("operate").form(f"/ui/schedules/sec/{name}/enable", {})
    assert status in (200, 303), status
    assert node.call("DELETE", path, token="operate")[0] == 204
    status, reply = node.call("GET", f"/api/v1/changes?resource={path}", token="read")
    assert status == 200, reply
    seen = [(c["method"], c["action"], c["outcome"], c["actor"]["name"])
            for c in reversed(reply["changes"])]
    assert seen == [("PUT", "schedules.put_schedule", "created", "attacker-submit"),
                    ("POST", "ui.schedule_switch", "303", "attacker-operate"),
                    ("DELETE", "schedules.delete_schedule", "204", "attacker-operate")], seen
    assert all(c["actor"]["token_id"] is not None for c in reply["changes"])


def test_a_shell_step_reads_the_values_from_its_environment(node: AttackNode) -> None:
    """The example lattice's way: the shell text names variables, the values arrive
    in the environment (and in the job's params)."""
    status, reply = node.call("POST", "/api/v1/views/materialize", {
        "pattern": "app.eci.stage/Search/SHOP42/2015/05/03", "mode": "TRANSFORM_ONLY"},
        "submit")
    assert status == 200, reply
    job = node.api().wait_job(reply["decisions"][0]["job_id"], timeout=60)
    assert job["params"]["shop"] == "SHOP42"
    request = urllib.request.Request(f"{node.url}/api/v1/jobs/{job['id']}/steps/clean/log",
                                     headers={"Authorization": f"Bearer {node.tokens['read']}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        log = response.read().decode()
    assert "cleaning search SHOP42 2015-05-03" in log, log


# -- batches: a run is charged per stage job, names its requester, passes its context --
def batch_config(system: str) -> dict[str, Any]:
    script = 'echo "loading $JOBSERVER_PARAM_SYSTEM $JOBSERVER_PARAM_BUSINESS_DATE"'
    return {"name": system.lower(), "valid_systems": [system], "valid_stages": ["STG"],
            "catch_up_limit": 300,
            "system_stage_mapping": [{"system": system, "stages": ["STG"],
                                      "start_date": "2015-01-01"}],
            "job_group_mapping": [{"system": system, "stage": "STG", "job_group": ["G"]}],
            "job_groups": [{"name": "G", "jobs": [
                {"name": "load", "type": "shell", "argv": ["sh", "-c", script]}]}]}


def test_a_batch_run_is_charged_per_stage_job_and_names_its_requester(
        node: AttackNode) -> None:
    system = unique("S").upper()
    status, reply = node.call("PUT", f"/api/v1/batches/configs/{system.lower()}",
                              batch_config(system))
    assert status in (200, 201), reply
    # 250 business dates: 250 stage jobs, over the burst of 200: refused whole.
    _, secret = node.store.tokens.create(unique("batch"), ["read", "submit"])
    status, reply = node.call("POST", "/api/v1/batches/run", {
        "system": system, "location": "IN", "watermark": "2015-09-07"}, "admin",
        headers={"Authorization": f"Bearer {secret}"})
    failure = error(status, reply, 429)
    assert "250 jobs exceeds api.submit_burst" in failure["message"], failure
    assert job_names(node, f"batch {system}/%") == []
    status, reply = node.call("POST", "/api/v1/batches/run", {
        "system": system, "location": "IN", "watermark": "2015-01-02"}, "submit")
    assert status == 201, reply
    job = node.api().wait_job(job_ids(node, f"batch {system}/%")[0], timeout=60)
    assert job["submitted_by"]["name"] == f"batch {system}/IN for attacker-submit", job
    request = urllib.request.Request(f"{node.url}/api/v1/jobs/{job['id']}/steps/load/log",
                                     headers={"Authorization": f"Bearer {node.tokens['read']}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert f"loading {system} 2015-01-0" in response.read().decode()
