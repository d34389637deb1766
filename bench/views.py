"""Scenario — views: plan 100,000 view partitions, then re-plan them with nothing changed.

The pure half of ``materialize``, in process, no store: a lattice of ``VIEWS`` daily
views over ``DAYS`` days. ``app.bench/V00`` is a noop source; every other view
``V<i>`` reads the last ``WINDOW`` days of ``V<i-1>`` (``days: {last: 7}``), so each
partition has 7 dependencies and the lattice has about ``VIEWS × DAYS`` partitions and
7 times as many edges. The request addresses every day of the top view.

* **Plan**: :func:`~jobserver.views.lattice.instantiate` (the addressed partitions
  and their dependencies, recursively), then :func:`~jobserver.views.planner.plan`
  with nothing stored (every source SET, every other partition TRANSFORM), each timed.
* **Re-plan**: the stored states every partition would have once that plan ran
  (materialized, the current checksum, each view's timestamp after its
  dependencies'), given as a dict; instantiate and plan again, each timed. Every
  decision must be SKIP.

Then, per store (PostgreSQL, SQLite; smoke: PostgreSQL only), :mod:`bench.views_store`:
the same lattice stored once and re-planned by a real ``materialize`` read from the
store, end to end and phase by phase, and by the API's ``POST
/api/v1/views/materialize`` to a served node (``store_rows``); and a lattice of about
10,000 partitions whose views are jobs of one ``noop`` step, materialized through a
real node until every partition is MATERIALIZED (``run_rows``, partitions per
second). Targets (the issue's): each of plan and re-plan within 5 s, the re-plan from
the store and the API's request too. Plans run with the cyclic collector paused, as a
request runs them (:func:`~jobserver.views.materialize.collector_paused`). Writes
``bench/results/views[-smoke].json``.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from typing import Any

from bench.common import Options, loadavg, log, print_table, write_result
from jobserver.views import limits
from jobserver.views.lattice import Lattice, instantiate
from jobserver.views.materialize import collector_paused
from jobserver.views.model import (Action, Decision, Mode, StoredPartition, ViewAddress,
                                   ViewState)
from jobserver.views.planner import plan
from jobserver.views.spec import ViewSpec, parse_view, validate_views

VIEWS = (20, 5)
DAYS = (5000, 200)
WINDOW = 7
TARGET_S = 5.0
FIRST_DAY = date(2010, 1, 1)
DATA_AT = datetime(2026, 1, 1, tzinfo=timezone.utc)
STORES = ("postgres", "sqlite")
#: The bench's views.max_partitions: its lattice (about VIEWS × DAYS partitions) is
#: sized to the default limit and passes it by its window's first days.
MAX_PARTITIONS = 1_000_000


def shell_job(index: int) -> dict[str, Any]:
    """The transformation of ``V<index>`` in the planning lattice (never run)."""
    return {"job": {"steps": [{"name": "t", "type": "shell",
                               "argv": ["sh", "-c", f"echo V{index:02d} $JOBSERVER_PARAM_YEAR"
                                        "$JOBSERVER_PARAM_MONTH$JOBSERVER_PARAM_DAY"]}]}}


def lattice_bodies(count: int, source: dict[str, Any] | None = None,
                   job: Callable[[int], dict[str, Any]] = shell_job) -> list[dict[str, Any]]:
    """The definitions of the lattice: ``V00`` is noop (with ``source``'s extra fields,
    e.g. its ``location``), or a job too when ``source`` is None and ``job(0)`` is
    given by the caller; ``V01 …`` each read the last 7 days of the one before."""
    parameters = [{"name": name, "type": "string"} for name in ("year", "month", "day")]
    structure = {"fields": [{"name": "id", "type": "bigint"}]}
    first: dict[str, Any] = {"transformation": "noop", **(source or {})}
    bodies: list[dict[str, Any]] = [{"name": "app.bench/V00", "parameters": parameters,
                                     "structure": structure, **first}]
    for index in range(1, count):
        bodies.append({
            "name": f"app.bench/V{index:02d}", "parameters": parameters,
            "structure": structure,
            "dependencies": [{"view": f"app.bench/V{index - 1:02d}", "days": {"last": WINDOW}}],
            "transformation": job(index)})
    return bodies


def lattice_views(count: int) -> dict[str, ViewSpec]:
    """``app.bench/V00`` (noop) and ``V01 …`` each reading the last 7 days of the one
    before."""
    specs = [parse_view(body) for body in lattice_bodies(count)]
    validate_views(specs)
    return {spec.name: spec for spec in specs}


def addresses(top: str, days: int) -> list[ViewAddress]:
    package, view = top.split("/")
    found = []
    for offset in range(days):
        day = FIRST_DAY + timedelta(days=offset)
        found.append(ViewAddress(package, view, (f"{day.year:04d}", f"{day.month:02d}",
                                                  f"{day.day:02d}")))
    return found


def as_stored(lattice: Lattice, decisions: list[Decision]) -> dict[ViewAddress, StoredPartition]:
    """What the store holds once ``decisions`` ran: each transform a microsecond after
    the one before it in lattice order, so after all of its dependencies."""
    stored = {}
    for step, decision in enumerate(decisions):
        at = decision.transformed_at or DATA_AT + timedelta(microseconds=step + 1)
        stored[decision.address] = StoredPartition(ViewState.MATERIALIZED,
                                                   decision.version_checksum, at, None, 0, 1)
    return stored


def timed_plan(views: dict[str, ViewSpec], wanted: list[ViewAddress],
               stored: dict[ViewAddress, StoredPartition]
               ) -> tuple[Lattice, list[Decision], float, float, float]:
    """Instantiate and plan, with the collector paused as in a request; wall seconds
    of each and CPU seconds of both (the CPU figure does not depend on what else the
    machine runs)."""
    gc.collect()  # what earlier phases left is not this phase's cost
    cpu, started = time.process_time(), time.perf_counter()
    with collector_paused():
        lattice = instantiate(views, wanted)
        instantiated = time.perf_counter()
        decisions = plan(lattice, views, stored, Mode.DEFAULT, DATA_AT + timedelta(days=1),
                         lambda address: DATA_AT)
    return (lattice, decisions, instantiated - started, time.perf_counter() - instantiated,
            time.process_time() - cpu)


def pure_row(views: int, days: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Plan and re-plan in memory: the row, and the actions of each plan."""
    specs = lattice_views(views)
    wanted = addresses(f"app.bench/V{views - 1:02d}", days)
    lattice, decisions, inst_s, plan_s, plan_cpu = timed_plan(specs, wanted, {})
    first = Counter(d.action.value for d in decisions)
    edges = sum(len(deps) for deps in lattice.dependencies.values())
    total = len(lattice)
    stored = as_stored(lattice, decisions)
    del lattice, decisions  # a re-plan is another request: only the stored states remain
    _, again, reinst_s, replan_s, replan_cpu = timed_plan(specs, wanted, stored)
    second = Counter(d.action.value for d in again)
    row = {"views": views, "days": days, "partitions": total, "edges": edges,
           "instantiate_s": round(inst_s, 2), "plan_s": round(plan_s, 2),
           "plan_total_s": round(inst_s + plan_s, 2),
           "plan_per_s": round(total / (inst_s + plan_s)), "plan_cpu_s": round(plan_cpu, 2),
           "replan_instantiate_s": round(reinst_s, 2), "replan_s": round(replan_s, 2),
           "replan_total_s": round(reinst_s + replan_s, 2),
           "replan_per_s": round(total / (reinst_s + replan_s)),
           "replan_cpu_s": round(replan_cpu, 2),
           "replan_all_skip": second == Counter({Action.SKIP.value: total}),
           "load1": loadavg()}
    row["met"] = ("yes" if row["plan_total_s"] <= TARGET_S and row["replan_total_s"] <= TARGET_S
                  and row["replan_all_skip"] else "NO")
    log(f"views: {total:,} partitions, {edges:,} edges; first plan {dict(first)}; "
        f"re-plan {dict(second)}")
    return row, {"first_plan": dict(first), "replan": dict(second)}


def run(opts: Options, views: int | None = None, days: int | None = None,
        stores: list[str] | None = None, run_size: tuple[int, int] | None = None
        ) -> list[dict]:
    """The pure plan and re-plan, then per store (smoke: PostgreSQL only) the re-plan
    from the store and the run of no-op view jobs."""
    views = views or opts.scale(*VIEWS)
    days = days or opts.scale(*DAYS)
    with limits.bound(MAX_PARTITIONS):
        return _run(opts, views, days, stores, run_size)


def _run(opts: Options, views: int, days: int, stores: list[str] | None,
         run_size: tuple[int, int] | None) -> list[dict]:
    from bench.views_store import run_rows, store_rows

    row, actions = pure_row(views, days)
    backends = [b for b in (STORES[:1] if opts.smoke else STORES)
                if stores is None or b in stores]
    stored = store_rows(opts, views, days, backends)
    for item in stored:
        within = all(item[figure] <= TARGET_S
                     for figure in ("store_replan_s", "api_plan_s", "api_default_s"))
        item["met"] = ("yes" if within and item["store_replan_all_skip"]
                       and item["api_all_skip"] else "NO")
    print_table("views: re-plan from the store", stored)
    ran = run_rows(opts, backends, run_size)
    print_table("views: no-op view jobs run by a node", ran)
    write_result("views", opts, [row], {"targets": {"plan_s": TARGET_S, "replan_s": TARGET_S},
                                         **actions, "store_rows": stored, "run_rows": ran})
    return [row]
