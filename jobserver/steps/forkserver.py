"""A node's fork server: starts the node's shell steps and reports what each one used.

Usage: ``python -I -S forkserver.py NODE_PID`` with fd 0 a Unix stream socket to the
node (the node side is :mod:`jobserver.steps.forkclient`).

Why a process apart from the node: a process's peak RSS (``ru_maxrss``) carries the
peak of the process it was forked from, across ``exec``; forked from the node, a step
reported the node's memory. Forked from this small interpreter, its figure is its own
plus this process's few megabytes at the fork. The server lives as long as the node,
so a step costs a fork and an exec, not an interpreter's start as the per-step
:mod:`jobserver.steps.reaper` does (which remains the node's fallback).

Protocol. Node to server, per step: a 4-byte big-endian length sent with the step's
output pipe (write end) and, when the node could open it, the node's working directory
(an ``O_PATH`` descriptor), both as SCM_RIGHTS; then that many bytes of JSON ``{"id",
"argv", "env"}``. To signal a step's process group: the same framing without
descriptors, and ``{"id", "signal"}``. Server to node, JSON lines: ``{"ready": PID}``
once at start, then per step ``{"id", "pid"}`` (or ``{"id", "error"}`` if the fork
failed) as soon as the child has exec'd (its process group then exists), and
``{"id", "status", "cpu_seconds", "peak_rss_kb"}`` when ``wait4`` reaps it (status as
``os.waitstatus_to_exitcode``; CPU and peak RSS of the step and of every descendant
it waited for). The pid line always comes before the step's end line.

Invariants:

- This process dies with the node: SIGKILL as parent-death signal, set here, then a
  check that the parent is still ``NODE_PID`` (a node killed before the signal was
  set sends none). It ignores SIGTERM, SIGINT and SIGHUP, which are the steps' to act
  on; it exits when the node closes the socket.
- Every step dies with this process: its child sets the same parent-death signal and
  checks that its parent is still this process before it execs, so a killed node
  (this process killed with it) leaves no step running.
- The step runs in the node's working directory at the request, as a child of the
  node would, even when that directory has been deleted since: it is passed as a
  descriptor, never as a path (``getcwd`` fails for a deleted directory, and a path
  may name another directory by then). Without that descriptor the step stays in
  this process's directory, which is the node's at this process's start.
- The step leads its own session and process group, which only this process
  signals: when the node asks (cancel, timeout) and, with SIGKILL, when the step has
  ended, so nothing it left in its group holds its output pipe open. It does so only
  for a step it has not reaped, and kills the group *before* it reaps the step: until
  then the step's pid, which is the group's id, cannot be reused, so the signal never
  reaches a stranger's group. (The node, which learns of the end later, could not
  know that.) When the node closes the socket, every running step's group is killed.
- The step has stdin from /dev/null, stdout and stderr on the pipe it was sent,
  default signal dispositions and no other descriptor of this process; it gets
  exactly the environment it was sent (this interpreter's PEP 538 ``LC_CTYPE`` is
  never passed on), and ``PATH`` from that environment finds its executable. Every
  descriptor of this process is non-inheritable (PEP 446), so exec closes them all
  but the step's 0, 1 and 2.

Standard library only and no import of jobserver, so the address space every step is
forked from stays small.
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import socket
import struct
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
HEADER = struct.Struct("!I")
#: Signals the step's group gets to stop it: the steps', not this process's.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Everything this process changes or Python ignores at start; the step gets defaults.
RESTORED = ("SIGPIPE", "SIGXFZ", "SIGXFSZ", "SIGCHLD", "SIGTERM", "SIGINT", "SIGHUP")
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent: int) -> None:
    """Get SIGKILL when the parent dies; exit 137 if it already has."""
    if _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(126)
    if os.getppid() != parent:
        os._exit(137)  # as if the signal had come


def _exec_step(request: dict[str, Any], fds: list[int], server: int) -> None:
    """In the forked child: become the step (``fds``: its output pipe, then the
    directory to run in, if any). Never returns."""
    try:
        for name in RESTORED:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.setsid()
        die_with_parent(server)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[0], 2)
        argv = request["argv"]
        try:
            if len(fds) > 1:
                os.fchdir(fds[1])
            os.execvpe(argv[0], argv, request["env"])
        except OSError as exc:
            os.write(2, f"cannot start {argv[0]}: {exc.strerror or exc}\n".encode())
    finally:
        os._exit(127)


class Server:
    """The loop: read requests from the node, fork steps, reap them, report."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock, self._pid = sock, os.getpid()
        self._pids: dict[int, Any] = {}  # pid -> request id, until reaped
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w)
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ, self._request)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._reap)

    def _send(self, message: dict[str, Any]) -> None:
        self._sock.sendall(json.dumps(message).encode() + b"\n")

    def serve(self) -> None:
        self._send({"ready": os.getpid()})
        while True:
            for key, _ in self._selector.select():
                if key.data() is False:
                    return

    def _request(self) -> bool:
        """Start one step, or signal one; False when the node has closed the socket."""
        header, fds, _, _ = socket.recv_fds(self._sock, HEADER.size, 2)
        for fd in fds:
            os.set_inheritable(fd, False)  # only dup2 in the step's child makes 1 and 2
        try:
            if not header:
                return False
            header += self._read(HEADER.size - len(header))
            request = json.loads(self._read(HEADER.unpack(header)[0]))
            if "signal" in request:
                self._signal(request["id"], request["signal"])
            elif fds:
                self._fork(request, fds)
            else:
                self._send({"id": request["id"], "error": "no output pipe sent"})
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                raise EOFError("node closed the socket mid-request")
            data += chunk
        return bytes(data)

    def _fork(self, request: dict[str, Any], fds: list[int]) -> None:
        """Fork the step; answer its pid once it has exec'd (or failed to), so that
        its process group exists by the time the node may signal it."""
        execed, child_end = os.pipe()  # both close-on-exec: EOF once the child execs
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(execed)
            os.close(child_end)
            self._send({"id": request["id"], "error": exc.strerror or str(exc)})
            return
        if pid == 0:
            os.close(execed)
            _exec_step(request, fds, self._pid)
        os.close(child_end)
        try:
            while os.read(execed, 512):
                pass
        finally:
            os.close(execed)
        self._pids[pid] = request["id"]
        self._send({"id": request["id"], "pid": pid})

    def _signal(self, request_id: Any, signum: int) -> None:
        """Signal a step's group, if the step is still this process's unreaped child
        (otherwise it has ended, and its end is on its way to the node)."""
        for pid, running in list(self._pids.items()):
            if running == request_id:
                kill_group(pid, signum)

    def stop_steps(self) -> None:
        """Kill the group of every step not reaped yet: the node has gone."""
        for pid in self._pids:
            kill_group(pid, signal.SIGKILL)

    def _reap(self) -> bool:
        """Report every step that has ended."""
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        while self._pids:
            ended = reap_ended()
            if ended is None:
                return True
            pid, status, usage = ended
            self._send({"id": self._pids.pop(pid, None), "status": os.waitstatus_to_exitcode(status),
                        "cpu_seconds": usage.ru_utime + usage.ru_stime,
                        "peak_rss_kb": usage.ru_maxrss})
        return True


def reap_ended() -> tuple[int, int, Any] | None:
    """Reap a child that has ended, if any, killing its process group first: until
    the child is reaped its pid, the group's id, cannot be another process's, so the
    SIGKILL reaches only what the child left in its group. ``(pid, status, rusage)``."""
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    kill_group(info.si_pid, signal.SIGKILL)
    _, status, usage = os.wait4(info.si_pid, 0)
    return info.si_pid, status, usage


def kill_group(pgid: int, signum: int) -> None:
    """Signal a process group; one already gone is no error."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _take_socket() -> socket.socket:
    """The node's socket (fd 0), moved above 2; fds 0-2 are then taken (/dev/null
    where the node left one closed), so no received pipe is ever one of them."""
    null = os.open(os.devnull, os.O_RDWR)
    while null <= 2:
        null = os.open(os.devnull, os.O_RDWR)
    sock = socket.socket(fileno=os.dup(0))  # dup: not inheritable, as every fd here
    os.dup2(null, 0, inheritable=False)
    os.close(null)
    return sock


def main(args: list[str]) -> int:
    die_with_parent(int(args[0]))
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    server = Server(_take_socket())
    try:
        server.serve()
    except (EOFError, ConnectionError):
        pass
    finally:
        server.stop_steps()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
