"""``jobserver logs ID [STEP] [--attempt N] [-f]``: the full logs of a job's steps.

With STEP: that step's log (its newest attempt, or ``--attempt N``), byte for byte as
the step wrote it. Without: every step in the job's order, each after a header line
``==> step NAME (attempt N, STATE) <==``. ``-f`` follows a running step until its
attempt ends (a step not started yet is waited for while its job is active), asking
the API for what is new from the byte it got to, more slowly while nothing comes.

A step's output may hold escape sequences (ANSI colours, but also OSC sequences that
retitle a window, write the clipboard or forge a hyperlink, and cursor moves that
hide lines). On a terminal, every control character but newline and tab is shown
escaped (``\\x1b]0;...``), as ``jobserver jobs`` shows names, and bytes that are
not UTF-8 as ``\\xNN``; ``--raw`` writes the bytes as they are, as does any output
that is not a terminal (a pipe, a file).
"""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from jobserver.cli.views import printable
from jobserver.client import Client
from jobserver.exceptions import ConfigError, JobServerError

#: Seconds between polls of a followed step: from the first, growing by the factor
#: while nothing new comes, up to the last.
POLL_FIRST, POLL_FACTOR, POLL_MAX = 0.2, 1.5, 2.0
ACTIVE = ("READY", "RUNNING")


def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    logs = sub.add_parser("logs", help="print the full logs of a job's steps; -f follows "
                                       "a running step")
    logs.add_argument("id", help="the job's id")
    logs.add_argument("step", nargs="?", help="one step (default: every step, in order, "
                                              "each after a header)")
    logs.add_argument("--attempt", help="the step's attempt (default: its newest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="follow the step until its attempt ends")
    logs.add_argument("--raw", action="store_true",
                      help="write the output's bytes as they are, escape sequences too "
                           "(default on a terminal: control characters shown escaped)")
    client_options(logs)


def _positive(value: str, what: str) -> int:
    if not value.isdigit() or int(value) < 1 or int(value) > 2**63 - 1:
        raise ConfigError(f"{what} must be a positive whole number, not {value!r}")
    return int(value)


def run(args: argparse.Namespace, client: Client) -> int:
    """Print the logs the arguments ask for; bad arguments raise ConfigError (exit 2)."""
    job_id = _positive(args.id, "ID")
    attempt = _positive(args.attempt, "--attempt") if args.attempt is not None else None
    if attempt is not None and args.step is None:
        raise ConfigError("--attempt needs a STEP")
    escape = sys.stdout.isatty() and not args.raw
    printer = LogPrinter(client, sys.stdout.buffer, args.follow, escape=escape)
    try:
        if args.step is not None:
            printer.step(job_id, args.step, attempt)
        else:
            printer.job(job_id)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (| head): nothing more to do
        # What is still buffered goes nowhere, rather than failing again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


class TerminalText:
    """Step output as a terminal may show it: UTF-8 text with every control character
    but newline and tab escaped, bytes that are not UTF-8 as ``\\xNN``. Output comes
    in pieces cut anywhere: a character split between two is held until it is whole
    (or :meth:`end` says no more is coming)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")

    def __call__(self, data: bytes) -> bytes:
        return printable(self._decoder.decode(data), keep="\n\t").encode()

    def end(self) -> bytes:
        """What is held back, escaped; the decoder starts afresh."""
        held = printable(self._decoder.decode(b"", final=True), keep="\n\t").encode()
        self._decoder.reset()
        return held


class LogPrinter:
    """Writes logs to ``out`` as they come; with ``escape``, as :class:`TerminalText`."""

    def __init__(self, client: Client, out: IO[bytes], follow: bool,
                 sleep: Callable[[float], None] = time.sleep, escape: bool = False) -> None:
        self._client, self._out, self._follow, self._sleep = client, out, follow, sleep
        self._text = TerminalText() if escape else None
        self._last = b"\n"  # the last byte written, to start each header on a line

    def step(self, job_id: int, name: str, attempt: int | None) -> None:
        if self._follow and attempt is None and not self._wait_started(job_id, name)["attempt"]:
            raise JobServerError(f"step {name!r} of job {job_id} did not run")
        self._print_log(job_id, name, attempt)

    def job(self, job_id: int) -> None:
        for index, step in enumerate(self._client.job(job_id)["steps"]):
            if self._follow:
                step = self._wait_started(job_id, step["name"])
            self._header(step, first=index == 0)
            if step["attempt"]:
                self._print_log(job_id, step["name"], None)

    def _header(self, step: dict[str, Any], first: bool) -> None:
        what = (f"attempt {step['attempt']}, {step['state']}" if step["attempt"]
                else f"not run, {step['state']}")
        line = f"==> step {step['name']} ({what}) <==\n".encode()
        self._write((b"" if self._last == b"\n" else b"\n") + (b"" if first else b"\n") + line)

    def _print_log(self, job_id: int, name: str, attempt: int | None) -> None:
        """The attempt's log; with follow, until the attempt has ended."""
        offset, delay = 0, POLL_FIRST
        while True:
            with self._client.step_log(job_id, name, attempt, offset) as stream:
                attempt = stream.attempt  # the newest one, kept while following it
                before = offset
                for piece in stream:
                    self._write(self._text(piece) if self._text else piece)
                    offset += len(piece)
                complete = stream.complete
            if complete or not self._follow:
                if self._text is not None:
                    self._write(self._text.end())
                return
            delay = POLL_FIRST if offset > before else min(delay * POLL_FACTOR, POLL_MAX)
            self._sleep(delay)

    def _wait_started(self, job_id: int, name: str) -> dict[str, Any]:
        """The step as the API shows it once it has started, or once its job is no
        longer active (then with attempt 0 if it never started)."""
        delay = POLL_FIRST
        while True:
            job = self._client.job(job_id)
            step = next((s for s in job["steps"] if s["name"] == name), None)
            if step is None:
                raise JobServerError(f"job {job_id} has no step {name!r}")
            if step["attempt"] or job["state"] not in ACTIVE:
                return step
            self._sleep(delay)
            delay = min(delay * POLL_FACTOR, POLL_MAX)

    def _write(self, data: bytes) -> None:
        if data:
            self._out.write(data)
            self._out.flush()
            self._last = data[-1:]
