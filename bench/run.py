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
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Options, log
from bench.summary import load, summary

SCENARIOS = ["floor", "throughput", "latency", "due", "bulk_intake", "footprint", "failover",
             "backlog", "peers", "shapes", "profile", "schedules", "datasets", "views",
             "retention", "ui"]
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
    parser.add_argument("--stores", help="datasets, views, due, bulk_intake: only these "
                        "stores, e.g. postgres")
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


def _peak(smoke: bool) -> dict[str, float]:
    """1-node single-mode jobs/s per store, for the latency runs at 80 % of peak."""
    data = load("throughput", smoke)
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
            elif name == "due":
                from bench import due
                due.run(opts, args.stores.split(",") if args.stores else None)
            elif name == "bulk_intake":
                from bench import bulk_intake
                bulk_intake.run(opts, args.stores.split(",") if args.stores else None)
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


def _pair(text: str) -> tuple[int, int]:
    views, days = text.lower().split("x")
    return int(views), int(days)


if __name__ == "__main__":
    sys.exit(main())
