"""Batches as Guzzle's text says (seed 003), on a real ``jobserver serve`` per store,
driven by the ``jobserver`` command line as a user drives it (issue 34, items 4 and 5).

* The runtime audit has an entry per instance, closed when it ends: a stage that
  FAILED and was rerun shows both launches, the failed one with its message and its
  job's metrics, also under ``batch audit --status FAILED``.
* ``batch run`` prints every stage of its plan as it starts and ends, also the ones
  that started and ended between two of its polls.
* A config mapping no job group to a stage of a system is refused when applied,
  naming the stage's place.

Each test declares its own system (:func:`unique`): the node is shared.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.attack import AttackNode, attack_env, attack_node, unique  # noqa: F401
from tests.integration.nodes import JOBSERVER, TOKEN

WATERMARK = "2024-01-02"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def cli(node: AttackNode, *args: str, cwd: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``jobserver <args>`` against ``node`` with the config token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
    env.update(JOBSERVER_URL=node.url, JOBSERVER_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
    return subprocess.run(JOBSERVER + list(args), env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def one_stage_config(system: str, job: dict[str, Any]) -> dict[str, Any]:
    return {"valid_systems": [system], "valid_stages": ["STG"],
            "system_stage_mapping": [{"system": system, "stages": ["STG"]}],
            "job_group_mapping": [{"system": system, "stage": "STG", "job_group": ["LOAD"]}],
            "job_groups": [{"name": "LOAD", "jobs": [job]}]}


def put(node: AttackNode, name: str, body: dict[str, Any]) -> None:
    status, reply = node.call("PUT", f"/api/v1/batches/configs/{name}", body)
    assert status == 201, reply


def fails_once(marker: Path) -> dict[str, Any]:
    """A shell job that fails (exit 3, 5 records) while ``marker`` is missing and
    creates it; then succeeds (7 records). Metrics go to the step's metrics file."""
    script = (f'if [ -e "{marker}" ]; then echo \'{{"records_out": 7}}\' '
              f'> "$JOBSERVER_METRICS_FILE"; exit 0; fi; touch "{marker}"; '
              f'echo \'{{"records_out": 5}}\' > "$JOBSERVER_METRICS_FILE"; exit 3')
    return {"name": "load", "type": "shell", "argv": ["sh", "-c", script]}


def test_the_audit_keeps_a_failed_run_after_its_rerun(attack_node: AttackNode,  # noqa: F811
                                                      tmp_path: Path) -> None:
    system = unique("AUD")
    put(attack_node, system.lower(), one_stage_config(system, fails_once(tmp_path / "ran")))
    run = ["batch", "run", "--system", system, "--location", "IN", "--stage", "STG",
           "--watermark", WATERMARK, "--interval", "0.2"]
    failed = cli(attack_node, *run)
    assert failed.returncode == 3 and "STG of 2024-01-02 FAILED" in failed.stderr, failed
    rerun = cli(attack_node, *run)
    assert rerun.returncode == 0 and "SUCCESS" in rerun.stdout, rerun

    shown = cli(attack_node, "batch", "audit", "--system", system, "--status", "FAILED")
    assert shown.returncode == 0, shown
    lines = [line.split() for line in shown.stdout.splitlines()[1:]]
    [batch_id] = {line[0].split("-")[0] for line in lines}
    assert [line[:4] for line in lines] == [
        [f"{batch_id}-STG-1", "stage", "STG", "FAILED"],
        [f"{batch_id}-STG-1-load", "job", "load", "FAILED"]], shown.stdout
    assert "exit status 3" in shown.stdout

    status, reply = attack_node.call(
        "GET", f"/api/v1/batches/audit?system={system}&stage=STG")
    assert status == 200, reply
    rows = {row["instance_id"].removeprefix(f"{batch_id}-"): row for row in reply["audit"]}
    assert list(rows) == [batch_id, "STG-1", "STG-1-load", "STG-2", "STG-2-load"]
    first, second = rows["STG-1"], rows["STG-2"]
    assert (first["status"], second["status"]) == ("FAILED", "SUCCESS")
    assert (first["launch"], second["launch"]) == (1, 2)
    assert "exit status 3" in first["message"] and second["message"] is None
    assert first["job_id"] and second["job_id"] and first["job_id"] != second["job_id"]
    assert first["start_time"] <= first["end_time"] <= second["start_time"] <= \
        second["end_time"]
    failed_job, rerun_job = rows["STG-1-load"], rows["STG-2-load"]
    assert (failed_job["status"], failed_job["job_id"]) == ("FAILED", first["job_id"])
    assert (rerun_job["status"], rerun_job["job_id"]) == ("SUCCESS", second["job_id"])
    assert failed_job["message"] == "exit status 3" and failed_job["end_time"]
    assert (failed_job["metrics"]["records_out"], rerun_job["metrics"]["records_out"]) == (5, 7)
    assert "cpu_milliseconds" in failed_job["metrics"]
    assert first["metrics"]["records_out"] == 5  # the launch's total over its jobs
    # the control table shows the stage as it is now: the rerun's
    status, page = attack_node.call("GET", f"/api/v1/batches?system={system}")
    [stage] = page["batches"][0]["stages"]
    assert (stage["status"], stage["runs"], stage["message"], stage["job_id"]) == (
        "SUCCESS", 2, None, second["job_id"])


@pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)  # the CLI's, not a store's
def test_batch_run_prints_every_stage_as_it_starts_and_ends(
        attack_node: AttackNode) -> None:  # noqa: F811
    """Four quick stages, polled every 2 s: most start and end between two polls."""
    system = unique("RUN")
    stages = ["S1", "S2", "S3", "S4"]
    put(attack_node, system.lower(), {
        "valid_systems": [system], "valid_stages": stages,
        "system_stage_mapping": [{"system": system, "stages": stages}],
        "job_group_mapping": [{"system": system, "stage": s, "job_group": ["QUICK"]}
                              for s in stages],
        "job_groups": [{"name": "QUICK", "jobs": [{"name": "quick", "type": "noop"}]}]})
    done = cli(attack_node, "batch", "run", "--system", system, "--location", "IN",
               "--watermark", WATERMARK, "--interval", "2")
    assert done.returncode == 0, done
    printed = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert printed == [f"[{i}/4] {WATERMARK} {stage}: {word}"
                       for i, stage in enumerate(stages, 1)
                       for word in ("running", "SUCCESS")], done.stdout


def test_a_stage_without_a_job_group_is_refused_at_apply(attack_node: AttackNode,  # noqa: F811
                                                         tmp_path: Path) -> None:
    system = unique("MAP")
    body = one_stage_config(system, {"name": "load", "type": "noop"})
    body["valid_stages"].append("FND")
    body["system_stage_mapping"][0]["stages"].append("FND")  # no job group for FND
    document = tmp_path / "batches.yaml"
    document.write_text(yaml.safe_dump({"kind": "BatchConfig", "name": system.lower(),
                                        **body}))
    applied = cli(attack_node, "apply", str(document))
    assert applied.returncode != 0, applied
    assert "system_stage_mapping[0].stages[1]" in applied.stdout + applied.stderr, applied
    assert "'FND'" in applied.stdout + applied.stderr, applied
    status, reply = attack_node.call("PUT", f"/api/v1/batches/configs/{system.lower()}", body)
    assert status == 422, reply
    assert [d["field"] for d in reply["error"]["details"]] == \
        ["system_stage_mapping[0].stages[1]"], reply
    status, _ = attack_node.call("GET", f"/api/v1/batches/configs/{system.lower()}")
    assert status == 404
