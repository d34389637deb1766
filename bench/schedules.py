"""Scenario — schedules: N enabled cron schedules firing every minute on one node.

One real ``jobserver serve`` node (single mode) on a fresh store: PostgreSQL with
PostgreSQL locks, then SQLite with file locks. Early in a minute, N schedules (``* * *
* *``, a template of one no-op step) are created enabled while the node runs (see
:mod:`bench.schedules_store`); the node looks at each once (its next fire time) before
the next minute, and from that minute on M minute boundaries are measured, every one
of them firing all N schedules. The smoke run fires on a 10-second interval trigger
instead, its first fire time a few seconds after creation: the same path through the
node and this harness, without waiting up to a minute for a boundary.

* **Lag** of each fire time: when the launched job may start minus the fire time —
  its ``created_at`` (its row inserted by the evaluator's submit, the store's clock),
  or its ``not_before`` when it was launched ahead (``schedules.lead_time``) and so was
  in the store before; also the time the schedule-job was marked LAUNCHED (what
  ``details.lag_seconds`` records) and the time the engine claimed the job, each minus
  the fire time. As a check that does not trust those timestamps, the count of each
  fire time's launched jobs is read at the fire time itself (``in_store_at_fire_time``).
* **Completeness**: N × M fire times are expected; any not launched, launched twice,
  skipped or aborted is a finding and printed.
* **CPU**: utime + stime of the evaluator's thread (``schedules``), of the whole node
  process and of the PostgreSQL backends of the database, over a window from
  ``LEAD`` seconds before the first fire time to ``LEAD`` seconds before the minute
  after the last (M whole minutes, each with its fire time in the middle; longer if
  the last firing was still launching). Per minute, and as % of one core. The node's
  figure includes running the launched jobs.

A fire time is waited for until a second before the next one: an evaluator that cannot
launch N jobs a period falls behind, and what it had not launched by then is counted
as missing (with the states its schedule-jobs were in), not waited for.

Then, unless ``--no-profile``, one more fire time is recorded with py-spy
(:mod:`bench.schedules_profile`): where the evaluator's thread spends its CPU and
its wall time during a firing. That fire time is not in the figures (py-spy's own CPU
would skew them). Writes ``bench/results/schedules[-smoke].json``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import Cluster
from bench.common import (Options, backend_pids, cpu_seconds, loadavg, log, percentile,
                          write_result)
from bench.schedules_profile import evaluator_thread, print_profile, profile_firing
from bench.schedules_store import (create_after_boundary, create_on_interval,
                                   database_counters, evaluation_counts, launched_count,
                                   next_fire, outcomes, unsettled, wait_launched)
from bench.stores import store_for

#: (store, lock backend) of each node configuration measured.
CONFIGS = [("postgres", "postgres"), ("sqlite", "file")]
SCHEDULES = (10_000, 200)
MINUTES = (3, 1)
#: Seconds between the start of the CPU readings and the first fire time (and
#: between the end of the readings and the minute after the last, when the firings
#: end in time).
LEAD = (30.0, 2.0)
#: Seconds the node's first look at the new schedules gets before their first fire
#: time: when the next minute boundary is nearer, creation waits until it has passed.
SETTLE_GAP = (55.0, 8.0)
#: Seconds between fire times: every minute (cron), every 10 s in the smoke run (an
#: interval trigger).
PERIOD = (60.0, 10.0)
#: The longest py-spy records (seconds).
PROFILE_CAP = (300.0, 30.0)
#: The issue's targets.
TARGET_P99_S = 1.0
TARGET_CORE_PCT = 10.0


@dataclass
class Reading:
    """CPU seconds so far of the evaluator thread, the node and PostgreSQL's backends."""

    at: float
    evaluator: float | None
    node: float
    postgres: float
    counters: dict[str, int] = field(default_factory=dict)


def read_cpu(pid: int, tid: int | None, url: str) -> Reading:
    backends = (backend_pids(url.rsplit("/", 1)[1]) if url.startswith("postgresql")
                else [])
    return Reading(time.time(), None if tid is None else cpu_seconds(pid, tid),
                   cpu_seconds(pid), sum(cpu_seconds(p) for p in backends),
                   database_counters(url))


def _sleep_until(wall: float) -> None:
    while (left := wall - time.time()) > 0:
        time.sleep(min(left, 1.0))


def _settle(url: str, deadline: float) -> float | None:
    """Wait until the node has looked at every new schedule once and is idle; the
    seconds it took, or None if it was not by the wall time ``deadline``."""
    started = time.monotonic()
    while unsettled(url):
        if time.time() >= deadline:
            return None
        time.sleep(0.5)
    return time.monotonic() - started


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def lag_figures(found: list[dict[str, Any]], fire_times: list[float], count: int,
                ) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, int]]:
    """The row's completeness and lag figures, one line per fire time, and how many
    schedule-jobs of the fire times are in each state ("none" for fire times that
    have none: not evaluated yet)."""
    keys: dict[tuple[int, int], int] = {}
    states: dict[str, int] = {}
    for item in found:
        states[item["state"]] = states.get(item["state"], 0) + 1
        key = (item["schedule_id"], round(item["fire_time"]))
        keys[key] = keys.get(key, 0) + 1
    launched = [item for item in found if item["state"] == "LAUNCHED"
                and item["created"] is not None]
    for item in launched:  # a job launched ahead may start at its not_before
        item["runnable"] = max(item["created"], item["not_before"] or item["created"])
    lags = [item["runnable"] - item["fire_time"] for item in launched]
    marked = [item["marked"] - item["fire_time"] for item in launched]
    started = [item["started"] - item["fire_time"] for item in launched
               if item["started"] is not None]
    per_fire = []
    for fire in fire_times:
        mine = [item["runnable"] - fire for item in launched if round(item["fire_time"]) ==
                round(fire)]
        per_fire.append({"fire_time": time.strftime("%H:%M:%S", time.gmtime(fire)),
                         "launched": len(mine), "first_s": _round(min(mine, default=None)),
                         "p50_s": _round(percentile(mine, 50)),
                         "last_s": _round(max(mine, default=None))})
    distinct = len({(item["schedule_id"], round(item["fire_time"])) for item in launched})
    figures = {"expected": count * len(fire_times), "launched": distinct,
               "missing": count * len(fire_times) - distinct,
               "duplicates": sum(n - 1 for n in keys.values() if n > 1),
               "lag_p50_s": _round(percentile(lags, 50)),
               "lag_p90_s": _round(percentile(lags, 90)),
               "lag_p99_s": _round(percentile(lags, 99)),
               "lag_max_s": _round(max(lags, default=None)),
               "marked_p99_s": _round(percentile(marked, 99)),
               "started_p99_s": _round(percentile(started, 99))}
    states["none"] = count * len(fire_times) - len(keys)
    return figures, per_fire, states


def cpu_figures(before: Reading, after: Reading, launched: int) -> dict[str, Any]:
    window = after.at - before.at
    per_minute = lambda a, b: None if a is None or b is None else round(  # noqa: E731
        (b - a) * 60.0 / window, 2)
    evaluator = per_minute(before.evaluator, after.evaluator)
    node = per_minute(before.node, after.node)
    commits = after.counters.get("xact_commit", 0) - before.counters.get("xact_commit", 0)
    return {"eval_cpu_s_per_min": evaluator,
            "eval_core_pct": None if evaluator is None else round(evaluator / 60 * 100, 1),
            "node_cpu_s_per_min": node,
            "node_core_pct": None if node is None else round(node / 60 * 100, 1),
            "pg_cpu_s_per_min": per_minute(before.postgres, after.postgres)
            if after.counters else None,
            "commits": commits if after.counters else None,
            "commits_per_launch": round(commits / launched, 2) if after.counters and launched
            else None,
            "window_s": round(window, 1)}


def measure(opts: Options, url: str, pid: int, tid: int | None, count: int,
            fire_times: list[float]) -> tuple[Reading, Reading, list[int]]:
    """Read the CPU around ``fire_times``, waiting for each one's launches; also
    how many of each fire time's jobs were in the store at the fire time itself
    (launched ahead, or not at all yet)."""
    lead = LEAD[1] if opts.smoke else LEAD[0]
    period = PERIOD[1] if opts.smoke else PERIOD[0]
    log(f"schedules: measuring fire times from "
        f"{time.strftime('%H:%M:%S', time.gmtime(fire_times[0]))} UTC, {len(fire_times)} "
        f"every {period:.0f} s")
    _sleep_until(fire_times[0] - lead)
    before = read_cpu(pid, tid, url)
    at, ready = 0.0, []
    for fire in fire_times:
        _sleep_until(fire)
        ready.append(launched_count(url, fire))
        done, at = wait_launched(url, fire, count, fire + period - 1.0)
        log(f"schedules: {done:,} of {count:,} launched for "
            f"{time.strftime('%H:%M:%S', time.gmtime(fire))} within {at - fire:.1f} s")
    end = at + 1.0 if opts.smoke else max(at, fire_times[-1] + period - lead)
    _sleep_until(min(end, fire_times[-1] + period - 1.0))
    return before, read_cpu(pid, tid, url), ready


def _profile(opts: Options, url: str, pid: int, count: int, label: str,
             first: float) -> dict[str, Any]:
    """py-spy over the next fire time until it is launched (or ``PROFILE_CAP``: on an
    evaluator that falls behind, a stretch of its steady state)."""
    fire = next_fire(time.time() + 3, first, PERIOD[1] if opts.smoke else PERIOD[0])
    return profile_firing(pid, fire, label + ("-smoke" if opts.smoke else ""),
                          lambda: launched_count(url, fire) >= count,
                          PROFILE_CAP[1] if opts.smoke else PROFILE_CAP[0])


def run_config(opts: Options, store: str, lock: str, count: int,
               minutes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    work = opts.work_dir / f"schedules-{store}"
    lead = LEAD[1] if opts.smoke else LEAD[0]
    with store_for(store, work) as url:
        with Cluster(work, url, lock, "single") as cluster:
            node = cluster.start("n1")
            cluster.wait_registered()
            tid, found_by = evaluator_thread(node.pid)
            if opts.smoke:
                create_s, first = create_on_interval(url, count, SETTLE_GAP[1], PERIOD[1])
            else:
                create_s, first = create_after_boundary(url, count, SETTLE_GAP[0])
            settle_s = _settle(url, first - lead)
            log(f"schedules {store}: {count:,} created in {create_s:.1f} s, first looked at "
                f"in {settle_s if settle_s is None else round(settle_s, 1)} s; evaluator "
                f"thread {tid} ({found_by})")
            period = PERIOD[1] if opts.smoke else PERIOD[0]
            fire_times = [first + period * i for i in range(minutes)]
            before, after, ready = measure(opts, url, node.pid, tid, count, fire_times)
            load1 = loadavg()
            found, evaluations = outcomes(url, fire_times), evaluation_counts(url, fire_times)
            spy = _profile(opts, url, node.pid, count, f"{store}-{lock}", first) \
                if opts.profile else {}
        figures, per_fire, states = lag_figures(found, fire_times, count)
    row = {"store": store, "lock": lock, "schedules": count,
           "trigger": f"every {PERIOD[1]:.0f}s" if opts.smoke else "cron", "minutes": minutes,
           **figures,
           "skipped": evaluations.get("skipped", 0), "aborted": evaluations.get("aborted", 0),
           **cpu_figures(before, after, figures["launched"]), "create_s": round(create_s, 1),
           "settle_s": None if settle_s is None else round(settle_s, 1), "load1": load1,
           "in_store_at_fire_time": min(ready)}
    row["met"] = _met(row)
    detail = {"per_fire_time": per_fire, "schedule_job_states": states,
              "evaluations": evaluations, "evaluator_thread": found_by, "py_spy": spy}
    return row, detail


def _met(row: dict[str, Any]) -> str | None:
    if row["lag_p99_s"] is None or row["eval_core_pct"] is None:
        return None
    ok = (row["lag_p99_s"] <= TARGET_P99_S and row["eval_core_pct"] < TARGET_CORE_PCT
          and row["missing"] == 0 and row["duplicates"] == 0)
    return "yes" if ok else "NO"


def findings(row: dict[str, Any], detail: dict[str, Any]) -> list[str]:
    """What a reader must not miss: fire times lost, doubled, skipped or aborted."""
    found = []
    if row["settle_s"] is None:
        found.append(f"{row['store']}: the node's first look at the new schedules was not "
                     "done before the measurement began")
    if row["missing"]:
        found.append(f"{row['store']}: schedule-jobs of the measured fire times by state "
                     f"at the end: {detail['schedule_job_states']}")
    for key in ("missing", "duplicates", "skipped", "aborted"):
        if row[key]:
            found.append(f"{row['store']}: {row[key]:,} fire times {key}")
    if row["in_store_at_fire_time"] < row["schedules"]:
        found.append(f"{row['store']}: only {row['in_store_at_fire_time']:,} of a fire "
                     "time's jobs were in the store at the fire time")
    for line in detail["per_fire_time"]:
        if line["launched"] != row["schedules"]:
            found.append(f"{row['store']}: fire time {line['fire_time']}Z launched "
                         f"{line['launched']:,} of {row['schedules']:,}")
    return found


def run(opts: Options, count: int | None = None, minutes: int | None = None) -> list[dict]:
    count = count or opts.scale(*SCHEDULES)
    minutes = minutes or opts.scale(*MINUTES)
    configs = CONFIGS[:1] if opts.smoke else CONFIGS
    rows, details = [], {}
    for store, lock in configs:
        row, detail = run_config(opts, store, lock, count, minutes)
        rows.append(row)
        details[f"{store}/{lock}"] = detail
        log(f"schedules {store}: lag p50 {row['lag_p50_s']} s p99 {row['lag_p99_s']} s; "
            f"evaluator {row['eval_core_pct']} % of a core; {row['launched']:,} of "
            f"{row['expected']:,} launched")
    write_result("schedules", opts, rows, {"detail": details, "targets": {
        "lag_p99_s": TARGET_P99_S, "eval_core_pct": TARGET_CORE_PCT}})
    for key, detail in details.items():
        print(f"== schedules {key}: per fire time (lag of the time each job may start, "
              "s: its insert, or its not_before if launched ahead)")
        for line in detail["per_fire_time"]:
            print(f"  {line['fire_time']}Z launched {line['launched']:,} first "
                  f"{line['first_s']} p50 {line['p50_s']} last {line['last_s']}")
        if detail["py_spy"]:
            print_profile(detail["py_spy"])
    for row in rows:
        for line in findings(row, details[f"{row['store']}/{row['lock']}"]):
            print(f"FINDING: {line}")
    return rows
