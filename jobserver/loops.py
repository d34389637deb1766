"""Background loops: one start/stop/join shape, and a supervisor for the required ones.

A node's work happens in a few long-lived threads: the heartbeat, the scheduler, the
runner's watcher, the group commit, the wake-up source, the PostgreSQL lock monitor
and one per scheduling listener. Each is a :class:`Loop`: ``start()`` runs it in a
daemon thread named after it, ``stop()`` asks it to end and returns at once, and
``join(timeout)`` waits for that.

A loop retries what it expects per round (an outage of the store or of the lock
service, :data:`~jobserver.exceptions.TRANSIENT`). Any other exception ends it: that
is a bug or a broken invariant, and a loop that kept going around it would hide it
(a node whose scheduler loop died went on heartbeating, so the cluster saw a live node
that scheduled nothing). The death of a *required* loop reaches the
:class:`Supervisor`, which tells the node once; the node then gives up its locks and
its presence, marks itself failed (:class:`FailureMark`, read by ``/healthz``) and
its process exits with a code of its own, so that the service manager restarts it.
An exception raised after ``stop()`` was asked for ends the loop quietly: a loop
being torn down is not a failing one.
"""

from __future__ import annotations

import ctypes
import json
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobserver.exceptions import TRANSIENT, LoopDied

log = logging.getLogger(__name__)

DeathCallback = Callable[["Loop", BaseException], None]


class Loop:
    """A named background thread with a uniform life: start, stop, join.

    Subclasses override :meth:`run` (which returns once :attr:`stopping` is set) and,
    when the loop waits on something other than :attr:`stopping`, :meth:`stop` to end
    that wait too. Or pass ``target`` (a callable that returns when told to stop) with
    the event it watches as ``stopping`` and ``on_stop`` to wake it.
    """

    #: Put before :attr:`name` in the thread's name.
    thread_prefix = ""

    def __init__(self, name: str, target: Callable[[], None] | None = None, *,
                 required: bool = True, stopping: threading.Event | None = None,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.name = name
        #: Whether this loop's death must take the node down (see :class:`Supervisor`).
        self.required = required
        self.stopping = stopping if stopping is not None else threading.Event()
        #: The exception that ended the loop, once it died of one.
        self.error: BaseException | None = None
        self._target = target
        self._on_stop = on_stop
        self._thread: threading.Thread | None = None
        self._on_death: list[DeathCallback] = []
        self._guard = threading.Lock()

    def run(self) -> None:
        """The loop's body; returns once :attr:`stopping` is set."""
        if self._target is None:
            raise NotImplementedError
        self._target()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=self.thread_prefix + self.name,
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end; returns at once (see :meth:`join`)."""
        self.stopping.set()
        if self._on_stop is not None:
            self._on_stop()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end; True once it has (or
        never started). From the loop's own thread it does not wait."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return thread is None or not thread.is_alive()
        thread.join(timeout)
        return not thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def on_death(self, callback: DeathCallback) -> None:
        """Call ``callback(loop, error)`` when an exception ends the loop before it
        was asked to stop; at once if that has happened already."""
        with self._guard:
            self._on_death.append(callback)
            error = self.error
        if error is not None:
            callback(self, error)

    def check(self) -> None:
        """Raise :class:`LoopDied` if this loop died: for a loop that cannot go on
        without another it started (the leader's work loop and its election)."""
        if self.error is not None:
            raise LoopDied(f"the {self.name} loop died: {self.error!r}") from self.error

    def _main(self) -> None:
        name_native_thread(self.thread_prefix + self.name)
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 - reported, then the thread ends
            if self.stopping.is_set():
                log.warning("loop %s raised while stopping: %r", self.name, exc, exc_info=exc)
                return
            log.critical("loop %s died: %r", self.name, exc, exc_info=exc)
            with self._guard:
                self.error = exc
                callbacks = list(self._on_death)
            for callback in callbacks:
                callback(self, exc)


class Periodic(Loop):
    """Calls ``tick`` every ``interval`` seconds until stopped. An outage
    (:data:`~jobserver.exceptions.TRANSIENT`, or ``expected``) is logged and the next
    round comes as usual; anything else ends the loop."""

    def __init__(self, name: str, interval: float, tick: Callable[[], None], *,
                 expected: tuple[type[BaseException], ...] = TRANSIENT,
                 required: bool = True) -> None:
        super().__init__(name, required=required)
        self.interval = interval
        self._tick = tick
        self._expected = expected

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self._tick()
            except self._expected as exc:
                log.warning("%s failed (%s: %s); will retry", self.name, type(exc).__name__, exc)


@dataclass(frozen=True)
class LoopDeath:
    """Which required loop died, and of what."""

    loop: str
    error: BaseException

    def describe(self) -> str:
        return f"the {self.loop} loop died: {type(self.error).__name__}: {self.error}"


class Supervisor:
    """Turns the first death of a required loop into one call of ``on_failure``.

    The call runs in the dying loop's thread (its own ``join`` then returns at once),
    so it may stop and join every other loop. A loop that is not required (a
    scheduling listener, whose deliveries have their own restart policy) is logged
    and left dead.
    """

    def __init__(self, on_failure: Callable[[LoopDeath], None]) -> None:
        self._on_failure = on_failure
        self._guard = threading.Lock()
        #: The death that took the node down; None while every required loop lives.
        self.failure: LoopDeath | None = None

    def watch(self, *loops: Loop) -> None:
        for loop in loops:
            loop.on_death(self._died)

    def _died(self, loop: Loop, error: BaseException) -> None:
        if not loop.required:
            log.error("loop %s died; the node goes on without it", loop.name)
            return
        with self._guard:
            if self.failure is not None:
                return
            self.failure = LoopDeath(loop.name, error)
        try:
            self._on_failure(self.failure)
        except Exception:  # noqa: BLE001 - the failure is recorded; the process exits
            log.exception("tearing the node down after the %s loop died failed", loop.name)


class FailureMark:
    """A file in the data directory saying that a node gave up after a loop died.

    The node writes it before it tears down; its API processes (gunicorn children
    that share no memory with it) find it with one ``stat`` per ``/healthz``, which
    then answers 503. A node clears it once it holds its presence lock again, so a
    restarted node is healthy and a second process with the same id cannot clear it.
    """

    def __init__(self, data_dir: Path, node_id: str) -> None:
        safe = node_id.replace("/", "_").replace(":", "_")
        self.path = data_dir / "health" / f"{safe}.failed"

    def write(self, death: LoopDeath) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"loop": death.loop, "error": death.describe()}))
        except OSError:
            log.exception("could not write %s", self.path)

    def read(self) -> str | None:
        """What failed, or None while the node is not marked failed."""
        try:
            return json.loads(self.path.read_text())["error"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return "the node failed"  # a mark half written, or unreadable: still a mark

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


#: prctl's option that names the calling thread (Linux, ``<linux/prctl.h>``).
PR_SET_NAME = 15


def name_native_thread(name: str) -> None:
    """Give the calling thread ``name`` in the operating system too (its first 15
    bytes, Linux only), so that ``top -H``, ``ps -L`` and ``/proc/<pid>/task/*/comm``
    tell a node's loops apart; best effort."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass
