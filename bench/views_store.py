"""The stored half of the views scenario: a re-plan read from the store, and a run.

* **Re-plan from the store** (:func:`replan_row`): the planning lattice
  (:mod:`bench.views`) defined in a fresh store, its source ``V00`` given data
  (``_SUCCESS`` flags), and every partition stored once as a real request stores it:
  ``materialize`` in mode ``RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS`` (SET of
  every partition, nothing runs; one transaction), timed. Then a ``materialize``
  in mode DEFAULT with ``plan=true`` and nothing changed, timed end to end, and each
  of its phases again on its own: parse the pattern, read the definitions,
  instantiate, read the stored rows, plan (the flags' times read as it goes).
  Every decision must be SKIP.
* **The API's request** (:func:`api_row`): the same store served by one real
  ``jobserver serve`` node, and ``POST /api/v1/views/materialize`` over HTTP with
  ``plan: true`` and then in mode DEFAULT, nothing changed (``API_TRIALS`` each),
  timed from the request until its reply is read and decoded, with the CPU the node's
  processes (its API workers) and PostgreSQL's backends spent on it.
* **Run** (:func:`run_row`): a lattice whose every view, ``V00`` included, is a job of
  one ``noop`` step, on a fresh store served by one real ``jobserver serve`` node
  (single mode; its view tracker turns the jobs' ends into MATERIALIZED). A
  ``materialize`` of every day of the top view submits a job per partition, each
  waiting (``after``) for its 7 upstream jobs; timed: the request itself, and from
  the request until every partition is stored MATERIALIZED (polled).

The re-plan and the run's request go through
:class:`~jobserver.views.materialize.Materializer` in-process, as the node that takes a
request runs them; the API's rows add what a user's request adds to that (routing,
the reply of one object per partition, HTTP).
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from bench.cluster import Cluster
from bench.common import Options, cpu_now, loadavg, log
from bench.datasets_store import JsonClient
from bench.stores import poll_engine, store_for
from bench.views import DATA_AT, FIRST_DAY, MAX_PARTITIONS, WINDOW, lattice_bodies

T = TypeVar("T")
LOCKS = {"postgres": "postgres", "sqlite": "file"}
#: The run's lattice (views, days) at full size and smoke size: about 10,000 and 100.
RUN_SIZE = ((10, 1000), (3, 30))
RUN_TIMEOUT_S = 1800.0
#: Requests of each kind through the API (the row gives their median).
API_TRIALS = 3


def noop_job(index: int) -> dict[str, Any]:
    return {"job": {"steps": [{"name": "t", "type": "noop"}]}}


def pattern(views: int, days: int) -> str:
    """Every one of ``days`` days of the top view, as one range."""
    last = FIRST_DAY + timedelta(days=days - 1)
    return f"app.bench/V{views - 1:02d}/rymd({FIRST_DAY:%Y%m%d}-{last:%Y%m%d})"


@contextmanager
def stored_views(backend: str, work: Path, bodies: list[dict[str, Any]]
                 ) -> Iterator[tuple[str, Any, Any]]:
    """A fresh store with ``bodies`` defined: (url, store, policy)."""
    from jobserver.spec import Policy
    from jobserver.steps.python import PythonSteps
    from jobserver.store import Store
    from jobserver.views.catalog import ViewCatalog

    with store_for(backend, work) as url:
        store = Store(url, notify=False)
        try:
            policy = Policy(PythonSteps.with_entry_points().is_registered, None)
            catalog = ViewCatalog(store, policy)
            for body in bodies:
                catalog.put(catalog.parse(body))
            yield url, store, policy
        finally:
            store.dispose()


def flags(root: Path, views: int, days: int) -> int:
    """A ``_SUCCESS`` flag (time ``DATA_AT``) for every day of ``V00`` the lattice
    reaches: the addressed days and ``WINDOW - 1`` more before them per level."""
    stamp = DATA_AT.timestamp()
    made = 0
    for offset in range(-(views - 1) * (WINDOW - 1), days):
        day = FIRST_DAY + timedelta(days=offset)
        folder = root / f"{day:%Y%m%d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "_SUCCESS").touch()
        os.utime(folder / "_SUCCESS", (stamp, stamp))
        made += 1
    return made


def timed(call: Callable[[], T]) -> tuple[T, float, float]:
    """``call()``, its wall seconds and CPU seconds of this process; with the
    collector paused, as a request runs each phase (``Materializer.run``)."""
    from jobserver.views.materialize import collector_paused

    gc.collect()
    cpu, started = time.process_time(), time.perf_counter()
    with collector_paused():
        result = call()
    return result, time.perf_counter() - started, time.process_time() - cpu


def replan_row(opts: Options, backend: str, views: int, days: int) -> dict[str, Any]:
    """Store the lattice once, then re-plan it from the store with nothing changed."""
    from jobserver.views.lattice import instantiate
    from jobserver.views.patterns import parse_pattern
    from jobserver.views.planner import plan
    from jobserver.views.data import DataTimes
    from jobserver.views.materialize import Materializer, utcnow
    from jobserver.views.model import Action, Mode

    work = opts.work_dir / f"views-{backend}"
    root = work / "data" / "V00"
    bodies = lattice_bodies(views, {"location": f"{root}/${{year}}${{month}}${{day}}"})
    flags(root, views, days)
    text = pattern(views, days)
    with stored_views(backend, work, bodies) as (url, store, policy):
        setting, set_s, _ = timed(lambda: Materializer(store, policy).materialize(
            text, Mode.RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS))
        total = len(setting.decisions)
        log(f"views {backend}: {total:,} partitions stored in {set_s:.1f} s "
            f"{dict(Counter(d.action.value for d in setting.decisions))}")
        again, replan_s, replan_cpu = timed(lambda: Materializer(store, policy).materialize(
            text, Mode.DEFAULT, plan_only=True))
        skipped = sum(d.action is Action.SKIP for d in again.decisions)
        # The same phases one by one (a fresh materializer: definitions parsed anew).
        materializer = Materializer(store, policy)
        wanted, parse_s, _ = timed(lambda: parse_pattern(text))
        specs, defs_s, _ = timed(materializer.definitions)
        lattice, inst_s, _ = timed(lambda: instantiate(specs, wanted, recursive=True))
        stored, read_s, read_cpu = timed(lambda: store.views.read(lattice.order))
        decisions, plan_s, _ = timed(lambda: plan(
            lattice, specs, stored, Mode.DEFAULT, utcnow(), DataTimes(store, specs)))
        rows_read, planned = len(stored), len(decisions)
        del setting, again, lattice, stored, decisions  # the node's request is another's
        api = api_row(work / "api", url, backend, text, total)
    return {"store": backend, "partitions": total, "set_s": round(set_s, 2),
            "set_per_s": round(total / set_s), "store_replan_s": round(replan_s, 2),
            "store_replan_cpu_s": round(replan_cpu, 2),
            "store_replan_all_skip": skipped == total == planned,
            "parse_s": round(parse_s, 3), "definitions_s": round(defs_s, 3),
            "instantiate_s": round(inst_s, 2), "read_s": round(read_s, 2),
            "read_cpu_s": round(read_cpu, 2), "rows_read": rows_read,
            "plan_s": round(plan_s, 2), **api, "load1": loadavg()}


def api_row(work: Path, url: str, backend: str, text: str, total: int) -> dict[str, Any]:
    """``POST /api/v1/views/materialize`` of ``text`` through a served node: with
    ``plan`` and in mode DEFAULT, nothing changed, ``API_TRIALS`` times each; the
    medians of wall seconds (until the reply is decoded) and of the CPU seconds of
    the node's processes and of PostgreSQL's backends, and whether every decision of
    every reply was SKIP."""
    figures: dict[str, Any] = {}
    with Cluster(work, url, LOCKS[backend], "single") as cluster:
        node = cluster.start("n1", views__max_partitions=MAX_PARTITIONS)
        cluster.wait_registered(api=True)
        wait_quiet(node.pid, url)
        client = JsonClient(cluster.port)
        all_skip = True
        for label, body in (("api_plan", {"pattern": text, "plan": True}),
                            ("api_default", {"pattern": text, "mode": "DEFAULT"})):
            trials = []
            for _ in range(API_TRIALS):
                before, started = cpu_now(node.pid, url), time.perf_counter()
                reply = client.call("POST", "/api/v1/views/materialize", body)
                wall, after = time.perf_counter() - started, cpu_now(node.pid, url)
                all_skip = all_skip and reply["counts"] == {"skip": total}
                trials.append((wall, after[0] - before[0], after[1] - before[1]))
                del reply
            wall, node_cpu, db_cpu = (sorted(column)[len(column) // 2]
                                      for column in zip(*trials))
            figures.update({f"{label}_s": round(wall, 2), f"{label}_cpu_s": round(node_cpu, 2),
                            f"{label}_db_cpu_s": round(db_cpu, 2)})
            log(f"views {backend}: {label} " + ", ".join(
                f"{w:.2f} s (node CPU {n:.2f} s, PostgreSQL {d:.2f} s)" for w, n, d in trials))
        client.close()
    return {**figures, "api_all_skip": all_skip}


def wait_quiet(pid: int, url: str, timeout: float = 30.0, interval: float = 0.5) -> None:
    """Until the node's processes and the database's backends spend under a tenth of
    ``interval`` in one (its start-up rounds are over), or ``timeout``: what a request
    is measured to cost is then the request's."""
    deadline = time.monotonic() + timeout
    before = cpu_now(pid, url)
    while time.monotonic() < deadline:
        time.sleep(interval)
        after = cpu_now(pid, url)
        if (after[0] - before[0]) + (after[1] - before[1]) < interval / 10:
            return
        before = after
    log(f"views: node {pid} still busy after {timeout:.0f} s; measuring anyway")


def run_row(opts: Options, backend: str, views: int, days: int) -> dict[str, Any]:
    """Materialize a lattice of noop-step jobs through a real node; partitions/s."""
    from jobserver.views.materialize import Materializer
    from jobserver.views.model import Action, Mode

    work = opts.work_dir / f"views-run-{backend}"
    bodies = lattice_bodies(views, {"transformation": noop_job(0)}, noop_job)
    with stored_views(backend, work, bodies) as (url, store, policy):
        with Cluster(work, url, LOCKS[backend], "single") as cluster:
            cluster.start("n1")
            cluster.wait_registered()
            load = loadavg()
            started = time.perf_counter()
            outcome = Materializer(store, policy).materialize(pattern(views, days),
                                                              Mode.DEFAULT)
            submit_s = time.perf_counter() - started
            total = len(outcome.decisions)
            transforms = sum(d.action is Action.TRANSFORM for d in outcome.decisions)
            log(f"views run {backend}: {transforms:,} of {total:,} partitions submitted "
                f"in {submit_s:.1f} s")
            states, waited = wait_materialized(url, total, started, RUN_TIMEOUT_S)
    done = states.get("materialized", 0)
    return {"store": backend, "views": views, "days": days, "partitions": total,
            "jobs": len(outcome.jobs), "submit_s": round(submit_s, 2),
            "submit_per_s": round(total / submit_s), "materialized": done,
            "run_s": round(waited, 2), "run_per_s": round(done / waited) if waited else None,
            "states": states, "load1_before": load, "load1_after": loadavg()}


def wait_materialized(url: str, total: int, started: float,
                      timeout: float) -> tuple[dict[str, int], float]:
    """Poll the stored states until ``total`` are MATERIALIZED (or none is in flight
    any more, or the deadline); the states and the seconds since ``started``."""
    from sqlalchemy import text

    engine = poll_engine(url)
    deadline = started + timeout
    while True:
        with engine.connect() as conn:
            states = {str(state): int(count) for state, count in conn.execute(text(
                "SELECT state, count(*) FROM view_partitions GROUP BY state"))}
        now = time.perf_counter()
        in_flight = sum(states.get(s, 0) for s in ("waiting", "transforming", "retrying"))
        settled = in_flight == 0 and sum(states.values()) > 0  # some FAILED: no more to come
        if states.get("materialized", 0) >= total or settled or now > deadline:
            return states, now - started
        time.sleep(0.1)


def store_rows(opts: Options, views: int, days: int, backends: list[str]) -> list[dict[str, Any]]:
    rows = []
    for backend in backends:
        row = replan_row(opts, backend, views, days)
        log(f"views {backend}: re-plan from the store {row['store_replan_s']} s "
            f"(read {row['read_s']} s of {row['rows_read']:,} rows)")
        rows.append(row)
    return rows


def run_rows(opts: Options, backends: list[str], size: tuple[int, int] | None = None
             ) -> list[dict[str, Any]]:
    views, days = size or (RUN_SIZE[1] if opts.smoke else RUN_SIZE[0])
    rows = []
    for backend in backends:
        row = run_row(opts, backend, views, days)
        log(f"views run {backend}: {row['materialized']:,} materialized in "
            f"{row['run_s']} s = {row['run_per_s']}/s; states {row['states']}")
        rows.append(row)
    return rows

