"""The dashboard's screenshots (the README's tour and docs/interfaces.md show them):
``make screenshots``.

    .venv/bin/python -m tests.browser.screenshots [DIRECTORY]     # docs/screenshots

Starts ``make run``'s cluster (``jobserver cluster --nodes 3 --demo``: SQLite, file
locks, the example jobs, schedule and batches) in a temporary data directory on free
ports, adds the planners' examples through its API (:mod:`bench.ui_data`: schedules,
the ``raw`` dataset with partitions and a failed consumer run, views materialized,
the batch example caught up for both locations and a system whose SNAPSHOT fails)
and a few jobs of each outcome, then signs in with headless Chromium (Debian's, as
the browser tests drive it, with their :func:`~tests.browser.conftest.sign_in`) and
saves a 1280×800 PNG of each page of :func:`pages` and of the sign-in page. Times
show in UTC, in the light scheme.
A console error or a 5xx answer on any page stops it with the page named.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.ui_data import (FIRST_DAY, NAMESPACE, TICKER, PlannerData, Sizes, add_planner_data,
                           wait_idle)
from jobserver.client import Client
from tests.browser.conftest import CHROMIUM, sign_in
from tests.helpers import free_port, stop_process_group, wait_for

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "docs" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
#: How much planner data the pictures show.
SIZES = Sizes(schedules=0, partitions=24 * 7, shops=2, days=14, batch_runs=4,
              ticker_seconds=20)
#: The dataset page shows the last day's late hours, and the consumers below them.
LAST_DAY = (FIRST_DAY + timedelta(days=SIZES.partitions // 24 - 1)).isoformat()
#: Jobs beside the demo's, so that the jobs page shows each outcome.
EXTRA_JOBS: list[dict[str, Any]] = [
    {"name": "load-customers", "steps": [
        {"name": "fetch", "type": "shell", "argv": ["sh", "-c", "echo 1204 customers"]},
        {"name": "load", "type": "noop", "depends_on": ["fetch"]}]},
    {"name": "export-search", "steps": [
        {"name": "export", "type": "shell",
         "argv": ["sh", "-c", "echo 'connection refused' >&2; exit 2"]}]},
    {"name": "nightly-backfill", "steps": [
        {"name": "prepare", "type": "noop"},
        {"name": "backfill", "type": "sleep", "seconds": 3600, "depends_on": ["prepare"]}]},
]


def pages(planner: PlannerData, dag_job: int) -> list[tuple[str, str]]:
    """``(file name, path)`` of each picture."""
    return [("cluster", "/ui/cluster"), ("jobs", "/ui/jobs"), ("job", f"/ui/jobs/{dag_job}"),
            ("schedules", "/ui/schedules"),
            ("schedule", f"/ui/schedules/{NAMESPACE}/{TICKER}"), ("datasets", "/ui/datasets"),
            ("dataset", "/ui/datasets/default/raw?" + urlencode(
                {"where": "hour >= 21", "field": "date", "from": LAST_DAY, "to": LAST_DAY})),
            ("views", "/ui/views?pattern=" + planner.grid_pattern),
            ("views-plan", "/ui/views/materialize?pattern=" + planner.grid_pattern),
            ("batches", "/ui/batches"), ("batch", f"/ui/batches/{planner.failed_batch_id}")]


@contextmanager
def demo_cluster(data_dir: Path) -> Iterator[Client]:
    """``jobserver cluster --nodes 3 --demo`` on free ports; a client for its API once
    the demo is in. Stopped as Ctrl-C would (SIGINT: the nodes drain)."""
    token, port = secrets.token_urlsafe(24), free_port()
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")},
               JOBSERVER_DATA_DIR=str(data_dir), JOBSERVER_API__BIND=f"127.0.0.1:{port}",
               JOBSERVER_API__TOKENS=token, JOBSERVER_SERVER__DRAIN_TIMEOUT="3")
    ports = ",".join(str(free_port()) for _ in range(3))
    log = open(data_dir.parent / "cluster.log", "wb")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "jobserver.cli", "cluster", "--nodes", "3", "--demo",
         "--node-ports", ports], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        client = Client(f"http://127.0.0.1:{port}", token, timeout=30)
        wait_for(lambda: launcher.poll() is not None or b"Ctrl-C stops" in _read(log.name),
                 120, 0.3, "the demo cluster to start")
        if launcher.poll() is not None:
            raise RuntimeError("the cluster exited:\n" + _read(log.name).decode()[-2000:])
        yield client
    finally:
        stop_process_group(launcher, 30)
        log.close()


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def add_demo(client: Client, data_dir: Path) -> tuple[PlannerData, int]:
    """The planners' data and the extra jobs; the id of the demo's DAG job."""
    planner = add_planner_data(client, data_dir / "views", SIZES)
    for spec in EXTRA_JOBS:
        client.submit(json.dumps(spec).encode())
    wait_idle(client, busy_allowed=1)
    dag = client.jobs(name="demo-etl", limit=1)["jobs"]
    return planner, int(dag[0]["id"])


def shoot(base_url: str, token: str, shots: list[tuple[str, str]], output: Path) -> None:
    """Sign in and save each page; then the sign-in page, signed out."""
    from playwright.sync_api import sync_playwright

    output.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            context = browser.new_context(viewport=VIEWPORT, base_url=base_url,
                                          timezone_id="UTC", locale="en-US",
                                          color_scheme="light")
            page = context.new_page()
            problems = _watch(page)
            sign_in(page, token)
            for name, path in shots:
                page.goto(path, wait_until="networkidle")
                _check(problems, path)
                page.screenshot(path=str(output / f"{name}.png"))
                print(f"{output / name}.png  {path}", flush=True)
            context.clear_cookies()
            page.goto("/ui/sign-in", wait_until="networkidle")
            _check(problems, "/ui/sign-in")
            page.screenshot(path=str(output / "sign-in.png"))
        finally:
            browser.close()


def _watch(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda message: problems.append(f"console: {message.text}")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    page.on("response", lambda response: problems.append(
        f"{response.status} {response.url}") if response.status >= 500 else None)
    return problems


def _check(problems: list[str], path: str) -> None:
    if problems:
        raise RuntimeError(f"{path}: " + "; ".join(problems))


def main(argv: list[str]) -> int:
    output = Path(argv[0]) if argv else OUTPUT
    if not os.path.exists(CHROMIUM):
        print(f"Chromium is not installed ({CHROMIUM}; Debian package 'chromium')",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="jobserver-screenshots-") as work:
        data_dir = Path(work) / "data"
        data_dir.mkdir()
        with demo_cluster(data_dir) as client:
            planner, dag = add_demo(client, data_dir)
            assert client.token is not None
            shoot(client.url, client.token, pages(planner, dag), output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
