"""The API child of ``jobserver serve``: gunicorn, checked before, watched after.

* :func:`check_bind` runs before the node takes any lock: a node whose API cannot
  listen must not schedule, so an address in use stops the start with exit code 2.
  With ``api.reuse_port`` the check binds with ``SO_REUSEPORT`` too, so the nodes
  sharing one port on purpose pass it, while a port held without that option (another
  program) still fails.
* The arbiter tells the node when it listens: its ``when_ready`` hook writes to a pipe
  the node hands it (``jobserver.api.gunicorn_conf``). "serving the API" is logged
  then, not before.
* Its workers are :class:`jobserver.api.worker.BufferingWorker`: gthread's threads,
  with each request read by the worker's event loop before a thread takes it, so
  that slow or idle clients hold no thread (``api.read_timeout``).
* A child that exits is restarted after a pause that doubles each time, but at most
  :data:`API_MAX_RESTARTS` times within :data:`API_RESTART_WINDOW`: a child that keeps
  dying (the port taken by another program, workers that cannot boot) will not come
  back, and the node must not go on scheduling without its API. :meth:`ApiChild.watch`
  then answers False and ``jobserver serve`` drains the node and exits non-zero.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from jobserver.config import Config
from jobserver.exceptions import ConfigError

log = logging.getLogger(__name__)

#: The environment variable naming the pipe the arbiter reports readiness on.
READY_FD_ENV = "JOBSERVER_API_READY_FD"
#: Restarts allowed within :data:`API_RESTART_WINDOW` seconds before the node gives up.
API_MAX_RESTARTS = 3
API_RESTART_WINDOW = 60.0
#: The pause before the first restart of a window; each next one is twice as long.
API_FIRST_PAUSE = 0.5
#: How long a new child may take to listen (gunicorn retries a busy port for 5 s).
API_READY_TIMEOUT = 30.0


def check_bind(bind: str, reuse_port: bool) -> None:
    """Raise :class:`ConfigError` ("api.bind: HOST:PORT: address in use") unless the
    API could listen on ``bind`` now. Binds without listening, so that no connection
    is ever queued on the probe (with ``SO_REUSEPORT`` it would take a share of the
    other nodes' connections and drop them)."""
    if bind.startswith("unix:"):
        _check_unix(bind, bind.removeprefix("unix:"))
        return
    host, port = bind.rsplit(":", 1)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM)[0]
    except socket.gaierror:
        raise ConfigError(f"api.bind: {bind}: unknown host {host!r}") from None
    with socket.socket(family, kind, proto) as probe:
        # As gunicorn does: a port whose old connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"api.bind: {bind}: address in use") from None
            raise ConfigError(f"api.bind: {bind}: cannot listen: {exc.strerror}") from None


def _check_unix(bind: str, path: str) -> None:
    """gunicorn replaces a socket file that exists, so one that answers is in use."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"api.bind: {bind}: exists and is not a socket")
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(path) == 0:
            raise ConfigError(f"api.bind: {bind}: address in use")


def gunicorn_command(config: Config) -> list[str]:
    # -P: never import from the working directory (a data dir holds a "locks" folder).
    command = [sys.executable, "-P", "-m", "gunicorn", "--bind", config.api.bind,
               "--workers", str(config.api.workers),
               "--worker-class", "jobserver.api.worker.BufferingWorker",
               "--threads", "4", "--graceful-timeout", "5", "--timeout", "30",
               "--log-level", "warning", "-c", "python:jobserver.api.gunicorn_conf"]
    if config.api.node_bind:
        command += ["--bind", config.api.node_bind]
    if config.api.reuse_port:
        command.append("--reuse-port")
    return command + ["jobserver.api:create_app()"]


class RestartBudget:
    """Allows at most ``limit`` restarts within any ``window`` seconds, each after a
    pause twice the one before (within the window). A child that dies once a day is
    restarted for ever; one that dies again and again is given up."""

    def __init__(self, limit: int = API_MAX_RESTARTS, window: float = API_RESTART_WINDOW,
                 first_pause: float = API_FIRST_PAUSE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self.first_pause = limit, window, first_pause
        self._clock = clock
        self._exits: list[float] = []

    def next_pause(self) -> float | None:
        """Count an exit now: the pause before restarting, or None to give up."""
        now = self._clock()
        self._exits = [at for at in self._exits if now - at < self.window] + [now]
        if len(self._exits) > self.limit:
            return None
        return self.first_pause * 2 ** (len(self._exits) - 1)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


class ApiChild:
    """The gunicorn arbiter of a node, restarted within a :class:`RestartBudget`."""

    def __init__(self, config: Config, budget: RestartBudget | None = None) -> None:
        self.config = config
        self.command = gunicorn_command(config)
        self.budget = budget or RestartBudget()
        self.process: subprocess.Popen[bytes] | None = None
        self.ready = False
        self._ready_fd: int | None = None
        self._started_at = 0.0

    def start(self) -> None:
        self._close_pipe()
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        # The node's id, not one of their own: the default one names the process.
        env = dict(os.environ, JOBSERVER_PARENT_PID=str(os.getpid()),
                   JOBSERVER_SERVER__ID=self.config.server.id,
                   **{READY_FD_ENV: str(write_end)})
        try:
            self.process = subprocess.Popen(self.command, env=env, pass_fds=(write_end,))
        finally:
            os.close(write_end)  # the child's copy is the only writer: EOF when it dies
        self._ready_fd, self.ready = read_end, False
        self._started_at = time.monotonic()

    def watch(self, stop: threading.Event) -> bool:
        """Check the child once: note when it listens, restart it if it exited (after
        a pause that ``stop`` cuts short). False once it cannot be kept running."""
        process = self.process
        if process is None:
            return True
        self._note_ready()
        code = process.poll()
        if code is None:
            if self.ready or time.monotonic() - self._started_at < API_READY_TIMEOUT:
                return True
            log.error("API process did not listen on %s within %.0f s; stopping it",
                      self.config.api.bind, API_READY_TIMEOUT)
            self.stop(timeout=5)
            code = process.returncode
        what = _exit_text(code) + ("" if self.ready else " before it listened")
        pause = self.budget.next_pause()
        if pause is None:
            log.critical("API process %s, %d times within %.0f s: giving up; the node "
                         "drains and stops, it must not schedule without its API",
                         what, self.budget.limit + 1, self.budget.window)
            return False
        log.error("API process %s; restarting in %.1f s", what, pause)
        if not stop.wait(pause):
            self.start()
        return True

    def _note_ready(self) -> None:
        if self.ready or self._ready_fd is None:
            return
        try:
            said = os.read(self._ready_fd, 1)
        except BlockingIOError:
            return
        if said:
            self.ready = True
            log.info("node %s serving the API on %s", self.config.server.id,
                     " and ".join(filter(None, (self.config.api.bind,
                                                self.config.api.node_bind))))
        self._close_pipe()  # said so, or closed it without saying so (it died)

    def _close_pipe(self) -> None:
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None

    def stop(self, timeout: float = 10.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
