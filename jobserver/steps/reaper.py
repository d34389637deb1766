"""Run one shell step as a child and report what the step itself used: the fallback
for a node whose fork server (:mod:`jobserver.steps.forkserver`) cannot be started.
The chain is node -> ``setpriv --pdeathsig`` -> ``/bin/sh`` parent check -> this
process -> fork -> ``setpriv`` -> ``/bin/sh`` -> exec the step: an interpreter's start
per step, which the fork server pays once per node.

Usage: ``python -I -S reaper.py USAGE_FILE SETPRIV LC_CTYPE ARGV...`` (``SETPRIV``: the
path of util-linux ``setpriv``, or an empty string when there is none; ``LC_CTYPE``:
``=`` and the step's own value, or an empty string when its environment has none).

Why a process between the node and the step: a process's peak RSS (``ru_maxrss``)
carries the peak of the process it was forked from, across ``exec``. A step forked
from the node reported the node's memory (72 MB for ``echo``), whatever it used
itself. Forked from this small interpreter instead, the step's figure is its own plus
this process's few megabytes at the fork. ``wait4`` here gives the peak RSS and CPU
time of the step and of every descendant it waited for; they go to ``USAGE_FILE`` as
JSON, with the step's exit status. This process then exits as the step did.

The step dies with this process (``setpriv --pdeathsig``, checked as the node checks
its own child: :data:`PARENT_CHECK`), and this process dies with the node, so a
killed node leaves no step running. SIGTERM, SIGINT and SIGHUP sent to the step's
process group reach the step; this process ignores them, to report the step's end.

Standard library only, and no import of jobserver: it runs with ``-I -S``, without
the node's packages, for a fast start. The step gets the environment the node gave
this process, except that Python sets ``LC_CTYPE`` in a C locale (PEP 538): the
step's own value, or its absence, is put back from the ``LC_CTYPE`` argument.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys

#: Run between setpriv and the step: a parent killed after the fork but before setpriv
#: set the death signal sends none, so the step checks that its parent is still the
#: one named ($0) once the signal is set, and execs the step only then (exit 137
#: otherwise, as if the signal had come). Seen as two jobs of one lock_key running at
#: once in a kill -9 chaos test: the dead node's step started after the kill.
PARENT_CHECK = 'test "$PPID" = "$0" || exit 137; exec "$@"'
#: Signals the step's group gets to stop it: the step's to act on, not this process's.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Signals Python ignores at start and an exec would keep ignored: the step gets
#: the defaults, as ``subprocess`` gives them (``restore_signals``).
RESTORED = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")


def command(setpriv: str, argv: list[str], parent: int) -> list[str]:
    """The argv that runs ``argv`` as a child of ``parent`` that dies with it."""
    if not setpriv:
        return argv
    return [setpriv, "--pdeathsig", "SIGKILL", "--", "/bin/sh", "-c", PARENT_CHECK,
            str(parent), *argv]


def _start(argv: list[str], lc_ctype: str) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        if lc_ctype.startswith("="):
            os.environ["LC_CTYPE"] = lc_ctype[1:]
        else:
            os.environ.pop("LC_CTYPE", None)
        for name in RESTORED:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"cannot start {argv[0]}: {exc.strerror or exc}\n".encode())
    os._exit(127)


def _report(path: str, status: int, usage: resource.struct_rusage) -> None:
    report = {"status": os.waitstatus_to_exitcode(status),
              "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss_kb": usage.ru_maxrss}
    partial = f"{path}.partial"  # renamed when whole: the node never reads half a report
    with open(partial, "w") as out:
        json.dump(report, out)
    os.replace(partial, path)


def main(args: list[str]) -> int:
    """Run the step, write the report, return the exit status to end with."""
    usage_file, setpriv, lc_ctype, argv = args[0], args[1], args[2], args[3:]
    pid = _start(command(setpriv, argv, os.getpid()), lc_ctype)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _, status, usage = os.wait4(pid, 0)
    _report(usage_file, status, usage)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
