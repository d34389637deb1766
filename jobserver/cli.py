"""The ``jobserver`` command line.

Server commands (``serve``, ``cluster``, ``db upgrade``, and the admin commands
``token`` and ``purge``) read the config; client
commands talk to the API with ``--url``/``JOBSERVER_URL`` and
``--token``/``JOBSERVER_TOKEN`` (falling back to the config and the token file that
``jobserver cluster`` writes). Exit codes: 0 success, 1 the API refused, 2 bad usage
or configuration, 3 a node stopped without draining, 4 a node gave up because one of
its background loops died (``jobserver.serve``); ``batch run`` has its own
(``jobserver.cli_batches``: 3 is a FAILED stage there), and so has ``fence-check``
(``jobserver.cli_fence``: 1 is a stale claim, 2 no answer).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobserver import (cli_batches, cli_datasets, cli_fence, cli_materialize, cli_purge,
                       cli_schedules, cli_submit, cli_tokens)
from jobserver.config import CONFIG_ENV, Config, load_config
from jobserver.exceptions import ConfigError, JobServerError
from jobserver.logs import FORMATS, default_format, setup_logging

if TYPE_CHECKING:
    from jobserver.client import Client

EXIT_API, EXIT_USAGE = 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobserver", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="TOML config file (default: $JOBSERVER_CONFIG)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=FORMATS, default=default_format(),
                        help="plain (default) or json: one JSON object per line "
                             "(default: $JOBSERVER_LOG_FORMAT)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run one node: scheduler, runner and the HTTP API")
    cluster = sub.add_parser("cluster", help="show the cluster's nodes; with --nodes N, run "
                                             "N nodes on this host (embedded default)")
    cluster.add_argument("--nodes", type=int, help="start N local nodes (make run: 3)")
    cluster.add_argument("--demo", action="store_true",
                         help="with --nodes: submit the demo jobs, schedule and batches")
    db = sub.add_parser("db", help="database schema")
    db.add_argument("action", choices=["upgrade"])
    cli_tokens.add_parser(sub)
    cli_purge.add_parser(sub)
    for name, text in (("submit", "submit a job spec, a JSON array of them or JSON lines "
                                  "(file, or - for stdin); prints the job, or each id"),):
        command = sub.add_parser(name, help=text)
        command.add_argument("file")
        command.add_argument("--idempotency-key")
    jobs = sub.add_parser("jobs", help="list jobs, newest first")
    jobs.add_argument("--state")
    jobs.add_argument("--name")
    jobs.add_argument("--limit", type=int, default=20)
    for command in (cluster, jobs):  # the live views (jobserver.cli_views)
        command.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
        command.add_argument("--interval", type=float, default=2.0, help="seconds (--watch)")
        command.add_argument("--count", type=int, help="stop after this many refreshes")
    job = sub.add_parser("job", help="show one job with its steps")
    job.add_argument("id", type=int)
    for action in ("pause", "resume", "rerun", "discard"):
        command = sub.add_parser(action, help=f"{action} a job")
        command.add_argument("id", type=int)
    apply = sub.add_parser("apply", help="create, update or delete the resources of a YAML "
                                         "file (schedules, datasets, views, batch configs); "
                                         "--dry-run shows what "
                                         "would change")
    apply.add_argument("file", help="YAML documents with a kind each, or - for stdin")
    apply.add_argument("--dry-run", action="store_true", help="change nothing")
    for command in sub.choices.values():
        if command.prog.split()[-1] in {"submit", "jobs", "job", "pause", "resume", "rerun",
                                        "discard", "cluster", "apply"}:
            _client_options(command)
    cli_schedules.add_parser(sub, _client_options)
    cli_datasets.add_parser(sub, _client_options)
    cli_materialize.add_parser(sub, _client_options)
    cli_batches.add_parser(sub, _client_options)
    cli_fence.add_parser(sub, _client_options)
    return parser


def _client_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--url", default=os.environ.get("JOBSERVER_URL"))
    command.add_argument("--token", default=os.environ.get("JOBSERVER_TOKEN"))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"jobserver: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except JobServerError as exc:
        print(f"jobserver: {exc.message}", file=sys.stderr)
        if exc.details:
            print(json.dumps(exc.details, indent=2), file=sys.stderr)
        return EXIT_API
    except KeyboardInterrupt:
        return 130


class _Stop(Exception):
    """SIGTERM or SIGHUP to the cluster launcher: stop the nodes and exit 0."""


def _stop_cluster(_signum: int, _frame: object) -> None:
    raise _Stop


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "serve":
        from jobserver.serve import serve

        if args.config:  # the API processes load the config again: the same file
            os.environ[CONFIG_ENV] = str(Path(args.config).resolve())
        return serve(load_config(args.config))
    if args.command == "cluster" and args.nodes is None:  # the status view
        if args.demo:
            raise ConfigError("--demo starts a local cluster: use it with --nodes N")
        from jobserver.cli_views import cluster_command

        return cluster_command(_client(args), args.watch or bool(args.count), args.interval,
                               args.count)
    if args.command == "cluster":
        return _cluster(load_config(args.config), args.nodes, args.demo)
    if args.command == "token":
        return cli_tokens.run(args, load_config(args.config))
    if args.command == "fence-check":  # exit codes of its own: 1 is "stale"
        return cli_fence.run(args, lambda: _client(args))
    if args.command == "purge":
        return cli_purge.run(args, load_config(args.config))
    if args.command == "db":
        from jobserver.store import Store

        Store(load_config(args.config).database_url).upgrade()
        print("database schema is up to date")
        return 0
    return _client_command(args)


def _cluster(config: Config, nodes: int, demo: bool) -> int:
    from jobserver.cluster import LocalCluster

    if not 1 <= nodes <= 16:
        raise ConfigError("--nodes must be between 1 and 16")
    host, port = config.api.bind.rsplit(":", 1)
    if _port_in_use(host, int(port)):
        raise ConfigError(f"api.bind: {config.api.bind} is already in use")
    cluster = LocalCluster(config, nodes)
    signal.signal(signal.SIGTERM, _stop_cluster)
    # A closed terminal: the nodes run in process groups of their own and do not get
    # the hang-up, so the launcher must stop them.
    signal.signal(signal.SIGHUP, _stop_cluster)
    try:
        if demo:
            cluster.prepare_demo()
        cluster.start()
        ids = cluster.submit_demo_jobs() if demo else []
        batch_lines = cluster.start_demo_batches() if demo else []
        print(cluster.banner(ids, batch_lines), flush=True)
        cluster.supervise()
    except _Stop:
        pass
    finally:
        cluster.stop()
    return 0


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def _client(args: argparse.Namespace) -> Client:
    from jobserver.client import Client

    config = _client_config(args.config)
    url = args.url or f"http://{config.api.bind if config else '127.0.0.1:8080'}"
    token = args.token or (config.api.tokens[0] if config and config.api.tokens else None)
    if token is None:
        data_dir = config.data_dir if config else Path(".jobserver")
        token_file = data_dir / "api-token"
        token = token_file.read_text().strip() if token_file.exists() else None
    return Client(url, token)


def _client_config(path: str | None) -> Config | None:
    try:
        return load_config(path)
    except ConfigError:
        return None


def _client_command(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.command == "schedules":
        return cli_schedules.run(args, client)
    if args.command in ("datasets", "partitions", "consumers"):
        return cli_datasets.run(args, client)
    if args.command in ("materialize", "invalidate", "views"):
        return cli_materialize.run(args, client)
    if args.command == "batch":
        return cli_batches.run(args, client)
    if args.command == "apply":
        from jobserver.apply import run

        return run(client, args.file, args.dry_run)
    if args.command == "submit":
        return cli_submit.run(args, client)
    elif args.command == "jobs" and (args.watch or args.count):
        from jobserver.cli_views import jobs_watch

        return jobs_watch(client, {"state": args.state, "name": args.name, "limit": args.limit},
                          args.interval, args.count)
    elif args.command == "jobs":
        page = client.jobs(state=args.state, name=args.name, limit=args.limit)
        print(_table(page["jobs"]))
    elif args.command == "job":
        job = client.job(args.id)
        _print(job)
        if job.get("after"):
            print(waits_for(job))
    else:
        _print(client.operate(args.id, args.command))
    return 0


def waits_for(job: dict[str, Any]) -> str:
    """``waits for: job 41 (done, RUNNING), job 42 (succeeded, SUCCEED, met)``: the
    job's upstreams, what it waits for of each and their states now."""
    parts = [f"job {up['job']} ({up['when']}, {up['state']}{', met' if up['met'] else ''})"
             for up in job["after"]]
    return (f"waits for: {', '.join(parts)}; {job['waiting_on']} not yet met"
            if job["waiting_on"] else f"waited for: {', '.join(parts)}")


def _print(body: Any) -> None:
    print(json.dumps(body, indent=2))


def _table(jobs: list[dict[str, Any]]) -> str:
    rows = [("ID", "NAME", "STATE", "PROGRESS", "ATTEMPT", "NODE", "CREATED")]
    for job in jobs:
        progress = f"{job['progress']['done']}/{job['progress']['total']}"
        rows.append((str(job["id"]), job["name"][:30], job["state"], progress,
                     str(job["attempt"]), job["node"] or "-", job["created_at"] or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)


if __name__ == "__main__":
    sys.exit(main())
