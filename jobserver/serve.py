"""``jobserver serve``: one node process.

The scheduler and runner live in this process; the HTTP API runs under gunicorn in a
child process tree whose workers never schedule. The child is told to die with us
(``PR_SET_PDEATHSIG``, see ``jobserver.api.gunicorn_conf``), so a ``kill -9`` of the
node leaves no API behind.

Signals: the first SIGTERM/SIGINT drains (stop claiming, let running jobs finish up
to ``server.drain_timeout`` after the signal, re-queue those still running, release
locks); a second one exits at once and leaves the rest to the rescue path of the
other nodes.

The API listens on ``api.bind`` and, when set, on ``api.node_bind`` too, and names
the node in every answer (``X-Jobserver-Node``); its workers share one submit rate
limit (:mod:`jobserver.api.limits`).

Exit codes (:data:`EXIT_CODES`): 0 drained; 3 stopped without draining (the drain
timed out, or a second signal); 4 a required background loop died of an unexpected
error, and the node gave up its jobs, locks and presence (see ``jobserver.loops``):
a service manager should restart it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

from jobserver.api.limits import prepare_buckets
from jobserver.config import Config
from jobserver.logs import set_defaults as set_log_defaults
from jobserver.metrics import prepare_multiprocess_dir
from jobserver.security import check_serve_auth
from jobserver.node import Node

log = logging.getLogger(__name__)

API_RESTART_DELAY = 2.0
#: The exit code of a node that stopped without draining (see ``jobserver.cli``).
EXIT_NOT_DRAINED = 3
#: The exit code of a node that gave up because a required background loop died.
EXIT_LOOP_DIED = 4
#: What each exit code of ``jobserver serve`` means, for whoever reports one.
EXIT_CODES = {0: "drained", EXIT_NOT_DRAINED: "stopped without draining",
              EXIT_LOOP_DIED: "a background loop died; the node gave up (see its log)"}


def gunicorn_command(config: Config) -> list[str]:
    # -P: never import from the working directory (a data dir holds a "locks" folder).
    command = [sys.executable, "-P", "-m", "gunicorn", "--bind", config.api.bind,
               "--workers", str(config.api.workers), "--worker-class", "gthread",
               "--threads", "4", "--graceful-timeout", "5", "--timeout", "30",
               "--log-level", "warning", "-c", "python:jobserver.api.gunicorn_conf"]
    if config.api.node_bind:
        command += ["--bind", config.api.node_bind]
    if config.api.reuse_port:
        command.append("--reuse-port")
    return command + ["jobserver.api:create_app()"]


class ApiProcess:
    """The gunicorn child, restarted if it dies while the node runs."""

    def __init__(self, config: Config) -> None:
        self.command = gunicorn_command(config)
        self.node_id = config.server.id
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The node's id, not one of their own: the default one names the process.
        env = dict(os.environ, JOBSERVER_PARENT_PID=str(os.getpid()),
                   JOBSERVER_SERVER__ID=self.node_id)
        self.process = subprocess.Popen(self.command, env=env)

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            log.error("API process exited with %s; restarting", self.process.returncode)
            time.sleep(API_RESTART_DELAY)
            self.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()


def serve(config: Config) -> int:
    check_serve_auth(config)  # auth off only on loopback; some token must exist
    set_log_defaults(node=config.server.id)  # every JSON log line names its node
    prepare_multiprocess_dir(config.data_dir, config.server.id)
    node = Node(config)
    node.start()  # refuses a server.id already in use before any API process exists
    prepare_buckets(config.data_dir, config.server.id)
    api = ApiProcess(config)
    api.start()
    stop = threading.Event()
    signals_seen = []
    drain_until: list[float] = []  # when the drain ends: server.drain_timeout after a signal

    def on_signal(signum: int, _frame: object) -> None:
        signals_seen.append(signum)
        if len(signals_seen) > 1:
            log.warning("second signal: exiting now; other nodes will rescue running jobs")
            api.stop(timeout=1)
            # 3, as for a drain that timed out: stopped without draining (1 would say
            # "the API refused", which a supervisor must not read into this exit).
            os._exit(EXIT_NOT_DRAINED)
        log.info("signal %s: draining", signal.Signals(signum).name)
        drain_until.append(time.monotonic() + config.server.drain_timeout)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("node %s serving the API on %s", config.server.id,
             " and ".join(filter(None, (config.api.bind, config.api.node_bind))))
    while not stop.wait(1.0) and node.failure is None:
        api.check()
    if node.failure is not None:
        return _after_failure(node, api)
    # Stop claiming before stopping the API: gunicorn may take seconds to stop, and a
    # draining node that still claimed meanwhile would start new jobs and keep the
    # scheduling lock from the node that should take over.
    node.stop_claiming()
    # The API stops beside the drain, which counts from the signal as whoever sent it
    # does (the cluster launcher says how long each node's drain has left): a slow
    # gunicorn stop must not eat the running jobs' time.
    api_stop = threading.Thread(target=api.stop, name="api-stop")
    api_stop.start()
    drained = node.stop(max(0.0, drain_until[0] - time.monotonic()))
    api_stop.join()
    return 0 if drained else EXIT_NOT_DRAINED


def _after_failure(node: Node, api: ApiProcess) -> int:
    """The supervisor is stopping the node: wait for that, with ``/healthz`` answering
    503 meanwhile, then stop the API."""
    node.stop(drain_timeout=0)  # the supervisor's stop, or the same one done here
    api.stop()
    return EXIT_LOOP_DIED
