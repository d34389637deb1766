"""SIGTERM and Ctrl-C (SIGINT) of a ``jobserver batch run`` process waiting on a
stage of a real ``jobserver serve`` node: it exits 143 (130), saying the run goes on in
the cluster; the stage is left to the engine and the node's tracker, which end it
SUCCESS once its job has finished: never RUNNING for ever. The stage's one job waits
for a file the test writes, so the stage is surely running when the signal lands."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port, wait_for
from tests.integration.nodes import JOBSERVER, TOKEN, Api, Harness, Proc

WATERMARK = "2024-01-02"


def config(release: Path) -> dict[str, Any]:
    wait = f'while [ ! -e "{release}" ]; do sleep 0.05; done'
    return {"valid_systems": ["ORDER"], "valid_stages": ["STG"],
            "system_stage_mapping": [{"system": "ORDER", "stages": ["STG"]}],
            "job_group_mapping": [{"system": "ORDER", "stage": "STG", "job_group": ["LOAD"]}],
            "job_groups": [{"name": "LOAD", "jobs": [
                {"name": "extract", "type": "shell", "argv": ["sh", "-c", wait]}]}]}


def batch_run(harness: Harness, port: int, name: str) -> Proc:
    """``jobserver batch run`` of ORDER/IN STG, its output in ``logs/<name>.log``.

    SIGINT is reset to its default in the child: a shell without job control starts
    background commands (a CI runner's pytest among them) with SIGINT ignored, and
    Python then never turns it into KeyboardInterrupt, as it does in a terminal."""
    env = harness.base_env(JOBSERVER_URL=f"http://127.0.0.1:{port}", JOBSERVER_TOKEN=TOKEN)
    log = harness.log_dir / f"{name}.log"
    with open(log, "wb") as handle:
        popen = subprocess.Popen(
            JOBSERVER + ["batch", "run", "--system", "ORDER", "--location", "IN", "--stage",
                         "STG", "--watermark", WATERMARK, "--interval", "0.1"],
            env=env, cwd=harness.tmp_path, stdin=subprocess.DEVNULL, stdout=handle,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc = Proc(name, popen, log, 0.0)
    harness.procs.append(proc)
    return proc


def waiting(proc: Proc) -> int:
    """Until ``proc`` prints that it waits on the stage; the run's id."""
    def printed() -> str:
        if not proc.running():
            raise AssertionError(f"batch run exited {proc.popen.returncode}: {proc.output()}")
        out = proc.output()
        return out if f"{WATERMARK} STG: running" in out else ""
    out = wait_for(printed, 20, 0.05, f"{proc.name} to wait on the stage")
    return int(out.split("batch run ", 1)[1].split(":", 1)[0])


def stage(api: Api) -> dict[str, Any]:
    [batch] = api.get("/api/v1/batches?system=ORDER&location=IN")["batches"]
    return batch["stages"][0] | {"batch_status": batch["status"]}


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigterm_and_ctrl_c_stop_the_waiting_and_the_engine_ends_the_stage(
        harness: Harness, tmp_path: Path) -> None:
    port, release = free_port(), tmp_path / "release"
    node = harness.start_node("n1", port, tmp_path / "data")
    api = Api(f"http://127.0.0.1:{port}", TOKEN)
    harness.wait_nodes_ready(api, [node], port)
    api.call("PUT", "/api/v1/batches/configs/orders", config(release), expect=(201,))

    first = batch_run(harness, port, "batch-run-term")
    first_run = waiting(first)
    job_id = stage(api)["job_id"]
    wait_for(lambda: api.job(job_id)["state"] == "RUNNING", 15, 0.05, "the stage job to run")
    first.popen.send_signal(signal.SIGTERM)
    assert first.wait_exit(10) == 143, first.output()
    assert (f"stopped waiting; batch run {first_run} goes on in the cluster"
            in first.output()), first.output()

    # a second run follows the stage the first launched; Ctrl-C stops its waiting
    second = batch_run(harness, port, "batch-run-int")
    second_run = waiting(second)
    assert second_run != first_run
    second.popen.send_signal(signal.SIGINT)
    assert second.wait_exit(10) == 130, second.output()
    assert f"batch run {second_run} goes on in the cluster" in second.output()

    # neither command touched the stage: its job still runs, waiting for the file
    now = stage(api)
    assert (now["status"], now["job_id"], api.job(job_id)["state"]) == (
        "RUNNING", job_id, "RUNNING")
    for run_id in (first_run, second_run):
        assert api.get(f"/api/v1/batches/runs/{run_id}")["status"] == "RUNNING"

    release.touch()
    ended = wait_for(lambda: (s := stage(api))["status"] != "RUNNING" and s, 20, 0.1,
                     "the stage to end once its job can finish")
    assert (ended["status"], ended["batch_status"], ended["runs"], ended["job_id"]) == (
        "SUCCESS", "SUCCESS", 1, job_id)
    assert api.job(job_id)["state"] == "SUCCEED"
    for run_id in (first_run, second_run):
        wait_for(lambda: api.get(f"/api/v1/batches/runs/{run_id}")["status"] == "SUCCESS",
                 10, 0.1, f"batch run {run_id} to end SUCCESS")
    assert node.running(), node.tail()
