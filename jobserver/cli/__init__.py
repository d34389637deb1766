"""The ``jobserver`` command line.

Server commands (``serve``, ``cluster --nodes``, ``db upgrade``, and the admin commands
``token`` and ``purge``) read the config; client commands talk to the API with
``--url``/``JOBSERVER_URL`` and ``--token``/``JOBSERVER_TOKEN`` (falling back to the
config and the token file that ``jobserver cluster`` writes). The global options
(``--config``, ``--log-level``, ``--log-format``, and ``--url``/``--token`` of the
client commands) are taken before the command or after it. The planners add their
own client commands (:meth:`jobserver.planners.base.Planner.add_commands`), listed
after ``logs``.

Exit codes: 0 success; 1 the request failed (the API refused it, could not be
reached, or an unexpected error); 2 bad usage or configuration (an unknown option, a
value of the wrong type, a file that cannot be read, a URL or token that cannot be
used: nothing was sent); 3 a node stopped without draining, 4 a node gave up because
one of its background loops died, 5 a node's API process kept exiting and the node
drained (``jobserver.serve``); 130 Ctrl-C. A planner's command may have its own
(``batch run``: 3 is a FAILED stage there), and so has ``fence-check``
(``jobserver.cli.fence``: 1 is a stale claim, 2 no answer). Every failure is one line
on stderr (a refused request adds a line per further field), never a traceback:
``--log-level DEBUG`` logs one for an unexpected error.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobserver.cli import fence, logs, purge, submit, tokens
from jobserver.cli.job import job_summary
from jobserver.cli.job import waits_for as waits_for  # the public name of before
from jobserver.cli.parsing import (EXIT_USAGE, Parser, check_text, client_options,
                                   global_options, positive, read_input, run_reported)
from jobserver.exceptions import ConfigError, JobServerError
from jobserver.logs import setup_logging
from jobserver.planners import installed

if TYPE_CHECKING:
    from jobserver.client import Client
    from jobserver.config import Config

DESCRIPTION = ("jobserver: a distributed job server. 'serve' runs a node; the client "
               "commands talk to its HTTP API. Global options go before or after the "
               "command. Exit codes: 0 success, 1 the request failed, 2 bad usage or "
               "configuration.")
SERVE_DESCRIPTION = (
    "Run one node: the scheduler and runner in this process, the HTTP API under "
    "gunicorn. Configuration comes from the TOML file named by --config (or "
    "$JOBSERVER_CONFIG), then from environment variables, which override the file: "
    "JOBSERVER_SECTION__KEY sets section.key (JOBSERVER_SCHEDULER__MODE=leader) and "
    "JOBSERVER_DATA_DIR sets data_dir. Keys set by neither keep their defaults: a SQLite "
    "store and file locks under ./.jobserver. A bad value stops start-up with a message "
    "naming the key (exit 2). The API needs a token: api.tokens, or one made with "
    "'jobserver token create'. docs/configuration.md lists every key.")
_client_options = client_options  # what the command modules are handed


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="jobserver", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of the commands below; COMMAND --help for its "
                                     "options")
    sub.add_parser("serve", help="run one node: scheduler, runner and the HTTP API",
                   description=SERVE_DESCRIPTION)
    cluster = sub.add_parser("cluster", help="show the cluster's nodes; with --nodes N, run "
                                             "N nodes on this host (on the configured store "
                                             "and locks; by default SQLite + file locks)")
    cluster.add_argument("--nodes", type=int, help="start N local nodes (make run: 3)")
    cluster.add_argument("--demo", action="store_true",
                         help="with --nodes: submit the demo jobs, schedule and batches")
    cluster.add_argument("--node-ports", type=_ports, metavar="P1,P2,...",
                         help="with --nodes: each node's own API port (default: the ports "
                              "after api.bind's, 8081, 8082, ... for 8080)")
    db = sub.add_parser("db", help="database schema")
    db.add_argument("action", choices=["upgrade"],
                    help="upgrade: apply the migrations the store lacks")
    tokens.add_parser(sub)
    purge.add_parser(sub)
    submit = sub.add_parser("submit", help="submit a job spec, a JSON array of them or JSON "
                                           "lines (file, or - for stdin); prints 'job N "
                                           "submitted' with its dashboard page, a line a job")
    submit.add_argument("file", help="the job spec(s): a JSON file, or - for stdin")
    submit.add_argument("--idempotency-key", metavar="KEY",
                        help="one job only: a retried submit with the same key makes one job")
    output = submit.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true",
                        help="print the API's answer instead: the job as JSON, or for many "
                             "jobs {\"id\", \"created\"} a line")
    output.add_argument("-q", "--quiet", action="store_true",
                        help="print only each job's id, a line a job (for scripts)")
    jobs = sub.add_parser("jobs", help="list jobs, newest first")
    jobs.add_argument("--state", help="only jobs in this state (READY, RUNNING, ...)")
    jobs.add_argument("--name", help="only jobs with this name")
    jobs.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    for command in (cluster, jobs):  # the live views (jobserver.cli.views)
        command.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
        command.add_argument("--interval", type=positive(float), default=2.0,
                             help="seconds between refreshes (default 2)")
        command.add_argument("--count", type=positive(int),
                             help="stop after this many refreshes")
    job = sub.add_parser("job", help="show one job: state, times, duration, its steps, why "
                                     "it is not running (READY), its audit trail and its "
                                     "dashboard page")
    job.add_argument("id", type=int, help="the job's id")
    job.add_argument("--json", action="store_true", help="print the job as the API gives it")
    for action in ("pause", "resume", "rerun", "discard"):
        command = sub.add_parser(action, help=f"{action} a job")
        command.add_argument("id", type=int, help="the job's id")
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
    logs.add_parser(sub, _client_options)
    for planner in installed():  # their commands run through args.run (_client_command)
        planner.add_commands(sub, _client_options)
    fence.add_parser(sub, _client_options)
    global_options(parser)  # last: every command takes them, whoever added it
    return parser


def _ports(text: str) -> list[int]:
    try:
        ports = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ports: {text!r}")
    if not all(0 < port < 65536 for port in ports):
        raise argparse.ArgumentTypeError(f"a port is between 1 and 65535: {text!r}")
    return ports


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, or bad usage (already told in one line)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    setup_logging(args.log_level, args.log_format)
    return run_reported(_dispatch, args)


def _dispatch(args: argparse.Namespace) -> int:
    from jobserver.config import CONFIG_ENV  # pydantic: not for --help or bad usage

    if args.command == "serve":
        from jobserver.serve import serve

        if args.config:  # the API processes load the config again: the same file
            os.environ[CONFIG_ENV] = str(Path(args.config).resolve())
        return serve(_config(args.config))
    if args.command == "cluster" and args.nodes is None:  # the status view
        if args.demo or args.node_ports:
            raise ConfigError("--demo and --node-ports start a local cluster: use them "
                              "with --nodes N")
        from jobserver.cli.views import cluster_command

        client = _client(args)
        with _token_hint(args, client):
            return cluster_command(client, args.watch or bool(args.count), args.interval,
                                   args.count)
    if args.command == "cluster":
        if args.config:  # the nodes load the config too: the same file
            os.environ[CONFIG_ENV] = str(Path(args.config).resolve())
        return _cluster(_config(args.config), args.nodes, args.demo, args.node_ports)
    if args.command == "token":
        return tokens.run(args, _config(args.config))
    if args.command == "fence-check":  # exit codes of its own: 1 is "stale"
        return fence.run(args, lambda: _client(args))
    if args.command == "purge":
        return purge.run(args, _config(args.config))
    if args.command == "db":
        from jobserver.store import Store

        Store(_config(args.config).database_url).upgrade()
        print("database schema is up to date")
        return 0
    return _client_command(args)


def _cluster(config: Config, nodes: int, demo: bool, node_ports: list[int] | None) -> int:
    """Run N local nodes until a signal stops them (``jobserver.cluster_stop``): SIGINT,
    SIGTERM and SIGHUP alike, since the nodes run in process groups of their own and
    get neither Ctrl-C nor a closed terminal's hang-up themselves."""
    from jobserver.cluster import LocalCluster

    if not 1 <= nodes <= 16:
        raise ConfigError("--nodes must be between 1 and 16")
    return LocalCluster(config, nodes, node_ports).run(demo)


def _config(path: str | None) -> Config:
    """The config; a file that cannot be read is a :class:`ConfigError` too."""
    from jobserver.config import load_config

    try:
        return load_config(path)
    except OSError as exc:
        raise ConfigError(f"config file {exc.filename or path}: {exc.strerror or exc}") \
            from None


def _client(args: argparse.Namespace) -> Client:
    from jobserver.client import Client, token_problem, url_problem

    config = _client_config(args.config)
    env_url = os.environ.get("JOBSERVER_URL")
    url, source = ((args.url, "--url") if args.url else (env_url, "JOBSERVER_URL") if env_url
                   else (f"http://{config.api.bind if config else '127.0.0.1:8080'}",
                         "api.bind"))
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"{source} {url!r}: {problem}")
    token = args.token or os.environ.get("JOBSERVER_TOKEN") or (
        config.api.tokens[0] if config and config.api.tokens else None)
    if token is None:
        token = _token_file(config.data_dir if config else Path(".jobserver"))
    if token is not None and token_problem(token):  # never echo a secret
        raise ConfigError(f"--token: {token_problem(token)}")
    return Client(url, token)


def _client_config(path: str | None) -> Config | None:
    """The config given with --config (it must be valid), else the one the
    environment names, if it is valid: a client needs none."""
    from jobserver.config import load_config

    if path:
        return _config(path)
    try:
        return load_config()
    except (ConfigError, OSError):
        return None


def _token_file(data_dir: Path) -> str | None:
    """The token ``jobserver cluster`` wrote, if any."""
    try:
        return (data_dir / "api-token").read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{exc.filename}: {exc.strerror or exc}") from None


@contextmanager
def _token_hint(args: argparse.Namespace, client: Client) -> Iterator[None]:
    """A 401 to a client that sent no token says where to find one: ``make run``
    (``jobserver cluster``) keeps its token in ``<data_dir>/api-token``, which a
    client run from another directory does not find."""
    from jobserver.client import ApiError

    try:
        yield
    except ApiError as exc:
        if exc.status != 401 or client.token:
            raise
        config = _client_config(args.config)
        path = (config.data_dir if config else Path(".jobserver")) / "api-token"
        raise JobServerError(
            f"{exc.message}: none given (--token, $JOBSERVER_TOKEN, api.tokens) nor found in "
            f"{path.absolute()}; 'make run' keeps its token in .jobserver/api-token of the "
            "checkout it runs in: export JOBSERVER_TOKEN=$(cat "
            "/path/to/checkout/.jobserver/api-token)") from None


def _client_command(args: argparse.Namespace) -> int:
    client = _client(args)
    with _token_hint(args, client):
        return _client_call(args, client)


def _client_call(args: argparse.Namespace, client: Client) -> int:
    planner_command = getattr(args, "run", None)  # Planner.add_commands set it
    if planner_command is not None:
        return int(planner_command(args, client))
    if args.command == "logs":
        return logs.run(args, client)
    if args.command == "apply":
        from jobserver.apply import run

        check_text(args.file)  # apply reads it again; a file it cannot read is bad usage
        return run(client, args.file, args.dry_run)
    if args.command == "submit":
        return submit.run(args, client)
    elif args.command == "jobs" and (args.watch or args.count):
        from jobserver.cli.views import jobs_watch

        return jobs_watch(client, {"state": args.state, "name": args.name, "limit": args.limit},
                          args.interval, args.count)
    elif args.command == "jobs":
        from jobserver.cli.views import jobs_view

        print(jobs_view(client.jobs(state=args.state, name=args.name, limit=args.limit)))
    elif args.command == "job":
        job = client.job(args.id)
        if args.json:
            _print(job)
        else:
            print(job_summary(job, client.job_events(args.id)["events"], client.url))
    else:
        _print(client.operate(args.id, args.command))
    return 0


def _print(body: Any) -> None:
    print(json.dumps(body, indent=2))

