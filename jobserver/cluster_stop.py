"""Stopping ``jobserver cluster``: the launcher's signals and its nodes' drain.

The first SIGINT, SIGTERM or SIGHUP (Ctrl-C in the terminal, a service manager, a
closed terminal) asks the launcher to stop. It sends each node one SIGTERM, and each
node drains: it claims nothing more, lets its running jobs finish for up to
``server.drain_timeout`` (counted from the signal) and re-queues those still running
then, each with a ``node N drained`` event. The launcher waits for that and a margin
(:data:`STOP_MARGIN`), which is longer than any drain, and meanwhile says what each
draining node still runs and how long its drain has left, every
:data:`PROGRESS_EVERY` seconds. It reads that from the store, because a node's API
stops as its drain begins.

A second signal stops at once: every node still running gets its second SIGTERM and
exits without draining (its jobs stay RUNNING until the next start re-queues them),
and any node still there :data:`HALT_GRACE` seconds later is killed; the launcher
names the nodes that did not drain and exits 0, since the user asked for it
(:attr:`NodeStop.asked_at_once`). The end of the margin, which only a node stuck in
its stop reaches, stops the same way, but the launcher exits 3: nobody asked.

SIGINT gets this handler even when the launcher inherited it ignored (a shell starts
background commands of a script so): the launcher must still stop its nodes. The
handlers only count signals, and the launcher reads the count between steps, so no
exception lands in the middle of starting a node, and no handler takes a lock.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jobserver.exceptions import StoreError
from jobserver.serve import EXIT_NOT_DRAINED
from jobserver.store import Store

#: Signals that stop the launcher: Ctrl-C, a service manager's stop, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Beyond ``server.drain_timeout``: a node's stop after its drain (the API's stop, the
#: give-back of cancelled jobs, its loops' ends) takes a few seconds at most.
STOP_MARGIN = 20.0
#: How often the launcher says how the drains go.
PROGRESS_EVERY = 5.0
#: How long nodes sent a second SIGTERM get to exit before they are killed.
HALT_GRACE = 3.0
POLL = 0.1


class StopSignals:
    """Counts the stop signals the launcher gets; it asks :attr:`stop_asked` and
    :attr:`hurry_asked` between its steps."""

    def __init__(self) -> None:
        self.received = 0
        self._at_stop: int | None = None  # signals received when the stop began

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.received += 1  # only this: a handler may run while any lock is held

    @property
    def stop_asked(self) -> bool:
        return self.received > 0

    def stopping(self) -> None:
        """The stop begins: any signal from now on (a second one) hurries it."""
        if self._at_stop is None:
            self._at_stop = self.received

    @property
    def hurry_asked(self) -> bool:
        # A signal after the one that began the stop; or any, if it began without one.
        return self._at_stop is not None and self.received > min(self._at_stop, 1)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass
class NodeStop:
    """Stops the nodes of a local cluster and reports how their drains go.

    ``processes``: node index -> process; ``describe_exit`` words a node's exit.
    """

    processes: dict[int, subprocess.Popen[bytes]]
    store_url: str
    drain_timeout: float
    signals: StopSignals
    describe_exit: Callable[[int, int], str]
    #: whether a node was halted (second signal) or killed rather than drained
    hurried: bool = False
    #: whether that was because a second signal asked for it (not a stuck node)
    asked_at_once: bool = False
    _live: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self) -> None:
        self.signals.stopping()
        self._live = {index: process for index, process in self.processes.items()
                      if process.poll() is None}
        if not self._live:
            return
        began = time.monotonic()
        for process in self._live.values():
            process.send_signal(signal.SIGTERM)
        print(f"stopping {plural(len(self._live), 'node')}: each finishes its running jobs "
              f"for up to {self.drain_timeout:g} s (server.drain_timeout), then re-queues "
              "the rest; a second Ctrl-C stops at once", flush=True)
        self._wait(began)

    def _wait(self, began: float) -> None:
        store = Store(self.store_url, pool_size=1, notify=False)
        try:
            next_report = began
            while self._reap():
                now = time.monotonic()
                if self.signals.hurry_asked:
                    self.asked_at_once = True
                    return self._halt("second signal: stopping at once")
                if now - began > self.drain_timeout + STOP_MARGIN:
                    return self._halt(f"{now - began:.0f} s after SIGTERM: stopping now")
                if now >= next_report:
                    self._report(store, self.drain_timeout - (now - began))
                    next_report += PROGRESS_EVERY
                time.sleep(POLL)
        finally:
            store.dispose()

    def _reap(self) -> bool:
        """Report the nodes that exited; True while some still run."""
        for index, process in list(self._live.items()):
            if process.poll() is not None:
                print(self._exit_line(index, process.returncode), flush=True)
                del self._live[index]
        return bool(self._live)

    def _exit_line(self, index: int, code: int) -> str:
        if code == EXIT_NOT_DRAINED and not self.hurried:  # the drain ran out of time
            return (f"node-{index} exited with {code}: its drain timed out; the jobs it "
                    "still ran were re-queued")
        return self.describe_exit(index, code)

    def _report(self, store: Store, left: float) -> None:
        """A line for each node that still runs jobs: how many, and its time left."""
        for index in self._live:
            node = f"node-{index}"
            try:
                running = len(store.runs.running_on(node))
            except StoreError:
                print(f"{node}: draining ({left:.0f} s left; its jobs cannot be read now)",
                      flush=True)
                continue
            if not running:
                continue
            jobs = plural(running, "job")
            print(f"{node}: draining, {jobs} running, {left:.0f} s left" if left > 0 else
                  f"{node}: drain time is up, re-queuing {jobs}", flush=True)

    def _halt(self, why: str) -> None:
        """Second SIGTERM to every node still running; SIGKILL after ``HALT_GRACE``."""
        self.hurried = True
        undrained = ", ".join(f"node-{index}" for index in sorted(self._live))
        print(f"{why}; the nodes still running exit without draining, and the jobs they "
              "run are re-queued when the cluster starts again", flush=True)
        self._stop_now()
        if self.asked_at_once:
            print(f"stopped at once, as asked: {undrained} did not drain", flush=True)

    def _stop_now(self) -> None:
        for process in self._live.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + HALT_GRACE
        while self._reap() and time.monotonic() < deadline:
            time.sleep(POLL)
        for index, process in self._live.items():
            process.kill()
            print(self.describe_exit(index, process.wait()), flush=True)
        self._live = {}
