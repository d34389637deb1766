"""Gunicorn settings module used by ``jobserver serve`` (``-c python:...``).

The arbiter asks the kernel to SIGTERM it when the node process that started it dies,
so a ``kill -9`` of a node leaves no orphaned API behind, and tells the node when it
listens (``jobserver.api_process``).
"""

from __future__ import annotations

import ctypes
import os
import signal

from jobserver.api_process import READY_FD_ENV
from jobserver.logs import gunicorn_logconfig, inherit_defaults

PR_SET_PDEATHSIG = 1

#: ``jobserver --log-format json``: gunicorn's lines and the workers' as JSON too.
logconfig_dict = gunicorn_logconfig()
inherit_defaults()  # JSON lines of the arbiter and its workers name the node


def on_starting(server) -> None:  # gunicorn hook, runs in the arbiter
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return  # not Linux: stop the API by hand if the node is killed
    parent = os.environ.get("JOBSERVER_PARENT_PID")
    if parent and os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)  # the node died before we could ask


def when_ready(server) -> None:  # gunicorn hook, runs in the arbiter once it listens
    """Tell the node that the API listens: one byte on the pipe the node passed. The
    variable is dropped first, so that the workers forked later do not inherit it."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if not fd:
        return  # gunicorn started by hand, not by ``jobserver serve``
    try:
        os.write(int(fd), b"1")
        os.close(int(fd))
    except OSError:
        pass  # the node is gone; PR_SET_PDEATHSIG stops us


def child_exit(server, worker) -> None:  # gunicorn hook, runs in the arbiter
    """Drop a dead worker's live gauges from the node's metrics."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
