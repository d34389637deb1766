"""A step's ``env`` cannot defeat ``steps.shell.allowed_executables`` (issue 33, item 6),
tried as an attacker would against a real ``jobserver serve``.

The node allows one bash script. Before the rule, a ``shell`` token ran any command
through it: ``BASH_ENV`` names a file bash sources first, ``LD_PRELOAD`` a library
the loader runs first, ``PATH`` which program a name inside the script runs. Each is
refused with a 422 naming ``steps[i].env.NAME`` wherever a job template is saved
(a submit, a batch of jobs, a schedule, a view definition, a batch config), nothing
stored; and a job stored before the rule does not start its step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from jobserver.spec import parse_job
from jobserver.states import State
from jobserver.store.tables import jobs
from tests.helpers import wait_for
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401

#: The one executable the node allows: a harmless report script.
SCRIPT = "report.sh"
ATTACKS = ["BASH_ENV", "LD_PRELOAD", "PATH"]


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_STEPS__SHELL__ALLOWED_EXECUTABLES": json.dumps([f"{{data_dir}}/{SCRIPT}"]),
            "JOBSERVER_STEPS__SHELL__DENIED_ENV": "AWS_PROFILE"}


@pytest.fixture(scope="module")
def node(attack_node: AttackNode) -> AttackNode:  # noqa: F811
    script = attack_node.data_dir / SCRIPT
    script.write_text("#!/bin/bash\ndate\n")
    script.chmod(0o755)
    return attack_node


@pytest.fixture
def payload(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """What each variable would run: a file for bash to source, a "library", a
    directory with a ``date`` of the attacker's; each would create ``marker``."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"touch {marker}\n")
    (tmp_path / "date").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (tmp_path / "date").chmod(0o755)
    return {"BASH_ENV": str(evil), "LD_PRELOAD": str(tmp_path / "evil.so"),
            "PATH": str(tmp_path)}, marker


def job(node: AttackNode, name: str, env: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "steps": [{"name": "report", "type": "shell",
                                     "argv": [str(node.data_dir / SCRIPT)], "env": env}]}


def stored_jobs(node: AttackNode, name: str) -> int:
    with node.store.tx.read() as conn:
        return conn.execute(select(func.count()).select_from(jobs)
                            .where(jobs.c.name == name)).scalar_one()


def refused(status: int, reply: Any, field: str) -> None:
    assert status == 422, (status, reply)
    assert field in [detail["field"] for detail in reply["error"]["details"]], reply


@pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)
@pytest.mark.parametrize("variable", ATTACKS)
def test_a_shell_token_cannot_set_a_start_up_variable(
        node: AttackNode, payload: tuple[dict[str, str], Path], variable: str) -> None:
    values, marker = payload
    name = unique("env-")
    body = job(node, name, {"REPORT_DAY": "2015-05-03", variable: values[variable]})
    refused(*node.call("POST", "/api/v1/jobs", body, "shell"), f"steps[0].env.{variable}")
    refused(*node.call("POST", "/api/v1/jobs/batch", {"jobs": [body]}, "shell"),
            f"jobs[0].steps[0].env.{variable}")
    assert stored_jobs(node, name) == 0 and not marker.exists()


@pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)
def test_the_operators_denied_env_is_refused_as_well(node: AttackNode) -> None:
    name = unique("env-")
    refused(*node.call("POST", "/api/v1/jobs", job(node, name, {"AWS_PROFILE": "prod"}),
                       "shell"), "steps[0].env.AWS_PROFILE")
    status, reply = node.call("POST", "/api/v1/jobs", job(node, name, {"DAY": "1"}), "shell")
    assert status == 201, reply  # any other name is the step's own


@pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)
@pytest.mark.parametrize("variable", ATTACKS)
def test_no_template_may_set_one_either_not_even_an_admins(
        node: AttackNode, payload: tuple[dict[str, str], Path], variable: str) -> None:
    values, _ = payload
    steps = job(node, "t", {variable: values[variable]})["steps"]
    name = unique("env")
    schedule = {"template": {"name": name, "steps": steps},
                "trigger": {"type": "time", "cron": "* * * * *"}}
    refused(*node.call("PUT", f"/api/v1/schedules/default/{name}", schedule),
            f"template.steps[0].env.{variable}")
    assert node.call("GET", f"/api/v1/schedules/default/{name}")[0] == 404
    view = f"app.sec/{unique('Env')}"
    refused(*node.call("PUT", f"/api/v1/view-definitions/{view}", {
        "structure": {"fields": [{"name": "id", "type": "bigint"}]},
        "transformation": {"job": {"steps": steps}}}),
        f"transformation.job.steps[0].env.{variable}")
    assert node.call("GET", f"/api/v1/view-definitions/{view}")[0] == 404
    system = unique("SYS").upper()
    refused(*node.call("PUT", f"/api/v1/batches/configs/{name}", {
        "valid_systems": [system], "valid_stages": ["STG"],
        "system_stage_mapping": [{"system": system, "stages": ["STG"]}],
        "job_group_mapping": [{"system": system, "stage": "STG", "job_group": ["G"]}],
        "job_groups": [{"name": "G", "jobs": steps}]}),
        f"job_groups[0].jobs[0].env.{variable}")
    assert node.call("GET", f"/api/v1/batches/configs/{name}")[0] == 404


@pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)
def test_a_job_stored_before_the_rule_does_not_start_its_step(
        node: AttackNode, payload: tuple[dict[str, str], Path]) -> None:
    values, marker = payload
    spec = parse_job(json.dumps(job(node, unique("env-"), {"BASH_ENV": values["BASH_ENV"]})))
    stored, _ = node.store.jobs.submit(spec, [[]])  # past the API, as an old row is
    ended = wait_for(lambda: (found := node.store.jobs.get(stored.id)).state
                     not in (State.READY, State.RUNNING) and found, 30,
                     what="the stored job to end")
    assert ended.state is State.ERROR, ended.state
    assert "a step may not set BASH_ENV" in (ended.steps[0].error or ""), ended.steps[0]
    assert not marker.exists()
