"""``jobserver serve``: one node process.

The scheduler and runner live in this process; the HTTP API runs under gunicorn in a
child process tree whose workers never schedule (``jobserver.api_process``). The child
is told to die with us (``PR_SET_PDEATHSIG``, see ``jobserver.api.gunicorn_conf``), so a
``kill -9`` of the node leaves no API behind. A node must not schedule without its API:
the address is checked before any lock is taken, and a child that keeps exiting makes
the node drain and stop.

Signals: the first SIGTERM/SIGINT drains (stop claiming, let running jobs finish up
to ``server.drain_timeout`` after the signal, re-queue those still running, release
locks); a second one exits at once and leaves the rest to the rescue path of the
other nodes.

The API listens on ``api.bind`` and, when set, on ``api.node_bind`` too, and names
the node in every answer (``X-Jobserver-Node``); its workers share one submit rate
limit (:mod:`jobserver.api.limits`).

Exit codes (:data:`EXIT_CODES`): 0 drained; 2 bad configuration, such as an
``api.bind`` address in use (nothing was taken: no lock, no row); 3 stopped without
draining (the drain timed out, or a second signal); 4 a required background loop died
of an unexpected error, and the node gave up its jobs, locks and presence (see
``jobserver.loops``): a service manager should restart it; 5 the API process kept
exiting, and the node drained and stopped.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

from jobserver.api.limits import prepare_buckets
from jobserver.api_process import ApiChild, check_bind
from jobserver.config import Config
from jobserver.logs import set_defaults as set_log_defaults
from jobserver.metrics import prepare_multiprocess_dir
from jobserver.security import check_serve_auth

if TYPE_CHECKING:
    from jobserver.node import Node

log = logging.getLogger(__name__)

#: How often the node looks at its API child (seconds).
WATCH_INTERVAL = 0.25
#: The exit code of a node that stopped without draining (see ``jobserver.cli``).
EXIT_NOT_DRAINED = 3
#: The exit code of a node that gave up because a required background loop died.
EXIT_LOOP_DIED = 4
#: The exit code of a node whose API process kept exiting (it drained first).
EXIT_API_FAILED = 5
#: What each exit code of ``jobserver serve`` means, for whoever reports one.
EXIT_CODES = {0: "drained", 2: "bad configuration (see its log)",
              EXIT_NOT_DRAINED: "stopped without draining",
              EXIT_LOOP_DIED: "a background loop died; the node gave up (see its log)",
              EXIT_API_FAILED: "its API process kept exiting; the node drained and stopped"}


class Signals:
    """SIGTERM/SIGINT as the node sees them, from the first line of :func:`serve`.

    The handlers are in place before the node registers itself or takes a lock: a
    node that others can already see as alive must drain on SIGTERM, never die of
    the signal's default action half started (the row and the presence lock would
    then be left for the other nodes' rescue, and its supervisor would read a kill).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.stop = threading.Event()
        self.count = 0
        self.drain_until: float | None = None  # server.drain_timeout after the first
        self.api: ApiChild | None = None  # stopped on a second signal, once there is one

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        # An operator (or a test) asking why a node does not stop gets every thread's
        # stack on stderr with `kill -USR1 PID`, without stopping it.
        faulthandler.register(signal.SIGUSR1, all_threads=True)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.count > 1:
            log.warning("second signal: exiting now; other nodes will rescue running jobs")
            if self.api is not None:
                self.api.stop(timeout=1)
            # 3, as for a drain that timed out: stopped without draining (1 would say
            # "the API refused", which a supervisor must not read into this exit).
            os._exit(EXIT_NOT_DRAINED)
        log.info("signal %s: draining", signal.Signals(signum).name)
        self.drain_until = time.monotonic() + self.config.server.drain_timeout
        self.stop.set()


def serve(config: Config) -> int:
    signals = Signals(config)
    signals.install()
    check_serve_auth(config)  # auth off only on loopback; some token must exist
    # Before any lock or row: a node that could not serve its API must not schedule.
    check_bind(config.api.bind, config.api.reuse_port)
    from jobserver.node import Node  # the whole engine: imported once the checks passed

    set_log_defaults(node=config.server.id)  # every JSON log line names its node
    prepare_multiprocess_dir(config.data_dir, config.server.id)
    if signals.stop.is_set():
        return 0  # told to stop before anything was taken: nothing to drain
    node = Node(config)
    node.start()  # refuses a server.id already in use before any API process exists
    prepare_buckets(config.data_dir, config.server.id)
    api = signals.api = ApiChild(config)
    api.start()
    api_failed = not _watch(node, api, signals.stop)
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
    # Without a signal (the API kept dying) the drain starts now.
    deadline = signals.drain_until or time.monotonic() + config.server.drain_timeout
    drained = node.stop(max(0.0, deadline - time.monotonic()))
    api_stop.join()
    if api_failed:
        return EXIT_API_FAILED
    return 0 if drained else EXIT_NOT_DRAINED


def _watch(node: Node, api: ApiChild, stop: threading.Event) -> bool:
    """Keep the API running until a signal or a node failure (True), or until it
    cannot be kept running (False, logged by the watch: the caller drains)."""
    while not stop.wait(WATCH_INTERVAL) and node.failure is None:
        if not api.watch(stop):
            return False
    return True


def _after_failure(node: Node, api: ApiChild) -> int:
    """The supervisor is stopping the node: wait for that, with ``/healthz`` answering
    503 meanwhile, then stop the API."""
    node.stop(drain_timeout=0)  # the supervisor's stop, or the same one done here
    api.stop()
    return EXIT_LOOP_DIED
