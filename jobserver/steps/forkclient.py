"""The node's side of its fork server (:mod:`jobserver.steps.forkserver`).

One server per node process, on one Unix socket, shared by every runner thread: a
step's start is a short message and a fork, so one small process serves all slots,
and the node holds one extra interpreter whatever its slot count. Senders take a
lock (a request's bytes never interleave with another's); one reader thread hands
each reply to its step by request id.

Invariants:

- The server is started, and restarted after it dies, by one thread that lives as
  long as the node process (the keeper, which is also the reader). A parent-death
  signal fires when the *thread* that forked the child ends, so a server started
  from a runner thread would die with that thread.
- A step whose server dies ends as killed by SIGKILL (its own death signal), with
  no usage figures; it is never started again here. A request whose bytes could not
  be sent started nothing and is sent once more to a fresh server.
- Nothing here signals a step's pid or group: the server does, on request, while the
  step is its unreaped child, since the pid may be another process's once the step
  is reaped. So what a step whose server died left in its group is not killed here.
- When no server can be started (no interpreter path, or it does not report ready),
  :meth:`ForkServer.start` returns ``None`` and the caller runs the step through the
  reaper; a new start is tried after ``RETRY_AFTER`` seconds.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from jobserver.steps import forkserver

log = logging.getLogger(__name__)

START_TIMEOUT = 10.0
RETRY_AFTER = 30.0
#: How long an abandoned server gets to kill its steps' groups and exit by itself.
EXIT_GRACE = 1.0


class StepRun:
    """One step started through the server: its pid, then how it ended."""

    def __init__(self, request_id: int) -> None:
        self.id = request_id
        self.pid: int | None = None
        self.error: str | None = None
        self.result: dict[str, Any] | None = None
        self.started = threading.Event()  # set with pid, or error, or result
        self.done = threading.Event()
        self.connection: _Connection | None = None

    def update(self, message: dict[str, Any]) -> None:
        if "pid" in message:
            self.pid = int(message["pid"])
        elif "error" in message:
            self.error = str(message["error"])
            self.result = {"status": 127, "cpu_seconds": None, "peak_rss_kb": None}
            self.done.set()
        else:
            self.result = message
            self.done.set()
        self.started.set()

    def signal(self, signum: int) -> None:
        """Have the server signal the step's process group, which it does only while
        the step is its unreaped child: the node never signals a pid that may have
        been reaped, and so reused, by then."""
        if self.connection is not None and not self.done.is_set():
            self.connection.signal(self.id, signum)

    def abandon(self) -> None:
        """Stop the server this step was sent to (it never answered): the server exits
        when its socket closes, killing its steps' groups."""
        if self.connection is not None:
            self.connection.shutdown()

    def lost(self) -> None:
        """The server died: the step, if it had started, died with it."""
        if self.result is None:
            self.result = {"status": -9, "cpu_seconds": None, "peak_rss_kb": None}
            if self.pid is None:
                self.error = "the fork server died before starting the step"
        self.started.set()
        self.done.set()


class _Connection:
    """A live server: its process, socket and the steps it has not reported ended."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc, self.sock = proc, sock
        self.send_lock = threading.Lock()
        self.table_lock = threading.Lock()  # never held while sending: the reader needs it
        self.pending: dict[int, StepRun] = {}
        self.closed = False

    def send(self, run: StepRun, payload: bytes, fds: list[int]) -> bool:
        """Send one request; False (nothing started) when the server is gone."""
        with self.table_lock:
            if self.closed:
                return False
            self.pending[run.id] = run
        run.connection = self
        try:
            with self.send_lock:
                header = forkserver.HEADER.pack(len(payload))
                socket.send_fds(self.sock, [header], fds)
                self.sock.sendall(payload)
            return True
        except OSError:
            with self.table_lock:
                self.pending.pop(run.id, None)
            self.shutdown()
            return False

    def signal(self, run_id: int, signum: int) -> None:
        """Ask the server to signal a step's group; nothing if the server is gone
        (its steps died with it)."""
        payload = json.dumps({"id": run_id, "signal": int(signum)}).encode()
        try:
            with self.send_lock:
                self.sock.sendall(forkserver.HEADER.pack(len(payload)) + payload)
        except OSError:
            pass

    def dispatch(self, message: dict[str, Any]) -> None:
        with self.table_lock:
            run = self.pending.get(message.get("id", -1))
            if run is not None and "pid" not in message:
                del self.pending[run.id]
        if run is not None:
            run.update(message)

    def lost(self) -> None:
        with self.table_lock:
            self.closed = True
            runs, self.pending = list(self.pending.values()), {}
        for run in runs:
            run.lost()

    def shutdown(self) -> None:
        """Make the reader see the end of the stream (it then cleans up)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ForkServer:
    """The node's fork server, started at the first step and after each death."""

    def __init__(self, executable: str | None) -> None:
        self._executable = executable
        self._state = threading.Condition()
        self._conn: _Connection | None = None
        self._wanted = False
        self._failed_at: float | None = None
        self._keeper: threading.Thread | None = None
        self._ids = itertools.count(1)

    def pid(self) -> int | None:
        """The running server's pid, if there is one."""
        with self._state:
            return self._conn.proc.pid if self._conn is not None else None

    def start(self, argv: list[str], env: dict[str, str], out: int) -> StepRun | None:
        """Start a step with ``out`` as its stdout and stderr, in this process's
        working directory; None: no server."""
        payload = {"argv": argv, "env": env}
        cwd = _cwd_fd()
        try:
            for _ in range(2):
                conn = self._connection()
                if conn is None:
                    return None
                run = StepRun(next(self._ids))
                fds = [out] if cwd is None else [out, cwd]
                if conn.send(run, json.dumps({"id": run.id, **payload}).encode(), fds):
                    return run
            return None
        finally:
            if cwd is not None:
                os.close(cwd)

    def _connection(self) -> _Connection | None:
        with self._state:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_AFTER:
                return None
            if self._executable is None:
                return None
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, daemon=True,
                                                name="fork-server")
                self._keeper.start()
            self._wanted = True
            self._state.notify_all()
            self._state.wait_for(lambda: not self._wanted, START_TIMEOUT * 2)
            return self._conn if self._conn is not None and not self._conn.closed else None

    def _keep(self) -> None:
        """The keeper thread: start the server when wanted, read it until it dies."""
        while True:
            with self._state:
                self._state.wait_for(lambda: self._wanted)
            conn = self._spawn()
            with self._state:
                self._conn, self._wanted = conn, False
                self._failed_at = None if conn is not None else time.monotonic()
                self._state.notify_all()
            if conn is not None:
                self._read(conn)
                with self._state:
                    self._conn = None

    def _spawn(self) -> _Connection | None:
        assert self._executable is not None
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [self._executable, "-I", "-S", forkserver.__file__, str(os.getpid())],
                stdin=theirs.fileno(), start_new_session=True)
        except OSError as exc:
            log.warning("fork server not started (%s): shell steps use the reaper", exc)
            ours.close()
            return None
        finally:
            theirs.close()
        ours.settimeout(START_TIMEOUT)
        try:
            ready = json.loads(ours.makefile("rb").readline())["ready"]
            assert ready == proc.pid
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            log.warning("fork server did not start: shell steps use the reaper")
            ours.close()
            proc.kill()
            proc.wait()
            return None
        ours.settimeout(None)
        return _Connection(proc, ours)

    def _read(self, conn: _Connection) -> None:
        """Dispatch replies until the server's end closes; then fail what it held."""
        with conn.sock.makefile("rb") as lines:
            try:
                for line in lines:
                    conn.dispatch(json.loads(line))
            except (OSError, ValueError):
                pass
        conn.lost()
        conn.sock.close()
        code = _end(conn.proc)
        log.warning("fork server %d ended (status %s); a new one starts at the next "
                    "shell step", conn.proc.pid, code)


def _end(proc: subprocess.Popen[bytes]) -> int:
    """Wait for a server whose socket is closed: dead already, or exiting once it
    has killed its steps' groups, which only it may signal. One stuck is killed
    after :data:`EXIT_GRACE` (its steps die with it; what they left runs on)."""
    try:
        return proc.wait(EXIT_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _cwd_fd() -> int | None:
    """This process's working directory as a descriptor for the step to ``fchdir``
    to: unlike ``getcwd``, it works when the directory has been deleted, which a
    child of this process inherits just as well. None (the step then runs in the
    server's directory) only if even that cannot be opened."""
    try:
        return os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


#: The node's server: the node's interpreter, started without site packages.
SERVER = ForkServer(sys.executable or None)
