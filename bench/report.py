"""Render the JSON results as a Markdown section for ``bench/RESULTS.md``.

    python -m bench.report            # prints the section; paste it at the top

The "previous" column comes from ``bench/results/history.jsonl``, to which every full
run appends its summary rows (see ``bench.run.summary``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.common import RESULTS_DIR

HISTORY = RESULTS_DIR / "history.jsonl"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        out.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def previous_summary() -> dict[str, Any]:
    """figure -> value of the run before the newest one in history.jsonl."""
    if not HISTORY.exists():
        return {}
    runs = [json.loads(line) for line in HISTORY.read_text().splitlines() if line.strip()]
    if len(runs) < 2:
        return {}
    return {row["figure"]: row["value"] for row in runs[-2]["rows"]}


def render() -> str:
    parts = []
    summary = _load("summary")
    if summary:
        before = previous_summary()
        rows = [dict(r, previous=before.get(r["figure"])) for r in summary["rows"]]
        parts.append("### Figures against the targets\n\n" + _table(
            rows, ["figure", "value", "previous", "target", "met"]))
    sections = [
        ("floor", "pgbench -N (the floor)", ["clients", "tps", "latency_ms", "seconds"]),
        ("throughput", "Throughput (no-op jobs)", ["store", "lock", "mode", "nodes", "settings",
                                                   "jobs", "done", "seconds", "jobs_per_s",
                                                   "capped"]),
        ("peers_throughput", "Peers: throughput", ["peer", "config", "workers", "jobs", "done",
                                                  "seconds", "jobs_per_s", "capped"]),
        ("latency", "Latency (submit over HTTP → step body)",
         ["config", "load", "drain_peak", "intake_peak", "target_rate", "achieved_rate", "n",
          "p50_ms", "p95_ms", "p99_ms", "max_ms"]),
        ("peers_latency", "Peers: latency", ["peer", "config", "load", "target_rate",
                                             "achieved_rate", "n", "p50_ms", "p95_ms",
                                             "p99_ms", "max_ms"]),
        ("failover", "Failover (kill -9 of the active node)",
         ["store", "lock", "mode", "trials", "failed", "p50_s", "max_s", "min_s"]),
        ("backlog", "Backlog scale", ["mix", "jobs_in_table", "claimed", "rate_over",
                                      "claim_rate", "rate_vs_smallest", "p50_ms", "p95_ms",
                                      "p99_ms"]),
        ("footprint", "Footprint", ["store", "lock", "state", "running", "node_rss_mb",
                                    "api_rss_mb", "total_rss_mb"]),
        ("profile", "Statements per job (in-process count)",
         ["store", "lock", "mode", "jobs", "jobs_per_s", "statements_per_job",
          "commits_per_job", "statement_ms_per_job", "commit_ms_per_job",
          "lock_queries_per_job"]),
        ("schedules", "Schedules (cron, every minute, one node): fire time → launch",
         ["store", "lock", "schedules", "minutes", "expected", "launched", "missing",
          "duplicates", "skipped", "lag_p50_s", "lag_p90_s", "lag_p99_s", "lag_max_s",
          "in_store_at_fire_time", "started_p99_s", "eval_cpu_s_per_min", "eval_core_pct",
          "node_core_pct",
          "pg_cpu_s_per_min", "met"]),
    ]
    for name, title, columns in sections:
        data = _load(name)
        if not data:
            continue
        parts.append(f"### {title}\n\n`{data['command']}` — {data['finished_at']}\n\n"
                     + _table(data["rows"], columns))
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
