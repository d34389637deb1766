"""Scenario 1 — throughput: N no-op jobs queued up front, then 1 and 3 nodes started.

jobs/s = done / (last finished_at - first started_at), both on the store's clock, so
node start-up (imports, gunicorn) is not counted; the wall time from spawning the
nodes to the last SUCCEED is recorded beside it. A configuration that has not finished
within its time cap is reported from what it finished (``capped``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.common import (RESULTS_DIR, ROOT, Options, backend_pids, cpu_seconds, loadavg,
                          log, write_result)
from bench.stores import queue_jobs, run_window, store_for, wait_all_done

PROFILE_DIR = RESULTS_DIR / "profiles"

#: (store, lock backend) pairs of the issue.
BACKENDS = [("sqlite", "file"), ("postgres", "postgres"), ("postgres", "zookeeper")]
MODES = ["single", "distributed", "leader"]


#: The second pass: a runner wide enough that claims and completions form batches
#: (no-op jobs need no CPU of their own; the default 10 slots cap every batch at 10).
WIDE = {"SCHEDULER__MAX_CONCURRENT_JOBS": "100", "SCHEDULER__CLAIM_BATCH": "100"}
WIDE_CONFIGS = ["sqlite/file/single/1", "postgres/postgres/single/1",
                "postgres/postgres/distributed/1", "postgres/postgres/distributed/3"]


def run_one(opts: Options, store: str, lock: str, mode: str, nodes: int, jobs: int,
            cap: float, zk_hosts: str | None = None, tag: str = "",
            extra: dict[str, str] | None = None) -> dict[str, Any]:
    work = opts.work_dir / f"tp-{store}-{lock}-{mode}-{nodes}{tag}"
    with store_for(store, work) as url:
        queue_jobs(url, jobs)
        settings: dict[str, Any] = dict(opts.node_settings, **(extra or {}))
        if zk_hosts:
            settings["ZOOKEEPER__HOSTS"] = zk_hosts
            settings["ZOOKEEPER__ROOT"] = f"/bench-{work.name}"
        spawned = time.monotonic()
        with Cluster(work, url, lock, mode, **settings) as cluster:
            for i in range(nodes):
                cluster.start(f"n{i + 1}")
            # CPU spent while draining, from registration on (imports excluded): the
            # node processes (not their API children) and this database's backends.
            cluster.wait_registered()
            dbname = url.rsplit("/", 1)[1] if store == "postgres" else None
            done0, _ = wait_all_done(url, jobs, 0)
            node_cpu = -sum(cpu_seconds(n.pid) for n in cluster.nodes.values())
            db_cpu = -sum(cpu_seconds(p) for p in backend_pids(dbname)) if dbname else 0.0
            done, stall = _wait_watching(url, jobs, cap, cluster, work.name)
            node_cpu += sum(cpu_seconds(n.pid) for n in cluster.nodes.values())
            db_cpu += sum(cpu_seconds(p) for p in backend_pids(dbname)) if dbname else 0.0
            measured = max(done - done0, 1)
            wall = time.monotonic() - spawned
            window = run_window(url)
        row = {"store": store, "lock": lock, "mode": mode, "nodes": nodes,
               "settings": " ".join(f"{k}={v}" for k, v in
                                    dict(opts.node_settings, **(extra or {})).items()) or None,
               "jobs": jobs,
               "done": window["done"], "errors": window["errors"],
               "seconds": window["seconds"], "jobs_per_s": window["jobs_per_s"],
               "wall_s": round(wall, 1), "capped": done < jobs, "load1": loadavg(),
               "node_cpu_ms_per_job": round(node_cpu * 1000 / measured, 2),
               "db_cpu_ms_per_job": round(db_cpu * 1000 / measured, 2) if dbname else None,
               "stall_dump": stall}
    log(f"throughput {store}/{lock}/{mode} x{nodes}: {row['jobs_per_s']} jobs/s "
        f"({row['done']}/{jobs} in {row['seconds']} s)")
    return row


STALL_AFTER = 8.0


def _wait_watching(url: str, jobs: int, cap: float, cluster: Cluster,
                   label: str) -> tuple[int, str | None]:
    """Wait for all jobs (or the cap); if no job finishes for STALL_AFTER seconds
    after the first did, dump every node's threads with py-spy once (evidence for a
    stall, kept under bench/results/profiles/)."""
    began = time.monotonic()
    last_done, last_change, dumped = -1, time.monotonic(), None
    while True:
        done, _ = wait_all_done(url, jobs, 0)
        now = time.monotonic()
        if done >= jobs or now - began > cap:
            return done, dumped
        if done != last_done:
            last_done, last_change = done, now
        elif dumped is None and now - last_change > STALL_AFTER and now - began > 15:
            dumped = _dump(cluster, label, done)
        time.sleep(0.25)


def _dump(cluster: Cluster, label: str, done: int) -> str:
    PROFILE_DIR.mkdir(parents=True, exist_ok=True)
    path = PROFILE_DIR / f"stall-{label}-{time.strftime('%H%M%S')}.txt"
    with open(path, "w") as out:
        out.write(f"no job finished for {STALL_AFTER} s at {done} done\n")
        for node in cluster.nodes.values():
            out.write(f"\n===== {node.name} pid {node.pid}\n")
            out.flush()
            subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--locals",
                            "-p", str(node.pid)], stdout=out, stderr=subprocess.STDOUT)
            out.write(node.tail(60))
    log(f"STALL: no progress for {STALL_AFTER} s; thread dump in {path}")
    return str(path.relative_to(ROOT))


def run(opts: Options, zk_hosts: str | None, only: set[str] | None = None) -> list[dict]:
    jobs = opts.scale(20000, 200)
    cap = opts.scale(30, 15)  # per configuration; the rate is over what finished
    rows = []
    smoke_set = {"sqlite/file/single/1", "postgres/postgres/distributed/3",
                 "postgres/zookeeper/leader/1"}
    for store, lock in BACKENDS:
        if lock == "zookeeper" and not zk_hosts:
            continue
        for mode in MODES:
            for nodes in (1, 3):
                key = f"{store}/{lock}/{mode}/{nodes}"
                if (only and key not in only) or (opts.smoke and key not in smoke_set):
                    continue
                rows.append(run_one(opts, store, lock, mode, nodes, jobs, cap, zk_hosts))
    if not only and not opts.node_settings:
        for key in WIDE_CONFIGS[1:2] if opts.smoke else WIDE_CONFIGS:
            store, lock, mode, nodes = key.split("/")
            rows.append(run_one(opts, store, lock, mode, int(nodes), jobs, cap, zk_hosts,
                                tag="-wide", extra=WIDE))
    name = "throughput" + ("-" + "-".join(f"{k}={v}" for k, v in opts.node_settings.items())
                           .lower().replace("scheduler__", "") if opts.node_settings else "")
    write_result(name, opts, rows, {"jobs": jobs, "cap_s": cap,
                                            "settings": "defaults: max_concurrent_jobs=10, "
                                                        "claim_batch=32, poll_interval=1.0"})
    return rows
