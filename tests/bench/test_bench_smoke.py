"""The benchmark harness still works: its smoke mode runs and writes well-formed JSON.

A benchmark is not a test: nothing here asserts a timing. It runs ``python -m bench
--smoke`` for the scenarios that need only PostgreSQL and SQLite (no ZooKeeper, no
peers, no py-spy profiles) with results in a temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["floor", "throughput", "latency", "footprint", "backlog", "profile", "schedules",
             "datasets", "views", "ui"]
ROW_KEYS = {
    "floor": {"clients", "tps"},
    "throughput": {"store", "lock", "mode", "nodes", "jobs", "done", "jobs_per_s"},
    "latency": {"config", "load", "n", "p50_ms", "p95_ms", "p99_ms"},
    "footprint": {"store", "state", "node_rss_mb", "api_rss_mb"},
    "backlog": {"mix", "jobs_in_table", "claim_rate", "p50_ms"},
    "profile": {"store", "mode", "statements_per_job", "commits_per_job"},
    "schedules": {"store", "schedules", "expected", "launched", "missing", "duplicates",
                  "lag_p50_s", "lag_p99_s", "eval_core_pct", "node_core_pct"},
    "datasets": {"store", "partitions", "add_per_s", "consumed", "consume_per_s", "lag",
                 "fill_1k_p50_ms", "fill_full_p50_ms", "fill_ratio"},
    "views": {"partitions", "plan_total_s", "replan_total_s", "replan_all_skip"},
    "ui": {"page", "path", "n", "p50_ms", "p95_ms", "max_ms", "target_ms", "met", "errors"},
}

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.long]


@pytest.mark.timeout(420)
def test_smoke_mode_writes_every_scenario(tmp_path: Path, pg_url: str) -> None:
    # pg_url proves a PostgreSQL server answers (or skips loudly / fails in CI).
    results = tmp_path / "results"
    env = dict(os.environ, BENCH_RESULTS=str(results))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--no-zookeeper", "--no-profile",
         "--only", ",".join(SCENARIOS)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in SCENARIOS:
        path = results / f"{name}-smoke.json"
        assert path.exists(), f"{path.name} missing; output:\n{proc.stdout[-2000:]}"
        document = json.loads(path.read_text())
        assert document["scenario"] == name and document["smoke"] is True
        assert document["command"].startswith("python -m bench")
        assert document["machine"]["nproc"] >= 1
        assert document["rows"], f"{name}: no rows"
        for row in document["rows"]:
            missing = ROW_KEYS[name] - set(row)
            assert not missing, f"{name}: row without {missing}: {row}"
    throughput = json.loads((results / "throughput-smoke.json").read_text())["rows"]
    assert all(row["errors"] == 0 for row in throughput)
    profile = json.loads((results / "profile-smoke.json").read_text())
    assert all(c["statements"] for c in profile["statement_detail"])
    schedules = json.loads((results / "schedules-smoke.json").read_text())["rows"]
    assert all(row["launched"] and row["duplicates"] == 0 for row in schedules)
    datasets = json.loads((results / "datasets-smoke.json").read_text())["rows"]
    assert all(row["consumed"] == row["partitions"] and row["lag"] == 0
               and row["failed"] == 0 and row["job_errors"] == 0 for row in datasets)
    views = json.loads((results / "views-smoke.json").read_text())
    assert all(row["store_replan_all_skip"] and row["api_all_skip"] for row in views["store_rows"])
    assert all(row["materialized"] == row["partitions"] for row in views["run_rows"])
    ui = json.loads((results / "ui-smoke.json").read_text())["rows"]
    assert all(row["errors"] == 0 and row["n"] > 0 for row in ui), ui
    timed = {row["path"].split("?")[0].split("/")[2] for row in ui}
    assert timed >= {"cluster", "jobs", "schedules", "datasets", "views", "batches"}
    assert (results / "summary-smoke.json").exists()
