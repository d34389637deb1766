"""Where an idle job's submit-to-start time goes, leg by leg.

    python -m bench.handoffs            # 300 jobs, one at a time, PostgreSQL + NOTIFY

Scenario 2 splits its latency in three legs from the store's timestamps. This tool
splits it in ten. It starts one node (single mode, PostgreSQL store and locks,
NOTIFY on) with the trace points of ``bench/tracing/sitecustomize.py``, POSTs jobs one
at a time with 20–60 ms gaps (as scenario 2's idle run does), and joins per job:

* the client's clock before the POST and the step body's stamp (as scenario 2);
* in the API: the gunicorn event loop seeing the request, a gunicorn thread taking
  it, Flask's entry, the submit statement sent and returned;
* from the store: ``created_at`` and ``started_at`` (``clock_timestamp()`` in the
  submit and claim statements);
* in the node: the LISTEN thread woken, the claiming round's start, the claim's return.

It also measures the machine's cost of waking an idle thread and of a round trip to an
idle process, since most legs are such hand-offs. Writes ``bench/results/handoffs.json``.
Not part of ``make bench``: the trace points cost a little time of their own.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.common import ROOT, Options, log, write_result
from bench.latency import submit_idle
from bench.stores import created_and_claimed, stamps, store_for, wait_all_done

TRACING = ROOT / "bench" / "tracing"
JOBS = 300

#: (leg, from, to, what happens in between): the job's path, in order.
LEGS = [
    ("client to event loop", "sent", "readable", "HTTP request over loopback; gunicorn's loop wakes"),
    ("event loop to thread", "readable", "handled", "the loop hands the connection to a thread"),
    ("thread to Flask", "handled", "flask", "gunicorn reads and parses the request"),
    ("Flask to statement", "flask", "statement", "auth, validation, pool checkout"),
    ("statement to row", "statement", "created", "the driver sends; PostgreSQL plans"),
    ("row to LISTEN woken", "created", "notified", "insert, commit (WAL flush), NOTIFY, listener thread"),
    ("LISTEN to round", "notified", "dispatch", "the scheduler thread wakes"),
    ("round to claimed row", "dispatch", "started", "claim sent, planned, candidates locked"),
    ("claimed row to returned", "started", "claimed", "claim's writes, commit (WAL flush), reply"),
    ("returned to step body", "claimed", "stamp", "a runner thread takes the job"),
]


def read_points(directory: Path) -> list[dict[str, Any]]:
    points = []
    for path in directory.glob("*.jsonl"):
        points += [json.loads(line) for line in path.read_text().splitlines() if line]
    return points


def _last_before(times: list[float], moment: float) -> float | None:
    index = bisect.bisect_right(times, moment)
    return times[index - 1] if index else None


def _first_after(times: list[float], moment: float) -> float | None:
    index = bisect.bisect_left(times, moment)
    return times[index] if index < len(times) else None


def join(sent: list[tuple[int, float]], points: list[dict[str, Any]],
         rows: dict[int, tuple[float, float]], started: dict[int, float]) -> dict[int, dict]:
    """Each job's moments by name. Jobs go one at a time, so an API point without a
    job id belongs to the job whose statement follows it."""
    series = {name: sorted(p["t"] for p in points if p["point"] == name)
              for name in ("readable", "handled", "flask", "notified")}
    submitted = {p["job_id"]: p for p in points if p["point"] == "submitted"}
    claimed = {job_id: p for p in points if p["point"] == "claimed" for job_id in p["job_ids"]}
    moments: dict[int, dict] = {}
    for job_id, at in sent:
        if job_id not in submitted or job_id not in claimed or job_id not in started:
            continue
        statement = submitted[job_id]["statement"]
        moment = {"sent": at, "statement": statement, "submitted": submitted[job_id]["t"],
                  "created": rows[job_id][0], "started": rows[job_id][1],
                  "dispatch": claimed[job_id]["dispatch"], "claimed": claimed[job_id]["t"],
                  "stamp": started[job_id],
                  "notified": _first_after(series["notified"], rows[job_id][0])}
        for name in ("readable", "handled", "flask"):
            moment[name] = _last_before(series[name], statement)
        moments[job_id] = moment
    return moments


def leg_rows(moments: dict[int, dict]) -> list[dict[str, Any]]:
    rows = []
    for leg, start, end, what in LEGS:
        values = [(m[end] - m[start]) * 1000 for m in moments.values()
                  if m.get(start) is not None and m.get(end) is not None]
        rows.append({"leg": leg, "n": len(values),
                     "p50_ms": round(statistics.median(values), 3) if values else None,
                     "mean_ms": round(statistics.fmean(values), 3) if values else None,
                     "what": what})
    reply = [(m["submitted"] - m["created"]) * 1000 for m in moments.values()]
    rows.append({"leg": "(off the path) row to API's result", "n": len(reply),
                 "p50_ms": round(statistics.median(reply), 3),
                 "mean_ms": round(statistics.fmean(reply), 3),
                 "what": "the submit's commit and reply, as the API sees them"})
    totals = [(m["stamp"] - m["sent"]) * 1000 for m in moments.values()]
    rows.append({"leg": "total (sent to step body)", "n": len(totals),
                 "p50_ms": round(statistics.median(totals), 3),
                 "mean_ms": round(statistics.fmean(totals), 3), "what": ""})
    return rows


def wake_costs(rounds: int = 200) -> dict[str, float]:
    """p50 ms to wake an idle thread (an Event) and for a round trip to an idle process,
    each after 20-60 ms of idleness, as between the jobs here."""
    request, reply, woken = threading.Event(), threading.Event(), []

    def responder() -> None:
        for _ in range(rounds):
            request.wait()
            request.clear()
            woken.append(time.perf_counter())
            reply.set()

    threading.Thread(target=responder, daemon=True).start()
    thread_ms = []
    for _ in range(rounds):
        time.sleep(random.uniform(0.02, 0.06))
        began = time.perf_counter()
        request.set()
        reply.wait()
        reply.clear()
        thread_ms.append((woken[-1] - began) * 1000)
    return {"idle_thread_wake_p50_ms": round(statistics.median(thread_ms), 3),
            "idle_process_round_trip_p50_ms": round(_process_round_trip(rounds), 3)}


def _process_round_trip(rounds: int) -> float:
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:  # echo until the parent closes its end
        ours.close()
        while data := theirs.recv(64):
            theirs.send(data)
        os._exit(0)
    theirs.close()
    times = []
    for _ in range(rounds):
        time.sleep(random.uniform(0.02, 0.06))
        began = time.perf_counter()
        ours.send(b"x")
        ours.recv(64)
        times.append((time.perf_counter() - began) * 1000)
    ours.close()
    os.waitpid(child, 0)
    return statistics.median(times)


def measure(opts: Options, count: int) -> tuple[dict[int, dict], dict[str, Any]]:
    traces = opts.work_dir / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TRACING), os.environ.get("PYTHONPATH")) if p)
    with store_for("postgres", opts.work_dir / "store") as url, Cluster(
            opts.work_dir, url, "postgres", "single", SCHEDULER__NOTIFY="true",
            API__WORKERS=1, API__SUBMIT_RATE=1_000_000, API__SUBMIT_BURST=1_000_000) as cluster:
        cluster.start("n1", BENCH_TRACE_DIR=str(traces))
        cluster.wait_registered(api=True)
        time.sleep(1.0)  # the scheduler is active and LISTENing
        submit_idle(cluster.port, 5)  # warm the connections
        sent = submit_idle(cluster.port, count)
        wait_all_done(url, len(sent), 60, min_id=min(job_id for job_id, _ in sent))
        job_ids = [job_id for job_id, _ in sent]
        started = stamps(url, job_ids)
        rows = created_and_claimed(url, job_ids)
    points = read_points(traces)
    errors = [p["error"] for p in points if p["point"] == "trace-error"]
    if errors:
        raise RuntimeError(f"trace points missing in the node: {errors}")
    return join(sent, points, rows, started), {"jobs": count}


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else JOBS
    opts = Options(command="python -m bench.handoffs " + " ".join(argv))
    log(f"handoffs: {count} jobs one at a time (PostgreSQL, NOTIFY, 1 API worker)")
    moments, extra = measure(opts, count)
    extra["machine_wakes"] = wake_costs()
    log(f"handoffs: {len(moments)} jobs joined; machine: {extra['machine_wakes']}")
    write_result("handoffs", opts, leg_rows(moments), extra)


if __name__ == "__main__":
    main(sys.argv[1:])
