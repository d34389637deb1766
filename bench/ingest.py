"""How many jobs a second one node's HTTP API takes in.

    python -m bench.ingest               # 4,000 POSTs from 16 keep-alive clients
    python -m bench.ingest 8000 32

Scenario 2's run at 80 % of the peak showed the API, not the scheduler, limiting the
submit rate. This tool measures that limit alone: one node (PostgreSQL store and locks,
NOTIFY on, the default two API workers, the scheduler running the jobs as they come),
clients POSTing one no-op job each as fast as the API answers. Writes
``bench/results/ingest.json``. Not part of ``make bench``.
"""

from __future__ import annotations

import sys
import time

from bench.cluster import Cluster, post_all
from bench.common import Options, cpu_seconds, log, tree_pids, write_result
from bench.stores import store_for

POSTS = 4_000
CLIENTS = 16


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else POSTS
    clients = int(argv[1]) if len(argv) > 1 else CLIENTS
    opts = Options(command="python -m bench.ingest " + " ".join(argv))
    with store_for("postgres", opts.work_dir / "store") as url, Cluster(
            opts.work_dir, url, "postgres", "single", SCHEDULER__NOTIFY="true",
            API__SUBMIT_RATE=1_000_000, API__SUBMIT_BURST=1_000_000) as cluster:
        node = cluster.start("n1")
        cluster.wait_registered(api=True)
        time.sleep(1.0)
        api = [pid for pid in tree_pids(node.pid) if pid != node.pid]
        cpu_before = {pid: cpu_seconds(pid) for pid in [node.pid, *api]}
        seconds = post_all(cluster.port, count, clients)
        spent = {pid: cpu_seconds(pid) - before for pid, before in cpu_before.items()}
    rate = count / seconds
    log(f"ingest: {count} POSTs from {clients} clients in {seconds:.2f} s: {rate:.0f}/s")
    write_result("ingest", opts, [{
        "posts": count, "clients": clients, "seconds": round(seconds, 3),
        "posts_per_s": round(rate, 1),
        "api_cpu_ms_per_post": round(sum(spent[pid] for pid in api) * 1000 / count, 3),
        "node_cpu_ms_per_job": round(spent[node.pid] * 1000 / count, 3)}])


if __name__ == "__main__":
    main(sys.argv[1:])
