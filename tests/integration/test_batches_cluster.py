"""Batches on real ``jobserver serve`` nodes: the config applied and a run waited on by
the ``jobserver`` command line (its exit codes), and a node killed with ``kill -9`` in
the middle of a stage on a three-node cluster."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import free_port, wait_for
from tests.integration.nodes import JOBSERVER, TOKEN, Api, Harness

CONFIG = {
    "kind": "BatchConfig", "name": "orders",
    "valid_systems": ["ORDER"], "valid_stages": ["STG", "FND"],
    "valid_locations": ["IN"],
    "system_stage_mapping": [{"system": "ORDER", "stages": ["STG", "FND"]}],
    "job_group_mapping": [{"system": "ORDER", "stage": "STG", "job_group": ["LOAD"]},
                          {"system": "ORDER", "stage": "FND", "job_group": ["BUILD"]}],
    "job_groups": [
        {"name": "LOAD", "jobs": [{"name": "extract", "type": "sleep", "seconds": 4},
                                  {"name": "check", "type": "noop"}]},
        {"name": "BUILD", "jobs": [{"name": "build", "type": "shell",
                                    "argv": ["sh", "-c", "exit ${FAIL:-0}"]}]}]}


def cli(harness: Harness, port: int, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = harness.base_env(JOBSERVER_URL=f"http://127.0.0.1:{port}", JOBSERVER_TOKEN=TOKEN)
    return subprocess.run(JOBSERVER + list(args), env=env, cwd=harness.tmp_path,
                          capture_output=True, text=True, timeout=timeout)


def stage(api: Api, name: str) -> dict[str, Any]:
    batch = api.get("/api/v1/batches?system=ORDER")["batches"][0]
    return next(s for s in batch["stages"] if s["stage"] == name)


@pytest.mark.slow
def test_batch_run_waits_and_exits_by_outcome(harness: Harness, tmp_path: Path) -> None:
    port = free_port()
    node = harness.start_node("n1", port, tmp_path / "data")
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    harness.wait_nodes_ready(api, [node], port)
    document = dict(CONFIG)
    document["job_groups"] = [{"name": "LOAD", "jobs": [{"name": "extract", "type": "noop"}]},
                              {"name": "BUILD", "jobs": [{"name": "build", "type": "shell",
                                                          "argv": ["false"]}]}]
    (tmp_path / "batches.yaml").write_text(yaml.safe_dump(document))
    applied = cli(harness, port, "apply", str(tmp_path / "batches.yaml"))
    assert applied.returncode == 0 and "batch config orders: created" in applied.stdout, applied
    bad = cli(harness, port, "batch", "run", "--system", "PAYROLL", "--location", "IN")
    assert bad.returncode == 2 and "PAYROLL" in bad.stderr, bad
    done = cli(harness, port, "batch", "run", "--system", "ORDER", "--location", "IN",
               "--stage", "STG", "--watermark", "2024-01-02", "--interval", "0.2")
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done
    failed = cli(harness, port, "batch", "run", "--system", "ORDER", "--location", "IN",
                 "--stage", "FND", "--interval", "0.2")
    assert failed.returncode == 3 and "FND of 2024-01-02 FAILED" in failed.stderr, failed
    status = cli(harness, port, "batch", "status", "--system", "ORDER")
    assert "STG=SUCCESS FND=FAILED" in status.stdout, status
    audit = cli(harness, port, "batch", "audit", "--system", "ORDER", "--work-unit", "job")
    assert "-STG-1-extract" in audit.stdout and "-FND-1-build" in audit.stdout, audit
    harness.terminate(node)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_kill_9_mid_stage_ends_it_once_never_stuck(harness: Harness, tmp_path: Path) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    nodes = {f"node-{i}": harness.start_node(f"node-{i}", port, data_dir) for i in (1, 2, 3)}
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    harness.wait_nodes_ready(api, list(nodes.values()), port)
    body = {key: value for key, value in CONFIG.items() if key != "kind"}
    api.call("PUT", "/api/v1/batches/configs/orders", body, expect=(201,))
    run = api.call("POST", "/api/v1/batches/run", {"system": "ORDER", "location": "IN",
                                                   "stage": "STG", "watermark": "2024-01-02"},
                   expect=(201,))
    job_id = wait_for(lambda: stage(api, "STG")["job_id"], 10, 0.1, "the stage job")
    running = wait_for(lambda: (job := api.job(job_id))["state"] == "RUNNING" and job, 15,
                       0.05, "the stage job to run")
    victim = running["node"]
    killed_at = harness.kill9(nodes[victim])
    ended = wait_for(lambda: (r := api.get(f"/api/v1/batches/runs/{run['id']}"))["status"]
                     != "RUNNING" and r, 30, 0.2, "the run to end after the kill")
    settled = stage(api, "STG")
    job = api.job(job_id)
    print(f"\nstage {settled['status']} {time.monotonic() - killed_at:.1f} s after kill -9 "
          f"of {victim}; job {job['state']} on {job['node']} attempt {job['attempt']}")
    assert settled["runs"] == 1 and settled["job_id"] == job_id  # launched once
    if settled["status"] == "SUCCESS":
        assert ended["status"] == "SUCCESS" and job["state"] == "SUCCEED"
        assert job["node"] != victim and job["attempt"] == 2
    else:
        assert settled["status"] == "FAILED" and settled["message"]
        assert ended["status"] == "FAILED" and job["state"] == "ERROR"
    time.sleep(1.5)  # a few more tracker rounds: the end stands
    assert stage(api, "STG")["status"] == settled["status"]
