"""``make run`` as a new user meets it: a browser pointed at the server, the demo's
views and datasets, a second start, and stopping at once.

One data directory, two starts of ``jobserver cluster --nodes 3 --demo``:

* the first puts the demo in place: ``/`` sends a browser to the dashboard, where a
  signed-in user reads the API's reference; the Datasets walkthrough's ``raw`` holds
  a day of partitions its schedule has consumed; the Views walkthrough's plan says
  what docs/views.md shows (set 39, transform 69). The user disables the demo
  schedule and stops the cluster (Ctrl-C: it drains, exit 0);
* the second finds the demo in place: it submits no job, the schedule stays
  disabled, and the banner says so. A second Ctrl-C during the drain stops at once,
  and the launcher exits 0 naming the nodes that did not drain (make says nothing).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import free_port, wait_for
from tests.integration.attack import Browser
from tests.integration.nodes import Api, Harness, Proc

pytestmark = pytest.mark.slow

MART = "app.eci.datamart/SearchExport/SHOP10/2015/05"
#: Jobs the demo schedule launches on its own each minute; not the demo's submissions.
SCHEDULED = "demo-scheduled"


def _start(harness: Harness, env: dict[str, str], url: str) -> tuple[Proc, Api, str]:
    launcher = harness.spawn("launcher", harness.cluster_args(3, "--demo"), env)
    banner = harness.wait_banner(launcher)
    token = re.search(r"token:\s+(\S+)", banner)
    assert token, banner
    return launcher, Api(url, token.group(1)), banner


def _job_names(api: Api) -> Counter[str]:
    """The jobs by name, but those the demo schedule launched by itself."""
    jobs = api.get("/api/v1/jobs?limit=500")["jobs"]
    return Counter(job["name"] for job in jobs if job["name"] != SCHEDULED)


def _redirect_of(url: str, path: str) -> tuple[int, str | None]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=15)
    try:
        connection.request("GET", path, headers={"Accept": "text/html"})
        response = connection.getresponse()
        return response.status, response.getheader("Location")
    finally:
        connection.close()


def _the_browser_finds_the_dashboard_and_the_api_reference(api: Api, banner: str) -> None:
    assert _redirect_of(api.base_url, "/") == (302, "/ui/")
    assert f"its reference: {api.base_url}/ui/api" in banner, banner
    browser = Browser(api.base_url)
    status, page = browser.open("/ui/api")
    assert status == 200 and "Sign in" in page and "API reference" not in page
    browser.form("/ui/sign-in", {"token": api.token, "next": "/ui/api"},
                 csrf_from="/ui/sign-in")
    status, page = browser.open("/ui/api")
    assert status == 200 and "API reference" in page, page[:500]
    assert 'data-route="POST /api/v1/jobs"' in page and "scope: submit" in page
    status, document = browser.open("/ui/api.json")
    assert status == 200 and json.loads(document)["openapi"] == "3.1.0"


def _the_walkthroughs_find_their_data(api: Api) -> None:
    partitions = api.get("/api/v1/datasets/default/raw/partitions")["partitions"]
    assert len(partitions) == 24, partitions
    consumer = wait_for(
        lambda: (c := api.get("/api/v1/datasets/default/raw/consumers/cleanse"))
        ["processed_total"] == 18 and c, 60, 0.2,
        "the cleanse-raw schedule's job to consume the 18 partitions from 06:00")
    assert consumer["failed_total"] == 0, consumer
    plan = api.call("POST", "/api/v1/views/materialize", {"pattern": MART, "plan": True})
    assert plan["counts"] == {"set": 39, "transform": 69}, plan["counts"]


@pytest.mark.timeout(300)
def test_the_demo_is_placed_once_and_a_second_ctrl_c_is_no_error(harness: Harness,
                                                                   tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = harness.base_env(JOBSERVER_API__BIND=f"127.0.0.1:{port}",
                           JOBSERVER_DATA_DIR=str(tmp_path / "data"),
                           JOBSERVER_SERVER__DRAIN_TIMEOUT="3")

    # 1. The first start: the demo, and what a user finds in it.
    launcher, api, banner = _start(harness, env, url)
    assert "demo jobs submitted:" in banner and "demo views:" in banner \
        and "demo datasets:" in banner, banner
    _the_browser_finds_the_dashboard_and_the_api_reference(api, banner)
    _the_walkthroughs_find_their_data(api)
    run = re.search(r"demo batches: batch run (\d+) of ORDER/IN", banner)
    assert run, banner
    wait_for(lambda: api.get(f"/api/v1/batches/runs/{run.group(1)}")["status"] == "SUCCESS",
             60, 0.2, "the demo's batch run to end (it launches its later stages)")
    api.call("POST", "/api/v1/schedules/demo/every-minute/disable")
    before = _job_names(api)
    os.killpg(launcher.pid, signal.SIGINT)
    assert launcher.wait_exit(60) == 0, launcher.tail()

    # 2. Started again on the same data: nothing submitted, nothing re-enabled.
    launcher, api, banner = _start(harness, env, url)
    assert "demo: already in place from an earlier start" in banner, banner
    assert "demo jobs submitted" not in banner and "demo batches" not in banner, banner
    assert _job_names(api) == before
    assert api.get("/api/v1/schedules/demo/every-minute")["enabled"] is False

    # 3. Ctrl-C, and Ctrl-C again while a job holds the drain: stopped at once, exit 0.
    job_id = api.submit({"name": "long", "steps": [
        {"name": "s", "type": "shell", "argv": ["sleep", "60"]}]})
    wait_for(lambda: api.job(job_id)["state"] == "RUNNING", 30, 0.05, "the job to run")
    os.killpg(launcher.pid, signal.SIGINT)
    wait_for(lambda: "\nstopping 3 nodes" in launcher.output(), 10, 0.05, "the drain")
    os.killpg(launcher.pid, signal.SIGINT)
    assert launcher.wait_exit(30) == 0, launcher.tail()
    output = launcher.output()
    assert "stopped at once, as asked: node-1, node-2, node-3 did not drain" in output, output
