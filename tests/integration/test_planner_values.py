"""What planners take in and what they pass on, on a real ``jobserver serve`` per
store: a date-partitioned view addresses real dates only; a schedule's and a batch's
values reach a shell step as data (``JOBSERVER_PARAM_<NAME>``), verbatim; and the
change history names who changed each kind of definition and asked for each planner
action.

The views are the shipped ``examples/views.yaml`` (its daily and monthly views name
their date parameters ``year``, ``month`` and ``day``, typed ``string``).
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from jobserver.store.tables import jobs

from tests.helpers import wait_for
from tests.integration.attack import apply_example_views, AttackNode, attack_env, attack_node, unique  # noqa: F401

#: Shell metacharacters a value carries: each would run something if pasted into code.
EVIL = "x'; touch {target}; echo \"$(touch {target})\" `touch {target}` | true & #"


@pytest.fixture(scope="module")
def node(attack_node: AttackNode) -> AttackNode:  # noqa: F811
    """The node with the example lattice applied."""
    apply_example_views(attack_node)
    return attack_node


def holder(node: AttackNode, prefix: str, scopes: list[str]) -> str:
    """A new token of its own; ``node.call(..., token=<the returned key>)`` uses it."""
    name = unique(prefix)
    node.tokens[name] = node.store.tokens.create(name, scopes)[1]
    return name


def refused(status: int, reply: Any) -> str:
    assert status == 422, (status, reply)
    (detail,) = reply["error"]["details"]
    assert detail["field"] == "pattern", reply
    return str(reply["error"]["message"])


def step_log(node: AttackNode, job_id: int, step: str) -> str:
    request = urllib.request.Request(f"{node.url}/api/v1/jobs/{job_id}/steps/{step}/log",
                                     headers={"Authorization": f"Bearer {node.tokens['read']}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def param_env(log: str) -> dict[str, str]:
    """The ``JOBSERVER_PARAM_*`` variables a step printed with :data:`PRINT_PARAMS`."""
    found = {}
    for line in log.splitlines():
        if line.startswith("PARAM "):
            name, _, value = line[len("PARAM "):].partition("=")
            found[name] = value
    return found


#: Prints each JOBSERVER_PARAM_* variable as one line, values untouched.
PRINT_PARAMS = ('for v in $(env | sed -n "s/^\\(JOBSERVER_PARAM_[A-Z0-9_]*\\)=.*/\\1/p"); '
                'do printf "PARAM %s=%s\\n" "$v" "$(printenv "$v")"; done')


# -- A. a date parameter is a date -------------------------------------------------------
DAY_32 = "app.eci.stage/Search/SHOP1/2015/05/32"
WHY_32 = "2015/05/32 is not a date: '32' is not a day of 2015-05 (day: 01 to 31)"


def test_a_day_that_is_not_in_its_month_is_refused_before_planning(node: AttackNode) -> None:
    for body in ({"pattern": DAY_32}, {"pattern": DAY_32, "plan": True},
                 {"pattern": DAY_32, "mode": "TRANSFORM_ONLY"}):
        message = refused(*node.call("POST", "/api/v1/views/materialize", body, "submit"))
        assert message == f"{DAY_32}: {WHY_32}", message
    quoted = urllib.parse.quote(DAY_32)
    refused(*node.call("GET", f"/api/v1/views?pattern={quoted}", token="read"))
    refused(*node.call("GET", f"/api/v1/views?pattern={quoted}&dependencies=true",
                       token="read"))
    refused(*node.call("GET", f"/api/v1/materialize/{DAY_32}", token="submit"))
    refused(*node.call("POST", "/api/v1/views/invalidate", {"pattern": DAY_32}, "operate"))
    # The day before is a day: the same routes take it.
    status, reply = node.call("GET", "/api/v1/views?pattern=app.eci.stage/Search/SHOP1/2015/"
                                     "05/31&dependencies=true", token="read")
    assert status == 200 and len(reply["views"]) == 3, reply  # Search, its source, Shops
    assert _jobs_named(node, "%SHOP1/2015/05/32%") == []


@pytest.mark.parametrize("pattern, why", [
    ("app.eci.stage/Search/SHOP1/2015/02/29",
     "2015/02/29 is not a date: '29' is not a day of 2015-02 (day: 01 to 28)"),
    ("app.eci.stage/Search/SHOP1/2015/13/01",
     "2015/13/01 is not a date: '13' is not a month (month: 01 to 12)"),
    ("app.eci.stage/Search/SHOP1/15/05/01",
     "15/05/01 is not a date: '15' is not a year (year: 4 digits, 0001 to 9999)"),
    ("app.eci.datamart/SearchExport/SHOP1/2015/00",
     "2015/00 is not a date: '00' is not a month (month: 01 to 12)"),
])
def test_each_value_that_is_not_a_date_is_named(node: AttackNode, pattern: str,
                                                why: str) -> None:
    message = refused(*node.call("POST", "/api/v1/views/materialize",
                                 {"pattern": pattern, "plan": True}, "submit"))
    assert message == f"{pattern}: {why}"


def test_real_dates_leap_days_included_are_planned(node: AttackNode) -> None:
    for dates in ("2016/02/29", "2015/05/31", "rymd(20160228-20160301)", "2000/02/29"):
        status, reply = node.call("POST", "/api/v1/views/materialize", {
            "pattern": f"app.eci.stage/Search/SHOP1/{dates}", "plan": True}, "submit")
        assert status == 200 and reply["counts"], reply


def test_the_dashboard_forms_refuse_a_day_32(node: AttackNode) -> None:
    submitter = node.browser("submit")
    status, page = submitter.open(f"/ui/views/materialize?pattern={urllib.parse.quote(DAY_32)}")
    assert status == 422 and "is not a day of 2015-05 (day: 01 to 31)" in page, page[:500]
    status, page = submitter.form("/ui/views/materialize",
                                  {"pattern": DAY_32, "mode": "DEFAULT", "digest": "x"})
    assert status == 422 and "is not a day of 2015-05 (day: 01 to 31)" in page, page[:500]
    operator = node.browser("operate")
    status, page = operator.form("/ui/views/invalidate", {"pattern": DAY_32})
    assert status == 422 and "is not a day of 2015-05 (day: 01 to 31)" in page, page[:500]
    status, reply = node.call("GET", "/api/v1/views?pattern=app.eci.stage/Search/SHOP1/"
                                     "rymd(20150501-20150531)&overview=true", token="read")
    assert status == 200, reply
    assert _jobs_named(node, "%SHOP1/2015/05/32%") == []


# -- C. a schedule's values reach a shell step as data ---------------------------------
def test_a_schedules_params_reach_its_shell_step_verbatim_and_run_nothing(
        node: AttackNode, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    value = EVIL.format(target=target)
    name = unique("params")
    body = {"namespace": "vals", "name": name, "enabled": True,
            "trigger": {"type": "time", "interval": "1s", "properties": {"tick": "yes"}},
            "properties": {"owner_team": "data;eng"},
            "template": {"name": "show params", "params": {"who": value, "count": 3},
                         "steps": [{"name": "show", "type": "shell",
                                    "argv": ["sh", "-c", PRINT_PARAMS]}]}}
    status, reply = node.call("PUT", f"/api/v1/schedules/vals/{name}", body, "admin")
    assert status == 201, reply

    def ran() -> dict[str, Any] | None:
        _, page = node.call("GET", f"/api/v1/schedules/vals/{name}/jobs", token="read")
        for launch in page["schedule_jobs"]:
            job = node.api().job(launch["job_id"]) if launch.get("job_id") else None
            if job is not None and job["state"] == "SUCCEED":
                return job
        return None

    job = wait_for(ran, 60, 0.2, "a launched job ran")
    assert job is not None
    # Disabling discards the launches ahead of their fire time, not the one that ran.
    assert node.call("POST", f"/api/v1/schedules/vals/{name}/disable", token="operate")[0] == 200
    job_id = job["id"]
    assert job["params"]["who"] == value
    env = param_env(step_log(node, job_id, "show"))
    assert env["JOBSERVER_PARAM_WHO"] == value, env
    assert env["JOBSERVER_PARAM_COUNT"] == "3"
    assert env["JOBSERVER_PARAM_OWNER_TEAM"] == "data;eng"
    assert not target.exists()


# -- D. every batch value reaches a shell step -----------------------------------------
def test_every_batch_value_reaches_a_shell_step(node: AttackNode) -> None:
    system = unique("CTX").upper()
    config = {"name": system.lower(), "valid_systems": [system], "valid_stages": ["STG"],
              "valid_locations": ["IN"],
              "context_columns": [{"name": "region", "values": ["north", "south"]}],
              "system_stage_mapping": [{"system": system, "stages": ["STG"],
                                        "start_date": "2015-01-01"}],
              "job_group_mapping": [{"system": system, "stage": "STG", "job_group": ["G"]}],
              "job_groups": [{"name": "G", "jobs": [
                  {"name": "show", "type": "shell", "argv": ["sh", "-c", PRINT_PARAMS]}]}]}
    status, reply = node.call("PUT", f"/api/v1/batches/configs/{system.lower()}", config)
    assert status in (200, 201), reply
    status, reply = node.call("POST", "/api/v1/batches/run", {
        "system": system, "location": "IN", "watermark": "2015-01-01",
        "context": {"region": "north", "sub_system": "SHIP", "custom1": "c-1"}}, "submit")
    assert status == 201, reply
    (planned,) = reply["plan"]
    job_id = wait_for(lambda: _stage_job(node, system), 30, 0.2, "the stage job")
    assert job_id is not None
    job = node.api().wait_job(job_id, timeout=60)
    env = param_env(step_log(node, job["id"], "show"))
    expected = {"SYSTEM": system, "LOCATION": "IN", "STAGE": "STG",
                "BUSINESS_DATE": "2015-01-01", "REGION": "north", "SUB_SYSTEM": "SHIP",
                "CUSTOM1": "c-1"}
    for key, value in expected.items():
        assert env.get(f"JOBSERVER_PARAM_{key}") == value, (key, env)
    assert env["JOBSERVER_PARAM_BATCH_ID"] == str(planned["batch_id"]), env
    # A python step's ctx.params is the job's params: the same values.
    assert {key.lower(): value for key, value in expected.items()}.items() <= {
        key: str(value) for key, value in job["params"].items()}.items()


def _jobs_named(node: AttackNode, like: str) -> list[int]:
    with node.store.tx.read() as conn:
        return list(conn.execute(select(jobs.c.id).where(jobs.c.name.like(like))).scalars())


def _stage_job(node: AttackNode, system: str) -> int | None:
    with node.store.tx.read() as conn:
        return conn.execute(select(jobs.c.id).where(jobs.c.name.like(f"batch {system}/%"))
                            ).scalars().first()


# -- B. who changed what, for every kind ------------------------------------------------
def test_the_history_names_who_changed_each_kind_and_what(node: AttackNode) -> None:
    who = {kind: holder(node, f"hist-{kind}-", scopes) for kind, scopes in (
        ("dataset", ["read", "submit"]), ("consumer", ["read", "submit"]),
        ("view", ["read", "submit"]), ("config", ["read", "submit", "shell"]),
        ("materialize", ["read", "submit"]), ("run", ["read", "submit"]),
        ("form", ["read", "submit"]), ("invalidate", ["read", "operate"]))}
    dataset, view, system = unique("ds"), f"app.hist/{unique('V')}", unique("H").upper()
    shop = unique("SHOP").upper()
    done = [
        ("PUT", f"/api/v1/datasets/hist/{dataset}", {"key": [{"name": "day", "type": "date"}]},
         "dataset"),
        ("PUT", f"/api/v1/datasets/hist/{dataset}/consumers/load", {}, "consumer"),
        ("PUT", f"/api/v1/view-definitions/{view}", {
            "parameters": [{"name": "env"}], "transformation": "noop",
            "structure": {"fields": [{"name": "id", "type": "bigint"}]}}, "view"),
        ("PUT", f"/api/v1/batches/configs/{system.lower()}", {
            "name": system.lower(), "valid_systems": [system], "valid_stages": ["STG"],
            "system_stage_mapping": [{"system": system, "stages": ["STG"],
                                      "start_date": "2015-01-01"}],
            "job_group_mapping": [{"system": system, "stage": "STG", "job_group": ["G"]}],
            "job_groups": [{"name": "G", "jobs": [
                {"name": "load", "type": "shell", "argv": ["true"]}]}]}, "config"),
        ("POST", "/api/v1/views/materialize", {
            "pattern": f"app.eci.stage/Search/{shop}/2015/05/03", "mode": "TRANSFORM_ONLY"},
         "materialize"),
        ("POST", "/api/v1/batches/run", {"system": system, "location": "IN",
                                         "watermark": "2015-01-01"}, "run"),
        ("POST", "/api/v1/views/invalidate", {"pattern": f"{view}/prod"}, "invalidate")]
    replies = {}
    for method, path, body, kind in done:
        status, replies[kind] = node.call(method, path, body, who[kind])
        assert status in (200, 201), (kind, replies[kind])
    status, page = node.browser(who["form"]).form("/ui/views/materialize", {
        "pattern": f"app.eci.stage/Search/{shop}/2015/05/04", "mode": "TRANSFORM_ONLY",
        "digest": _digest(node, f"app.eci.stage/Search/{shop}/2015/05/04")})
    assert status == 200, page[:500]
    expected = {
        "dataset": (f"/api/v1/datasets/hist/{dataset}", "created"),
        "consumer": (f"/api/v1/datasets/hist/{dataset}/consumers/load", "created"),
        "view": (f"/api/v1/view-definitions/{view}", "created"),
        "config": (f"/api/v1/batches/configs/{system.lower()}", "created"),
        "materialize": (f"/api/v1/views/materialize/app.eci.stage/Search/{shop}/2015/05/03",
                        "200"),
        "run": (f"/api/v1/batches/runs/{replies['run']['id']}", "201"),
        "invalidate": (f"/api/v1/views/invalidate/{view}/prod", "200"),
        "form": (f"/api/v1/views/materialize/app.eci.stage/Search/{shop}/2015/05/04", "200")}
    status, reply = node.call("GET", "/api/v1/changes?limit=500", token="read")
    assert status == 200, reply
    for kind, (resource, outcome) in expected.items():
        seen = [(c["method"], c["outcome"], c["actor"]["name"]) for c in reply["changes"]
                if c["resource"] == resource]
        method = "POST" if kind in ("materialize", "run", "invalidate", "form") else "PUT"
        assert seen == [(method, outcome, who[kind])], (kind, resource, seen)
        assert all(c["actor"]["token_id"] is not None for c in reply["changes"]
                   if c["resource"] == resource)
    # A read by path finds a materialize by the partitions it addressed.
    status, reply = node.call("GET", "/api/v1/changes?resource=/api/v1/views/materialize/"
                                     f"app.eci.stage/Search/{shop}", token="read")
    assert [c["actor"]["name"] for c in reply["changes"]] == [who["form"], who["materialize"]]
    # Each job the planners made names its requester too.
    job_id = replies["materialize"]["decisions"][0]["job_id"]
    status, reply = node.call("GET", f"/api/v1/jobs/{job_id}", token="read")
    assert reply["submitted_by"]["name"] == f"views for {who['materialize']}", reply


def _digest(node: AttackNode, pattern: str) -> str:
    """The plan digest the dashboard's plan page carries to its confirm button."""
    status, page = node.browser("submit").open(
        f"/ui/views/materialize?pattern={urllib.parse.quote(pattern)}&mode=TRANSFORM_ONLY")
    assert status == 200, page[:500]
    match = re.search(r'name="digest" value="([^"]*)"', page)
    assert match, page[:2000]
    return match.group(1)
