"""The benchmark's one entry point: ``make bench`` = ``python -m bench``.

    python -m bench                       every scenario, full size (long: see RESULTS.md)
    python -m bench --smoke               every scenario, tiny counts (~a few minutes)
    python -m bench --only throughput,latency
    python -m bench --only failover --trials 10
    python -m bench --only schedules --schedules 2000 --minutes 2
    python -m bench --only datasets --partitions 200000
    python -m bench --only views --views 20 --view-days 5000 --view-run 10x1000
    python -m bench --only retention --retention-jobs 1000000 --rounds 2
    python -m bench --only ui --ui-jobs 1000000 --ui-rounds 50
    python -m bench --only footprint --footprint-jobs 1000000

Each scenario prints a table and writes ``bench/results/<scenario>[-smoke].json``;
``summary`` puts our figures beside the issue's targets and the peers' ratios. Timing
is never asserted: a benchmark is not a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, Options, log, write_result

SCENARIOS = ["floor", "throughput", "latency", "footprint", "failover", "backlog", "peers",
             "shapes", "profile", "schedules", "datasets", "views", "retention", "ui"]
NEEDS_ZK = {"throughput", "failover", "profile"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny counts; keeps the harness "
                        "working, measures nothing")
    parser.add_argument("--only", help="comma-separated scenarios: " + ",".join(SCENARIOS))
    parser.add_argument("--skip", help="comma-separated scenarios to leave out")
    parser.add_argument("--trials", type=int, help="failover trials per configuration")
    parser.add_argument("--sizes", help="backlog sizes, e.g. 1000,100000,1000000")
    parser.add_argument("--configs", help="throughput: only store/lock/mode/nodes items, "
                        "e.g. postgres/postgres/single/1")
    parser.add_argument("--load-fractions", help="latency under load at these fractions of "
                        "the measured peak (default 0.8), e.g. 0.8,0.4")
    parser.add_argument("--node-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="throughput only: extra JOBSERVER_KEY=VALUE for the nodes, e.g. "
                        "SCHEDULER__MAX_CONCURRENT_JOBS=64 (results go to their own file)")
    parser.add_argument("--schedules", type=int, help="schedules: how many cron schedules "
                        "(default 10000)")
    parser.add_argument("--minutes", type=int, help="schedules: minute boundaries measured "
                        "(default 3)")
    parser.add_argument("--partitions", type=int, help="datasets: how many partitions "
                        "(default 1000000)")
    parser.add_argument("--stores", help="datasets, views: only these stores, e.g. postgres")
    parser.add_argument("--no-consume", action="store_true", help="datasets: adds and "
                        "fill-and-claims only, no consumer jobs")
    parser.add_argument("--views", type=int, help="views: how many views in the lattice "
                        "(default 20)")
    parser.add_argument("--view-days", type=int, help="views: how many days of the top view "
                        "are addressed (default 5000)")
    parser.add_argument("--view-run", help="views: the lattice of no-op jobs run, "
                        "VIEWSxDAYS (default 10x1000, about 10,000 partitions)")
    parser.add_argument("--retention-jobs", type=int, help="retention: old finished jobs in "
                        "the table, deleted while claims are measured (default 1000000)")
    parser.add_argument("--rounds", type=int, help="retention: rounds of the three phases "
                        "(default 2)")
    parser.add_argument("--ui-jobs", type=int, help="ui: jobs in the store the dashboard's "
                        "pages are timed on (default 1000000)")
    parser.add_argument("--ui-rounds", type=int, help="ui: GETs of each page (default 50)")
    parser.add_argument("--footprint-jobs", type=int, help="footprint: no-op jobs pushed "
                        "through a node before its idle RSS is taken again (default "
                        "1000000; 0 leaves it out)")
    parser.add_argument("--no-zookeeper", action="store_true")
    parser.add_argument("--no-profile", action="store_true", help="skip py-spy")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    return parser


def _zookeeper(work: Path):
    try:
        from tests import zkserver
    except ImportError:
        return None, "tests.zkserver is not importable (run from the repository root)"
    reason = zkserver.available()
    if reason:
        return None, reason
    server = zkserver.ZooKeeperServer(work / "zookeeper")
    server.start()
    return server, None


def _load(name: str, smoke: bool) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}{'-smoke' if smoke else ''}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _peak(smoke: bool) -> dict[str, float]:
    """1-node single-mode jobs/s per store, for the latency runs at 80 % of peak."""
    data = _load("throughput", smoke)
    peak: dict[str, float] = {}
    for row in (data or {}).get("rows", []):
        if (row["mode"] == "single" and row["nodes"] == 1 and not row.get("settings")
                and row["lock"] in ("file", "postgres")):
            peak[row["store"]] = row["jobs_per_s"]
    return peak


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    chosen = args.only.split(",") if args.only else list(SCENARIOS)
    chosen = [s for s in chosen if s not in set((args.skip or "").split(","))]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        print(f"unknown scenario(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    opts = Options(smoke=args.smoke, work_dir=work, profile=not args.no_profile,
                   node_settings=dict(item.split("=", 1) for item in args.node_setting),
                   command="python -m bench " + " ".join(argv if argv is not None
                                                         else sys.argv[1:]))
    zk, zk_hosts = None, None
    if NEEDS_ZK & set(chosen) and not args.no_zookeeper:
        zk, reason = _zookeeper(work)
        if zk is None:
            log(f"ZooKeeper not available ({reason}): zookeeper rows are left out")
        else:
            zk_hosts = zk.hosts
    began = time.monotonic()
    try:
        for name in chosen:
            log(f"--- {name}")
            started = time.monotonic()
            if name == "floor":
                from bench import floor
                floor.run(opts)
            elif name == "throughput":
                from bench import throughput
                throughput.run(opts, zk_hosts,
                               set(args.configs.split(",")) if args.configs else None)
            elif name == "latency":
                from bench import latency
                if args.load_fractions:
                    latency.LOAD_FRACTIONS = [float(f) for f in args.load_fractions.split(",")]
                latency.run(opts, _peak(opts.smoke))
            elif name == "footprint":
                from bench import footprint
                footprint.run(opts, args.footprint_jobs)
            elif name == "failover":
                from bench import failover
                failover.run(opts, zk_hosts, args.trials)
            elif name == "backlog":
                from bench import backlog
                backlog.run(opts, [int(s) for s in args.sizes.split(",")] if args.sizes
                            else None)
            elif name == "peers":
                from bench.peers import scenarios
                scenarios.run(opts)
            elif name == "shapes":
                from bench import shapes
                shapes.run(opts)
            elif name == "profile":
                from bench import profile
                profile.run(opts, zk_hosts)
            elif name == "schedules":
                from bench import schedules
                schedules.run(opts, args.schedules, args.minutes)
            elif name == "datasets":
                from bench import datasets
                datasets.run(opts, args.partitions,
                             args.stores.split(",") if args.stores else None,
                             not args.no_consume)
            elif name == "views":
                from bench import views
                views.run(opts, args.views, args.view_days,
                          args.stores.split(",") if args.stores else None,
                          _pair(args.view_run) if args.view_run else None)
            elif name == "retention":
                from bench import retention
                retention.run(opts, args.retention_jobs, args.rounds)
            elif name == "ui":
                from bench import ui
                ui.run(opts, args.ui_jobs, args.ui_rounds)
            log(f"--- {name} took {time.monotonic() - started:.0f} s")
        summary(opts)
    finally:
        if zk is not None:
            zk.stop()
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    log(f"bench done in {time.monotonic() - began:.0f} s")
    return 0


def _add_throughput(add: Any, rates: dict[tuple, Any], slots: str, celery: Any, procr: Any,
                    floor: Any) -> None:
    """The throughput targets for one pass: the defaults (``slots`` empty) or the
    100-slot pass (``throughput.WIDE``, ``slots`` = ", 100 slots")."""
    pg1 = rates.get(("postgres", "postgres", "single", 1))
    if pg1:
        add(f"throughput PG 1 node (single{slots}) jobs/s", pg1, ">= 3000", pg1 >= 3000,
            vs_celery=_ratio(pg1, celery), vs_procrastinate=_ratio(pg1, procr),
            vs_pgbench=_ratio(pg1, floor))
        if celery:
            add(f"throughput PG 1 node / Celery{slots}", _ratio(pg1, celery), ">= 5x",
                pg1 >= 5 * celery)
    pg3, pgd1 = (rates.get(("postgres", "postgres", "distributed", n)) for n in (3, 1))
    if pg3 and pgd1:
        add(f"throughput PG distributed 3 nodes / 1 node{slots}", _ratio(pg3, pgd1), ">= 1.0",
            pg3 >= pgd1)
    sq = rates.get(("sqlite", "file", "single", 1))
    if sq:
        add(f"throughput SQLite 1 node jobs/s{slots}", sq, ">= 2000", sq >= 2000)


def summary(opts: Options) -> list[dict[str, Any]]:
    """Our figures beside the issue's targets, from the JSON files present."""
    rows: list[dict[str, Any]] = []
    tp_rows = (_load("throughput", opts.smoke) or {}).get("rows", [])
    tp = {(r["store"], r["lock"], r["mode"], r["nodes"]): r["jobs_per_s"]
          for r in tp_rows if not r.get("settings")}
    wide = {(r["store"], r["lock"], r["mode"], r["nodes"]): r["jobs_per_s"]
            for r in tp_rows if r.get("settings")}
    peers = (_load("peers_throughput", opts.smoke) or {}).get("rows", [])
    celery_best = max((r["jobs_per_s"] or 0 for r in peers
                       if r["peer"] == "celery" and r["workers"] == 1), default=None)
    procr = next((r["jobs_per_s"] for r in peers
                  if r["peer"] == "procrastinate" and r["workers"] == 1), None)
    floor = next((r["tps"] for r in (_load("floor", opts.smoke) or {}).get("rows", [])
                  if r["clients"] == 10), None)

    def add(what: str, value: Any, target: str, met: bool | None, **extra: Any) -> None:
        rows.append({"figure": what, "value": value, "target": target,
                     "met": None if met is None else ("yes" if met else "NO"), **extra})

    _add_throughput(add, tp, "", celery_best, procr, floor)
    _add_throughput(add, wide, ", 100 slots", celery_best, procr, floor)
    _add_shapes(add, (_load("shapes", opts.smoke) or {}).get("rows", []))
    for row in (_load("latency", opts.smoke) or {}).get("rows", []):
        if row["config"] == "postgres notify" and row["load"] == "idle":
            add("latency NOTIFY p50 ms", row["p50_ms"], "<= 3", _le(row["p50_ms"], 3))
            add("latency NOTIFY p99 ms", row["p99_ms"], "<= 10", _le(row["p99_ms"], 10))
        if row["config"] == "postgres poll 100ms" and row["load"] == "idle":
            add("latency polling 100 ms p50 ms", row["p50_ms"], "<= 60", _le(row["p50_ms"], 60))
    limits = {"file": ("<= poll + 1 s = 2 s", 2.0), "postgres": ("<= 2 s", 2.0),
              "zookeeper": ("<= session + 1 s = 5 s", 5.0)}
    for row in (_load("failover", opts.smoke) or {}).get("rows", []):
        text, limit = limits[row["lock"]]
        add(f"failover {row['lock']} {row['mode']} max s", row["max_s"], text,
            _le(row["max_s"], limit), p50_s=row["p50_s"])
    backlog = (_load("backlog", opts.smoke) or {}).get("rows", [])
    for mix in ("finished", "ready"):
        mine = [r for r in backlog if r["mix"] == mix]
        if len(mine) > 1 and mine[-1].get("rate_vs_smallest"):
            add(f"backlog {mix}: {mine[-1]['jobs_in_table']:,} vs {mine[0]['jobs_in_table']:,}"
                " claim rate", mine[-1]["rate_vs_smallest"], ">= 0.9",
                mine[-1]["rate_vs_smallest"] >= 0.9)
    for row in (_load("footprint", opts.smoke) or {}).get("rows", []):
        if row["state"] == "idle":
            add(f"idle node RSS MB ({row['store']})", row["node_rss_mb"], "<= 120",
                row["node_rss_mb"] <= 120, api_rss_mb=row["api_rss_mb"])
        elif row["state"].startswith("idle after"):
            add(f"idle node RSS MB ({row['store']}) {row['state'][5:]}", row["node_rss_mb"],
                "<= 120", row["node_rss_mb"] <= 120, api_rss_mb=row["api_rss_mb"],
                growth_mb=row.get("node_growth_mb"))
    _add_schedules(add, (_load("schedules", opts.smoke) or {}).get("rows", []))
    _add_datasets(add, (_load("datasets", opts.smoke) or {}).get("rows", []))
    _add_views(add, _load("views", opts.smoke) or {})
    _add_retention(add, _load("retention", opts.smoke) or {})
    _add_ui(add, _load("ui", opts.smoke) or {})
    if rows:
        write_result("summary", opts, rows)
        if not opts.smoke:  # the figures RESULTS.md compares the next run against
            path = RESULTS_DIR / "history.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            last = json.loads(lines[-1])["rows"] if lines else None
            if rows != last:  # only when a figure changed
                with open(path, "a") as history:
                    history.write(json.dumps({"command": opts.command, "rows": rows,
                                              "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
                                  + "\n")
    return rows


def _add_shapes(add: Any, rows: list[dict[str, Any]]) -> None:
    """The shapes scenario's targets, beside the no-op rows: 10 ms sleeps at >= 95 % of
    the 1,000/s floor, a /bin/true step within 2x of fork+exec; each against the best
    Celery pool and procrastinate with the same shape."""
    targets = {"sleep10": ("jobs/s / 1,000 floor", ">= 0.95", lambda v: v >= 0.95),
               "true": ("fork+exec x10 / ours", "<= 2.0", lambda v: v <= 2.0)}
    for ours in (r for r in rows if r["system"] == "jobserver"):
        shape = ours["shape"]
        peers = [r for r in rows if r["shape"] == shape]
        celery = max((r["jobs_per_s"] or 0 for r in peers if r["system"] == "celery"),
                     default=None)
        procr = next((r["jobs_per_s"] for r in peers if r["system"] == "procrastinate"), None)
        what, target, met = targets.get(shape, ("jobs/s", "report", None))
        value = ours["vs_floor"] if shape in targets else ours["jobs_per_s"]
        add(f"shapes {shape}: {what}", value, target,
            None if met is None or value is None else met(value),
            jobs_per_s=ours["jobs_per_s"], ms_per_job=ours["ms_per_job"],
            vs_celery=_ratio(ours["jobs_per_s"], celery),
            vs_procrastinate=_ratio(ours["jobs_per_s"], procr))


def _add_schedules(add: Any, rows: list[dict[str, Any]]) -> None:
    """The schedules scenario's targets: p99 fire-to-launch lag and evaluator CPU."""
    for row in rows:
        what = f"schedules {row['schedules']:,} {row.get('trigger', 'cron')}, {row['store']}"
        add(f"{what}: p99 lag s", row["lag_p99_s"], "<= 1", _le(row["lag_p99_s"], 1.0),
            p50_s=row["lag_p50_s"], missing=row["missing"])
        pct = row["eval_core_pct"]
        add(f"{what}: evaluator % of a core", pct, "< 10",
            None if pct is None else pct < 10)


def _add_datasets(add: Any, rows: list[dict[str, Any]]) -> None:
    """The datasets scenario's targets: batched adds per second (PostgreSQL) and a
    fill-and-claim at the full dataset within 2x of one at 1,000 partitions."""
    for row in rows:
        what = f"datasets {row['partitions']:,} partitions, {row['store']}"
        if row["store"] == "postgres":
            add(f"{what}: added per s (batches of 10,000)", row["add_per_s"], ">= 20000",
                row["add_per_s"] >= 20000, consumed_per_s=row.get("consume_per_s"))
        add(f"{what}: fill-and-claim vs at 1,000", row["fill_ratio"], "<= 2.0",
            _le(row["fill_ratio"], 2.0), p50_ms=row["fill_full_p50_ms"],
            p50_ms_at_1k=row["fill_1k_p50_ms"])
        if row.get("fill_ratio_analyzed") is not None:
            add(f"{what}: fill-and-claim vs at 1,000, after ANALYZE",
                row["fill_ratio_analyzed"], "<= 2.0", _le(row["fill_ratio_analyzed"], 2.0),
                p50_ms=row["fill_full_analyzed_p50_ms"])


def _add_views(add: Any, document: dict[str, Any]) -> None:
    """The views scenario's targets: plan and re-plan of the lattice within 5 s each
    (in memory, read from the store, and the API's request); no-op view partitions
    materialized per s."""
    for row in document.get("rows", []):
        what = f"views {row['partitions']:,} partitions"
        add(f"{what}: plan s (instantiate + plan)", row["plan_total_s"], "<= 5",
            _le(row["plan_total_s"], 5.0), per_s=row["plan_per_s"])
        add(f"{what}: re-plan unchanged s", row["replan_total_s"], "<= 5",
            _le(row["replan_total_s"], 5.0) and row["replan_all_skip"],
            per_s=row["replan_per_s"])
    for row in document.get("store_rows", []):
        add(f"views {row['partitions']:,} partitions, {row['store']}: re-plan from the "
            "store s", row["store_replan_s"], "<= 5",
            _le(row["store_replan_s"], 5.0) and row["store_replan_all_skip"],
            read_s=row["read_s"])
        for kind, label in (("api_plan", "with plan"), ("api_default", "DEFAULT")):
            if f"{kind}_s" in row:  # runs before the API's row have none
                add(f"views {row['partitions']:,} partitions, {row['store']}: POST "
                    f"materialize {label}, unchanged, s", row[f"{kind}_s"], "<= 5",
                    _le(row[f"{kind}_s"], 5.0) and row["api_all_skip"])
    for row in document.get("run_rows", []):
        add(f"views {row['partitions']:,} no-op partitions run, {row['store']}: "
            "materialized per s", row["run_per_s"], "report", None, submit_s=row["submit_s"])


def _add_retention(add: Any, document: dict[str, Any]) -> None:
    """The retention scenario's target: claim rate and p99 latency while old jobs are
    deleted within 10 % of those without."""
    for phase, figures in (document.get("ratios") or {}).items():
        what = f"retention {document.get('old_jobs', 0):,} old jobs, deleted by {phase}"
        rate, p99 = figures.get("claim_rate_ratio"), figures.get("p99_ratio")
        add(f"{what}: claim rate vs none", rate, ">= 0.9", None if rate is None else rate >= 0.9)
        add(f"{what}: p99 vs none", p99, "<= 1.1", _le(p99, 1.1))


def _add_ui(add: Any, document: dict[str, Any]) -> None:
    """The ui scenario's target: every dashboard page within 200 ms on the store."""
    for row in document.get("rows", []):
        add(f"ui {document.get('jobs', 0):,} jobs: {row['page']} p95 ms", row["p95_ms"],
            f"<= {row['target_ms']:g}", _le(row["p95_ms"], row["target_ms"])
            and not row["errors"], p50_ms=row["p50_ms"], max_ms=row["max_ms"])


def _pair(text: str) -> tuple[int, int]:
    views, days = text.lower().split("x")
    return int(views), int(days)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def _le(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


if __name__ == "__main__":
    sys.exit(main())
