"""How fast the dashboard's pages answer on a store of 1,000,000 jobs (PostgreSQL).

    python -m bench --only ui [--ui-jobs N] [--ui-rounds R]
    python -m bench.ui [N] [ROUNDS]                 # defaults 1000000 50

The store first gets N jobs over the last seven days (:mod:`bench.filling`): 20 job
names (a few common, most rare), five states (85 % SUCCEED, 8 % ERROR, 3 % DISCARDED,
2 % STOPPED, 2 % READY held back by a ``not_before`` weeks away), three nodes, three
steps each (extract, transform, load) with their events. One node then starts on it
(single mode, PostgreSQL locks) and gets the planners' examples through its API
(:mod:`bench.ui_data`): 200 more schedules, 100,000 partitions and two consumers,
the stage views of 5 shops × 90 days materialized, the batch example caught up for
two locations; then the example DAG job and one that runs for an hour. The tables
are analysed, as autovacuum would have done (it is off on this server).

A session signs in through the real sign-in form (GET the form, POST the token with
the form's CSRF value); then every page (:func:`pages`) is fetched over HTTP with the
session cookie, ``ROUNDS`` rounds of one GET each, the pages in the same order each
round, so that other load on the machine weighs on all alike. A page's time is from
sending the request to the last byte of the answer, one request at a time on a
keep-alive connection. The target: every page within 200 ms, read on each page's p95
(``met``; the max is beside it: on this shared 2-core machine a single GET can wait
for the CPU). Any answer but 200 is counted in ``errors``.
"""

from __future__ import annotations

import http.client
import json
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlencode

from bench.cluster import Cluster
from bench.common import TOKEN, Options, latency_summary, loadavg, log, write_result
from bench.filling import Shape, fill
from bench.stores import store_for
from bench.ui_data import (EXAMPLES, PlannerData, Sizes, add_planner_data, batch_settings,
                           wait_idle)
from jobserver.client import Client

#: The target: a page answers within this.
TARGET_MS = 200.0
#: The job names of the fill: the first few take most jobs (their share falls as a
#: square), the last ones are rare.
NAMES = ("nightly-etl", "load-customers", "extract-orders", "compact", "daily-report",
         "cleanse", "export-search", "refresh-shops", "rollup-hourly", "rollup-daily",
         "backfill", "reindex", "sync-crm", "audit-ledger", "score-models", "send-digest",
         "archive-logs", "vacuum-warehouse", "rebuild-cache", "quarterly-close")
#: g's bucket of 100 decides the state (see the module's docstring).
_BUCKET = "((g * 37) % 100)"
UI_JOBS = Shape(
    name="(ARRAY[" + ", ".join(f"'{name}'" for name in NAMES) + "])"
         f"[1 + floor({len(NAMES)} * power(((g * 7919) % 10007) / 10007.0, 2))::int]",
    state=f"""CASE WHEN {_BUCKET} < 85 THEN 'SUCCEED' WHEN {_BUCKET} < 93 THEN 'ERROR'
                   WHEN {_BUCKET} < 96 THEN 'DISCARDED' WHEN {_BUCKET} < 98 THEN 'STOPPED'
                   ELSE 'READY' END""",
    node="'node-' || (1 + g % 3)",
    # the last job is created ten minutes ago and runs for at most five
    created="now() - interval '7 days 10 minutes' + g * (interval '7 days' / :n)",
    run="(1 + g % 300) * interval '1 second'",
    steps=(("extract", ()), ("transform", ("extract",)), ("load", ("transform",))),
    submitted_by="'bench'")
#: The live parts a page's script asks for (not pages a browser navigates to).
LIVE = re.compile(r"/(live|grid)(\?|$)")
#: The node the bench starts: one of the fill's three.
NODE = "node-1"


@dataclass(frozen=True)
class Landmarks:
    """The jobs and cursors the timed pages point at."""

    page_two: int
    dag_job: int
    running_job: int
    succeed_job: int
    error_job: int
    ready_job: int
    planner_pages: list[tuple[str, str]]


def pages(marks: Landmarks) -> list[tuple[str, str]]:
    """``(label, path)`` of every page timed: each dashboard page, the jobs page under
    each filter, the live fragments, job pages of each kind, the planners' pages."""
    now = datetime.now(timezone.utc)
    day = {"since": _z(now - timedelta(days=3)), "until": _z(now - timedelta(days=2))}
    found = [
        ("cluster", "/ui/cluster"), ("cluster live", "/ui/cluster/live"),
        ("jobs", "/ui/jobs"), ("jobs live", "/ui/jobs/live"),
        ("jobs page 2", f"/ui/jobs?before={marks.page_two}"),
        ("jobs state=ERROR", "/ui/jobs?state=ERROR"),
        ("jobs state=READY", "/ui/jobs?state=READY"),
        ("jobs name (common)", "/ui/jobs?" + urlencode({"name": NAMES[0]})),
        ("jobs name (rare)", "/ui/jobs?" + urlencode({"name": NAMES[-1]})),
        ("jobs node", "/ui/jobs?node=node-2"),
        ("jobs node, no match", "/ui/jobs?node=node-9"),
        ("jobs one day", "/ui/jobs?" + urlencode(day)),
        ("jobs name+state", "/ui/jobs?" + urlencode({"name": NAMES[1], "state": "ERROR"})),
        ("jobs all filters", "/ui/jobs?" + urlencode(
            {"name": NAMES[0], "state": "ERROR", "node": "node-3", **day})),
        ("jobs live, filtered", "/ui/jobs/live?" + urlencode({"state": "ERROR",
                                                               "node": "node-2"})),
        ("job (DAG, real)", f"/ui/jobs/{marks.dag_job}"),
        ("job live (running)", f"/ui/jobs/{marks.running_job}/live"),
        ("step log", f"/ui/jobs/{marks.dag_job}/steps/extract/log"),
        ("job SUCCEED (filled)", f"/ui/jobs/{marks.succeed_job}"),
        ("job ERROR (filled)", f"/ui/jobs/{marks.error_job}"),
        ("job READY (held back)", f"/ui/jobs/{marks.ready_job}"),
    ]
    return found + marks.planner_pages


def _z(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


class Browser:
    """One signed-in session on a keep-alive connection, fetching as a browser does."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str | None = None,
                accept: str = "text/html") -> tuple[int, bytes]:
        headers = {"Accept": accept}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        self.conn.request(method, path, body, headers)
        response = self.conn.getresponse()
        payload = response.read()
        for header in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        return response.status, payload

    def sign_in(self, token: str) -> None:
        """GET the sign-in form, POST the token with the form's CSRF value; a session
        cookie must come back."""
        status, form = self.request("GET", "/ui/sign-in")
        nonce = re.search(rb'name="csrf_token" value="([^"]+)"', form)
        if status != 200 or nonce is None:
            raise RuntimeError(f"sign-in form: {status} {form[:300]!r}")
        status, body = self.request("POST", "/ui/sign-in", urlencode(
            {"csrf_token": nonce.group(1).decode(), "token": token}))
        if status != 303 or "jobserver_session" not in self.cookies:
            raise RuntimeError(f"sign-in refused: {status} {body[:300]!r}")

    def time_get(self, path: str) -> tuple[float, int]:
        """Seconds from sending GET ``path`` to its answer's last byte, and its status.
        The live fragments are asked for as the pages' script does."""
        accept = "text/html-fragment" if LIVE.search(path) else "text/html"
        began = time.perf_counter()
        status, _ = self.request("GET", path, accept=accept)
        return time.perf_counter() - began, status

    def close(self) -> None:
        self.conn.close()


def measure(port: int, timed: list[tuple[str, str]], rounds: int) -> list[dict[str, Any]]:
    """``rounds`` GETs of each page, round-robin, after one untimed round."""
    browser = Browser(port)
    try:
        browser.sign_in(TOKEN)
        seconds: dict[str, list[float]] = {label: [] for label, _ in timed}
        errors: dict[str, list[int]] = {label: [] for label, _ in timed}
        for number in range(rounds + 1):
            for label, path in timed:
                took, status = browser.time_get(path)
                if status != 200:
                    errors[label].append(status)
                elif number:  # the first round warms caches and connections up
                    seconds[label].append(took)
    finally:
        browser.close()
    rows = []
    for label, path in timed:
        figures = latency_summary(seconds[label])
        rows.append({"page": label, "path": path, "n": figures["n"],
                     "p50_ms": figures["p50_ms"], "p95_ms": figures["p95_ms"],
                     "max_ms": figures["max_ms"], "target_ms": TARGET_MS,
                     "met": figures["p95_ms"] is not None and figures["p95_ms"] <= TARGET_MS,
                     "errors": len(errors[label]),
                     "statuses": sorted(set(errors[label]))})
    return rows


def add_jobs(client: Client) -> tuple[int, int]:
    """The example DAG job (waited for) and a job that runs for an hour; their ids."""
    dag = int(client.submit((EXAMPLES / "etl-dag.json").read_bytes())["id"])
    running = int(client.submit(json.dumps({"name": "long-sleep", "steps": [
        {"name": "prepare", "type": "noop"},
        {"name": "wait", "type": "sleep", "seconds": 3600}]}).encode())["id"])
    return dag, running


def landmarks(url: str, dag: int, running: int, planner: PlannerData) -> Landmarks:
    """Filled jobs of each kind from the middle of the table, the second page's
    cursor, and what went in through the API."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            middle = int(conn.execute(text("SELECT max(id) / 2 FROM jobs")).scalar_one())

            def one(state: str) -> int:
                return int(conn.execute(text(
                    "SELECT max(id) FROM jobs WHERE state = :s AND id < :m"),
                    {"s": state, "m": middle}).scalar_one())

            page_two = int(conn.execute(text(
                "SELECT id FROM jobs ORDER BY id DESC OFFSET 49 LIMIT 1")).scalar_one())
            return Landmarks(page_two, dag, running, one("SUCCEED"), one("ERROR"),
                             one("READY"), planner.pages())
    finally:
        engine.dispose()


def analyze(url: str) -> None:
    """``ANALYZE`` the tables the planners' data went into, as autovacuum would have by
    the time anyone looks (it is off on this server): a table never analysed is
    planned as if it were tiny, and the dataset page then sorts the whole dataset."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("ANALYZE"))
    finally:
        engine.dispose()


def run(opts: Options, count: int | None = None, rounds: int | None = None) -> list[dict]:
    count = count or opts.scale(1_000_000, 5_000)
    rounds = rounds or opts.scale(50, 2)
    sizes = Sizes(schedules=opts.scale(200, 5), partitions=opts.scale(100_000, 480),
                  shops=opts.scale(5, 1), days=opts.scale(90, 7),
                  batch_locations=("IN", "US")[:opts.scale(2, 1)],
                  batch_runs=opts.scale(4, 1))
    work = opts.work_dir / "ui"
    with store_for("postgres", work) as url:
        log(f"ui: loading {count:,} jobs")
        log(f"ui: loaded in {fill(url, count, UI_JOBS):.0f} s")
        data_dir = work / "data"
        with Cluster(work, url, "postgres", "single", **batch_settings(data_dir)) as cluster:
            cluster.start(NODE)
            cluster.wait_registered(api=True, timeout=120)
            client = Client(cluster.base_url, TOKEN, timeout=60)
            began = time.monotonic()
            planner = add_planner_data(client, data_dir / "views", sizes)
            dag, running = add_jobs(client)
            wait_idle(client, busy_allowed=1)
            analyze(url)
            log(f"ui: planners' data and jobs in {time.monotonic() - began:.0f} s")
            timed = pages(landmarks(url, dag, running, planner))
            load_before, began = loadavg(), time.monotonic()
            rows = measure(cluster.port, timed, rounds)
            took = time.monotonic() - began
    log(f"ui: {len(timed)} pages x {rounds} rounds in {took:.0f} s, load {load_before} "
        f"before, {loadavg()} after")
    write_result("ui", opts, rows, {"jobs": count, "rounds": rounds, "load_1m": load_before,
                                    "missed": [row["page"] for row in rows if not row["met"]]})
    return rows


if __name__ == "__main__":
    args = [int(arg) for arg in sys.argv[1:3]]
    run(Options(command="python -m bench.ui " + " ".join(sys.argv[1:])),
        *(args + [1_000_000, 50][len(args):]))
