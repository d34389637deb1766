"""How many jobs a second one node takes in through ``POST /api/v1/jobs/batch``.

    python -m bench.bulk_intake                    # 40 batches of 1,000, 4 clients, both stores
    python -m bench.bulk_intake --stores postgres --batches 100 --clients 8
    python -m bench.bulk_intake --smoke            # 4 batches of 100: the harness works

One node (``jobserver serve``, its default two API workers; PostgreSQL store and
locks, or SQLite and file locks), clients POSTing batches of no-op jobs over keep-alive
connections as fast as the API answers. The jobs are due an hour later (``not_before``)
so that the node's scheduler, idle, leaves the machine to the intake; ``--run`` makes
them due at once, and the node runs them while they come in. Each client sends one
batch before the clock starts; those are not counted. Writes
``bench/results/bulk_intake[-smoke].json``; ``make bench`` runs the default as the
``bulk_intake`` scenario.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.cluster import Cluster
from bench.common import TOKEN, Options, cpu_seconds, log, tree_pids, write_result
from bench.stores import store_for

BATCH = 1000
LOCKS = {"postgres": "postgres", "sqlite": "file"}


def batch_body(size: int, run_now: bool) -> bytes:
    job: dict[str, Any] = {"name": "bulk", "steps": [{"name": "s", "type": "noop"}]}
    if not run_now:
        job["not_before"] = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    return json.dumps({"jobs": [job] * size}).encode()


def post_batches(port: int, body: bytes, batches: int, clients: int) -> float:
    """POST ``batches`` copies of ``body`` from ``clients`` keep-alive threads; the
    seconds it took (each client's first batch, sent before the clock, not counted)."""
    left, lock = [batches], threading.Lock()
    ready = threading.Barrier(clients + 1)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}

    def send(conn: http.client.HTTPConnection) -> None:
        conn.request("POST", "/api/v1/jobs/batch", body, headers)
        response = conn.getresponse()
        payload = response.read()
        if response.status != 201:
            raise RuntimeError(f"batch refused: {response.status} {payload[:300]!r}")

    def client_loop() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            send(conn)
            ready.wait()
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                send(conn)
        finally:
            conn.close()

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def measure(backend: str, opts: Options, batches: int, clients: int, size: int,
            run_now: bool) -> dict[str, Any]:
    with store_for(backend, opts.work_dir / f"store-{backend}") as url, Cluster(
            opts.work_dir / backend, url, LOCKS[backend], "single", SCHEDULER__NOTIFY="true",
            API__SUBMIT_RATE=1_000_000, API__SUBMIT_BURST=1_000_000) as cluster:
        node = cluster.start("n1")
        cluster.wait_registered(api=True)
        time.sleep(1.0)
        api = [pid for pid in tree_pids(node.pid) if pid != node.pid]
        cpu_before = {pid: cpu_seconds(pid) for pid in [node.pid, *api]}
        seconds = post_batches(cluster.port, batch_body(size, run_now), batches, clients)
        spent = {pid: cpu_seconds(pid) - before for pid, before in cpu_before.items()}
        stored = _jobs_in(url)
    jobs = batches * size
    expected = (batches + clients) * size
    if stored != expected:
        raise RuntimeError(f"{backend}: {stored} jobs stored, {expected} sent")
    rate = jobs / seconds
    log(f"bulk intake on {backend}: {batches} batches of {size} from {clients} clients "
        f"in {seconds:.2f} s: {rate:.0f} jobs/s")
    return {"store": backend, "batches": batches, "batch_size": size, "clients": clients,
            "jobs": jobs, "seconds": round(seconds, 3), "jobs_per_s": round(rate, 1),
            "run_during_intake": run_now,
            "api_cpu_ms_per_1k_jobs": round(sum(spent[pid] for pid in api) * 1e6 / jobs, 1),
            "node_cpu_ms_per_1k_jobs": round(spent[node.pid] * 1e6 / jobs, 1)}


def _jobs_in(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs")).scalar_one())
    finally:
        engine.dispose()


def run(opts: Options, stores: list[str] | None = None) -> list[dict[str, Any]]:
    """The ``bulk_intake`` scenario of ``python -m bench``: the defaults below."""
    batches, clients, size = (4, 2, 100) if opts.smoke else (40, 4, BATCH)
    rows = [measure(backend, opts, batches, clients, size, False)
            for backend in stores or list(LOCKS)]
    write_result("bulk_intake", opts, rows)
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bulk_intake",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="4 batches of 100, 2 clients")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--run", action="store_true", help="jobs due at once: the node runs "
                        "them during the intake")
    args = parser.parse_args(argv)
    opts = Options(smoke=args.smoke,
                   command="python -m bench.bulk_intake " + " ".join(argv))
    batches, clients = (4, 2) if args.smoke else (args.batches, args.clients)
    size = 100 if args.smoke else BATCH
    rows = [measure(backend, opts, batches, clients, size, args.run)
            for backend in args.stores.split(",")]
    write_result("bulk_intake", opts, rows)


if __name__ == "__main__":
    main(sys.argv[1:])
