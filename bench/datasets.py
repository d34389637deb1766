"""Scenario — datasets: add 1,000,000 partitions, consume them, time a fill-and-claim.

One real ``jobserver serve`` node (single mode) on a fresh store: PostgreSQL with
PostgreSQL locks, then SQLite with file locks. A dataset keyed (date, hour, shop)
gets, through the node's API:

* **Adds**: 1,000 partitions in one batch; then the rest (999,000) in batches of
  10,000 from ``ADDERS`` concurrent keep-alive clients. Partitions per second of the
  rest, POST to reply, the client's JSON encoding included; and the CPU each partition
  cost the node (API workers included), PostgreSQL and the clients, which does not
  depend on what else the machine runs.
* **Fill-and-claim at 1k and at 1M**: the working-set transaction a job's start
  runs (:mod:`bench.datasets_store`, in-process against the same store) for a probe
  consumer whose working set is one claim (1,000): with 1,000 partitions in the
  dataset, and again with 1,000,000, first with the planner statistics the adds left
  (the table never ANALYZEd: this server runs with ``autovacuum = off``) and
  then after ``ANALYZE partitions``; each ``FILL_REPS`` times, p50. Every fill reads
  and claims the same 1,000 partitions; only the dataset's size differs. On
  PostgreSQL the fill's ordered read is EXPLAINed each time
  (``bench/results/profiles/explain-datasets-fill-<N>[-analyzed].txt``).
* **Consume**: a consumer (working set 4,000, processing limit 1,000) is drained by
  ``CONSUMERS`` client threads, each submitting a job of one no-op step with the input
  ``limit: 1000`` and waiting for it to end, then the next: 4 consumer jobs at once.
  A thread stops after a job that found nothing to consume once the consumer's lag
  is 0. Partitions per second from the first submit to the end of the last job that
  consumed any (``--no-consume`` leaves this out).
* **In-process add rate**: ``DIRECT`` more partitions into a second dataset through
  ``store.partitions.add`` (no HTTP), batches of 10,000, one client.

Writes ``bench/results/datasets[-smoke].json``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.cluster import Cluster
from bench.common import RESULTS_DIR, Options, cpu_now, loadavg, log, write_result
from bench.datasets_store import (LIMIT, PROBE, JsonClient, add_in_process, analyze,
                                  batch_body,
                                  consume_job, consumer_state, create_consumer, create_dataset,
                                  dataset_path, explain_read, probe_job, time_fill)
from bench.stores import poll_engine, store_for

CONFIGS = [("postgres", "postgres"), ("sqlite", "file")]
PARTITIONS = (1_000_000, 5_000)
SMALL = 1000
BATCH = 10_000
ADDERS = 4
CONSUMERS = 4
FILL_REPS = (15, 3)
DIRECT = (100_000, 2_000)
#: The issue's targets.
TARGET_ADD_PER_S = 20_000
TARGET_FILL_RATIO = 2.0
FINAL = ("SUCCEED", "ERROR", "STOPPED", "DISCARDED")


def add_all(port: int, first: int, total: int, batch: int, clients: int) -> float:
    """POST partitions ``first .. total - 1`` in batches from ``clients`` threads;
    the seconds it took."""
    starts = list(range(first, total, batch))
    lock = threading.Lock()
    errors: list[Exception] = []

    def adder() -> None:
        client = JsonClient(port)
        try:
            while True:
                with lock:
                    if not starts or errors:
                        return
                    at = starts.pop(0)
                body = batch_body(at, min(batch, total - at))
                client.call("POST", f"{dataset_path()}/partitions", body, expect=(201,))
        except Exception as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)
        finally:
            client.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=adder) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


class Drain:
    """Closed-loop consumer jobs: each thread submits one, waits for its end, repeats."""

    def __init__(self, port: int, url: str, consumer: str) -> None:
        self.port, self.url, self.consumer = port, url, consumer
        self.lock = threading.Lock()
        self.jobs = self.empty = self.errors = 0
        self.last_consuming_end = 0.0
        self.finished = False

    def run(self, threads: int, timeout: float) -> float:
        """Drain until the lag is 0; the seconds from the first submit to the end of
        the last job that consumed anything."""
        self.deadline = time.monotonic() + timeout
        started = time.monotonic()
        pool = [threading.Thread(target=self._loop) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return self.last_consuming_end - started

    def _loop(self) -> None:
        client = JsonClient(self.port)
        try:
            while not self.finished and time.monotonic() < self.deadline:
                job = client.call("POST", "/api/v1/jobs", consume_job(self.consumer),
                                  expect=(201,))["id"]
                state, ran = self._wait(int(job))
                with self.lock:
                    self.jobs += 1
                    self.errors += state != "SUCCEED"
                    if ran:
                        self.last_consuming_end = time.monotonic()
                    else:
                        self.empty += 1
                if not ran and consumer_state(client, self.consumer)["lag"] == 0:
                    self.finished = True
        finally:
            client.close()

    def _wait(self, job_id: int) -> tuple[str, bool]:
        """The job's final state and whether its step ran (it had partitions)."""
        from sqlalchemy import text

        engine = poll_engine(self.url)
        while time.monotonic() < self.deadline:
            with engine.connect() as conn:
                state = conn.execute(text("SELECT state FROM jobs WHERE id = :i"),
                                     {"i": job_id}).scalar()
                if state in FINAL:
                    ran = conn.execute(text("SELECT count(*) FROM steps WHERE job_id = :i "
                                            "AND state = 'SUCCEED'"), {"i": job_id}).scalar()
                    return str(state), bool(ran)
            time.sleep(0.01)
        return "TIMEOUT", False


def cpu_per(before: tuple[float, float, float], after: tuple[float, float, float],
            count: int) -> dict[str, float]:
    """Microseconds of CPU per partition: node, PostgreSQL, clients. With 2 cores, a
    machine doing nothing else tops out near 2 s / (node + PostgreSQL + clients)."""
    names = ("node_us", "pg_us", "client_us")
    return {name: round((b - a) * 1e6 / count, 1) for name, a, b in zip(names, before, after)}


def _explain(opts: Options, url: str, size: int, suffix: str = "") -> str | None:
    if not url.startswith("postgresql"):
        return None
    out = RESULTS_DIR / "profiles" / (f"explain-datasets-fill-{size}{suffix}"
                                      f"{'-smoke' if opts.smoke else ''}.txt")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(explain_read(url, f"{size:,} partitions in the dataset"
                                     f"{', after ANALYZE' if suffix else ''}"))
    return str(out.relative_to(RESULTS_DIR.parent.parent)) if out.is_relative_to(
        RESULTS_DIR.parent.parent) else str(out)


def run_config(opts: Options, store: str, lock: str, total: int,
               consume: bool = True) -> dict[str, Any]:
    work = opts.work_dir / f"datasets-{store}"
    row: dict[str, Any] = {"store": store, "lock": lock, "partitions": total}
    with store_for(store, work) as url:
        with Cluster(work, url, lock, "single") as cluster:
            node = cluster.start("n1")
            cluster.wait_registered(api=True)
            client = JsonClient(cluster.port)
            try:
                row["load1_before"] = loadavg()
                detail = _add_and_fill(opts, row, url, cluster.port, node.pid)
                if consume:
                    _consume(row, url, client, cluster.port, node.pid)
                row["load1_after"] = loadavg()
                create_dataset(client, "direct")
                row["add_in_process_per_s"] = round(add_in_process(
                    url, "direct", 0, opts.scale(*DIRECT), BATCH))
            finally:
                client.close()
    row["met"] = _met(row)
    row["detail"] = detail
    return row


def _add_and_fill(opts: Options, row: dict[str, Any], url: str, port: int,
                  pid: int) -> dict[str, Any]:
    """1,000 partitions, the fill-and-claim timed; the rest, timed; the fill again."""
    total, reps = row["partitions"], opts.scale(*FILL_REPS)
    client = JsonClient(port)
    create_dataset(client)
    create_consumer(client, PROBE, LIMIT, LIMIT)
    client.close()
    probe = probe_job(url)
    add_all(port, 0, SMALL, BATCH, 1)
    small = time_fill(url, probe, reps)
    explain_small = _explain(opts, url, SMALL)
    cpu0 = cpu_now(pid, url)
    add_s = add_all(port, SMALL, total, BATCH, ADDERS)
    add_cpu = cpu_per(cpu0, cpu_now(pid, url), total - SMALL)
    log(f"datasets {row['store']}: {total - SMALL:,} partitions added in {add_s:.1f} s")
    big = time_fill(url, probe, reps)
    explain_big = _explain(opts, url, total)
    analyze(url)
    analyzed = time_fill(url, probe, reps)
    row.update({"add_per_s": round((total - SMALL) / add_s), "add_s": round(add_s, 1),
                "fill_1k_p50_ms": small["p50_ms"], "fill_full_p50_ms": big["p50_ms"],
                "fill_ratio": _ratio(big, small),
                "fill_full_analyzed_p50_ms": analyzed["p50_ms"],
                "fill_ratio_analyzed": _ratio(analyzed, small),
                **{f"add_cpu_{k}": v for k, v in add_cpu.items()}})
    return {"fill_small": small, "fill_big": big, "fill_big_analyzed": analyzed,
            "explain": [explain_small, explain_big,
                        _explain(opts, url, total, "-analyzed")]}


def _ratio(big: dict[str, Any], small: dict[str, Any]) -> float | None:
    return round(big["p50_ms"] / small["p50_ms"], 2) if small["p50_ms"] else None


def _consume(row: dict[str, Any], url: str, client: JsonClient, port: int,
             pid: int) -> None:
    """Drain the dataset with ``CONSUMERS`` consumer jobs at once."""
    total = row["partitions"]
    create_consumer(client, "bench", CONSUMERS * LIMIT, LIMIT)
    drain = Drain(port, url, "bench")
    cpu0 = cpu_now(pid, url)
    consume_s = drain.run(CONSUMERS, timeout=3600.0)
    consume_cpu = cpu_per(cpu0, cpu_now(pid, url), total)
    state = consumer_state(client, "bench")
    done = state["processed_total"]
    log(f"datasets {row['store']}: {done:,} consumed in {consume_s:.1f} s by "
        f"{drain.jobs:,} jobs")
    row.update({"consumed": done, "consume_s": round(consume_s, 1),
                "consume_per_s": round(done / consume_s) if consume_s > 0 else None,
                "jobs": drain.jobs, "empty_jobs": drain.empty, "job_errors": drain.errors,
                "lag": state["lag"], "failed": state["failed_total"],
                **{f"consume_cpu_{k}": v for k, v in consume_cpu.items()}})


def _met(row: dict[str, Any]) -> str:
    drained = "consumed" not in row or (row["lag"] == 0
                                        and row["consumed"] == row["partitions"])
    ok = (row["fill_ratio"] is not None and row["fill_ratio"] <= TARGET_FILL_RATIO and drained
          and (row["store"] != "postgres" or row["add_per_s"] >= TARGET_ADD_PER_S))
    return "yes" if ok else "NO"


def run(opts: Options, total: int | None = None, stores: list[str] | None = None,
        consume: bool = True) -> list[dict[str, Any]]:
    total = total or opts.scale(*PARTITIONS)
    configs = CONFIGS[:1] if opts.smoke else CONFIGS
    configs = [c for c in configs if stores is None or c[0] in stores]
    rows = []
    for store, lock in configs:
        row = run_config(opts, store, lock, total, consume)
        rows.append(row)
        log(f"datasets {store}: add {row['add_per_s']:,}/s, consume "
            f"{row.get('consume_per_s')}/s, fill p50 {row['fill_1k_p50_ms']} ms at 1k, "
            f"{row['fill_full_p50_ms']} ms at {total:,} "
            f"({row['fill_full_analyzed_p50_ms']} ms after ANALYZE)")
    write_result("datasets", opts, rows, {"targets": {
        "add_per_s": TARGET_ADD_PER_S, "fill_ratio": TARGET_FILL_RATIO},
        "settings": {"batch": BATCH, "adders": ADDERS, "consumer_jobs": CONSUMERS,
                     "limit": LIMIT, "working_set": CONSUMERS * LIMIT}})
    for row in rows:
        if "consumed" not in row:
            continue
        if row["consumed"] != row["partitions"] or row["failed"] or row["job_errors"]:
            print(f"FINDING: {row['store']}: consumed {row['consumed']:,} of "
                  f"{row['partitions']:,}, {row['failed']} FAILED, {row['job_errors']} jobs "
                  "not SUCCEED")
    return rows
