"""The summary of a run: our figures beside the issue's targets and the peers' figures.

Read from the JSON files the scenarios wrote (``bench/results``), so it can be made
again from any earlier run's files: ``summary(opts)`` writes ``summary[-smoke].json``
and, for a full-size run whose figures changed, a line of ``history.jsonl``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import RESULTS_DIR, Options, write_result


def load(name: str, smoke: bool) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}{'-smoke' if smoke else ''}.json"
    return json.loads(path.read_text()) if path.exists() else None


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
    tp_rows = (load("throughput", opts.smoke) or {}).get("rows", [])
    tp = {(r["store"], r["lock"], r["mode"], r["nodes"]): r["jobs_per_s"]
          for r in tp_rows if not r.get("settings")}
    wide = {(r["store"], r["lock"], r["mode"], r["nodes"]): r["jobs_per_s"]
            for r in tp_rows if r.get("settings")}
    peers = (load("peers_throughput", opts.smoke) or {}).get("rows", [])
    # The issue compares at the same concurrency: Celery's prefork pool of 10 processes
    # when the run has it; runs before it had only c=2 and threads, and took the best.
    celery_best = next((r["jobs_per_s"] for r in peers if r["peer"] == "celery"
                        and r["config"] == "prefork c=10" and r["workers"] == 1), None) or max(
        (r["jobs_per_s"] or 0 for r in peers if r["peer"] == "celery" and r["workers"] == 1),
        default=None)
    procr = next((r["jobs_per_s"] for r in peers
                  if r["peer"] == "procrastinate" and r["workers"] == 1), None)
    floor = next((r["tps"] for r in (load("floor", opts.smoke) or {}).get("rows", [])
                  if r["clients"] == 10), None)

    def add(what: str, value: Any, target: str, met: bool | None, **extra: Any) -> None:
        rows.append({"figure": what, "value": value, "target": target,
                     "met": None if met is None else ("yes" if met else "NO"), **extra})

    _add_throughput(add, tp, "", celery_best, procr, floor)
    _add_throughput(add, wide, ", 100 slots", celery_best, procr, floor)
    _add_shapes(add, (load("shapes", opts.smoke) or {}).get("rows", []))
    _add_latency(add, (load("latency", opts.smoke) or {}).get("rows", []),
                 (load("peers_latency", opts.smoke) or {}).get("rows", []))
    _add_due(add, (load("due", opts.smoke) or {}).get("rows", []))
    _add_bulk(add, (load("bulk_intake", opts.smoke) or {}).get("rows", []))
    limits = {"file": ("<= poll + 1 s = 2 s", 2.0), "postgres": ("<= 2 s", 2.0),
              "zookeeper": ("<= session + 1 s = 5 s", 5.0)}
    for row in (load("failover", opts.smoke) or {}).get("rows", []):
        text, limit = limits[row["lock"]]
        add(f"failover {row['lock']} {row['mode']} max s", row["max_s"], text,
            _le(row["max_s"], limit), p50_s=row["p50_s"])
    backlog = (load("backlog", opts.smoke) or {}).get("rows", [])
    for mix in ("finished", "ready"):
        mine = [r for r in backlog if r["mix"] == mix]
        if len(mine) > 1 and mine[-1].get("rate_vs_smallest"):
            add(f"backlog {mix}: {mine[-1]['jobs_in_table']:,} vs {mine[0]['jobs_in_table']:,}"
                " claim rate", mine[-1]["rate_vs_smallest"], ">= 0.9",
                mine[-1]["rate_vs_smallest"] >= 0.9)
    for row in (load("footprint", opts.smoke) or {}).get("rows", []):
        if row["state"] == "idle":
            add(f"idle node RSS MB ({row['store']})", row["node_rss_mb"], "<= 120",
                row["node_rss_mb"] <= 120, api_rss_mb=row["api_rss_mb"])
        elif row["state"].startswith("idle after"):
            add(f"idle node RSS MB ({row['store']}) {row['state'][5:]}", row["node_rss_mb"],
                "<= 120", row["node_rss_mb"] <= 120, api_rss_mb=row["api_rss_mb"],
                growth_mb=row.get("node_growth_mb"))
    _add_schedules(add, (load("schedules", opts.smoke) or {}).get("rows", []))
    _add_datasets(add, (load("datasets", opts.smoke) or {}).get("rows", []))
    _add_views(add, load("views", opts.smoke) or {})
    _add_retention(add, load("retention", opts.smoke) or {})
    _add_ui(add, load("ui", opts.smoke) or {})
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


def _add_latency(add: Any, ours: list[dict[str, Any]], peers: list[dict[str, Any]]) -> None:
    """Submit-to-start: idle p50 <= 3 ms and no worse than the best peer's, p99 <= 10 ms;
    under load, p99 at 80 % of our own peak below every peer's at 80 % of theirs, and
    <= 20 ms at 50 %."""
    for row in ours:
        if row["config"] == "postgres poll 100ms" and row["load"] == "idle":
            add("latency polling 100 ms p50 ms", row["p50_ms"], "<= 60", _le(row["p50_ms"], 60))
        if row["config"] != "postgres notify":
            continue
        if row["load"] == "idle":
            _add_idle_latency(add, row, [p for p in peers if p["load"] == "idle"])
        elif row["load"].startswith("80%"):
            loaded = [p for p in peers if p["load"].startswith("80%") and p.get("p99_ms")]
            best = min(loaded, key=lambda p: p["p99_ms"], default=None)
            add("latency NOTIFY p99 ms at 80 % of peak", row["p99_ms"],
                "< every peer's at 80 % of theirs",
                None if best is None else row["p99_ms"] < best["p99_ms"],
                rate=row["achieved_rate"], **_peer(best))
        elif row["load"].startswith("50%"):
            add("latency NOTIFY p99 ms at 50 % of peak", row["p99_ms"], "<= 20",
                _le(row["p99_ms"], 20), rate=row["achieved_rate"])


def _add_idle_latency(add: Any, row: dict[str, Any], peers: list[dict[str, Any]]) -> None:
    best = min((p for p in peers if p.get("p50_ms")), key=lambda p: p["p50_ms"], default=None)
    add("latency NOTIFY p50 ms", row["p50_ms"], "<= 3", _le(row["p50_ms"], 3))
    if best is not None:
        add("latency NOTIFY p50 vs the best peer's p50", _ratio(row["p50_ms"], best["p50_ms"]),
            "<= 1.0", row["p50_ms"] <= best["p50_ms"], **_peer(best))
    add("latency NOTIFY p99 ms", row["p99_ms"], "<= 10", _le(row["p99_ms"], 10))


def _peer(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {}
    return {"peer": f"{row['peer']} {row['config']}", "peer_p50_ms": row["p50_ms"],
            "peer_p99_ms": row["p99_ms"]}


def _add_due(add: Any, rows: list[dict[str, Any]]) -> None:
    """A job held back by ``not_before`` starts within 5 ms of its time, p99 <= 20 ms."""
    for row in rows:
        add(f"due job start lateness p50 ms ({row['store']})", row["p50_ms"], "<= 5",
            _le(row["p50_ms"], 5), p99_ms=row["p99_ms"])
        add(f"due job start lateness p99 ms ({row['store']})", row["p99_ms"], "<= 20",
            _le(row["p99_ms"], 20))


#: Bulk intake targets, jobs/s into one node in batches of 1,000.
BULK_TARGETS = {"postgres": 20000, "sqlite": 10000}


def _add_bulk(add: Any, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        target = BULK_TARGETS.get(row["store"])
        add(f"bulk intake jobs/s ({row['store']}, batches of {row['batch_size']:,})",
            row["jobs_per_s"], f">= {target}" if target else "report",
            None if target is None else row["jobs_per_s"] >= target,
            api_cpu_ms_per_1k_jobs=row["api_cpu_ms_per_1k_jobs"])


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


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def _le(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit
