"""The lock-backend interface every backend implements.

A lock only says who *should* act; the store decides who *may*. Every lease carries a
``fence``: an integer that grows with each acquisition of the same key, written on
every job a node claims under it, so that a node which lost its lease without
noticing (paused, partitioned, expired) has its later writes refused by the store.
The store can refuse them only if it knows the newest fence of every key, so drawing
a fence always records it there: backends are given the store's recorder when they
are built (:data:`DrawFence` or :data:`RecordFence`), and callers never record one.

Semantics follow ``threading.Lock`` where they can: ``acquire(blocking, timeout)``
returns a lease or ``None``; a lease is a context manager. Unlike a thread lock a lease
can be *lost* (session expiry, dropped connection, a newer lease of its key): the
backend then marks it invalid and calls its on-lost callbacks. Loss is exposed, never
hidden.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobserver.exceptions import LockError

if TYPE_CHECKING:
    from jobserver.loops import Loop

log = logging.getLogger(__name__)

LostCallback = Callable[["Lease"], None]

#: ``draw(key, holder)``: a fence larger than any drawn or recorded for ``key`` before,
#: recorded as the newest with ``holder``. Given to backends without a version of
#: their own (file, postgres); the store's ``epochs.bump``.
DrawFence = Callable[[str, str], int]

#: ``record(key, fence, holder)``: record a backend's own fence as the newest of
#: ``key``; False, recording nothing, if a larger one is recorded already. Given to
#: backends with a version of their own (ZooKeeper's ``czxid``); the store's
#: ``epochs.advance``.
RecordFence = Callable[[str, int, str], bool]


def election_key(name: str) -> str:
    """The lock a leader of ``name`` holds."""
    return f"election/{name}"


class Lease(ABC):
    """A held lock. Backends subclass it and implement :meth:`_draw_fence` and
    :meth:`_release`; everything else (validity, loss callbacks, idempotent release,
    the context manager) is shared.

    All methods are safe to call from any thread.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self._fence: int | None = None
        self._valid = True
        self._callbacks: list[LostCallback] = []
        self._guard = threading.Lock()
        # One draw at a time; re-entrant, so that a failed draw's own lost callbacks
        # cannot deadlock on it.
        self._drawing = threading.RLock()

    @property
    def fence(self) -> int:
        """This lease's fencing token, recorded in the store as the newest of its key.

        Drawn (and so recorded) on first read, and the same on every read after, so
        that locks that never fence a write (presence, schema upgrade) cost no store
        write. Read it first while the lease is held and outside any store
        transaction (the draw is a store write of its own: on SQLite, one nested in
        another would wait for itself), before any write that relies on it.

        Raises :class:`LockError` when the lease cannot fence anything: it ended
        before the fence was drawn, or it was found lost, or superseded by a newer
        lease of its key, while drawing. It is then invalid, its on-lost callbacks
        have run and its lock is given up, and every later read raises too. Store
        errors from the recorder propagate, and the next read draws again.
        """
        with self._drawing:
            if self._fence is None:
                if not self._valid:
                    raise LockError(f"lease {self.key} ended before its fence was drawn")
                self._fence = self._draw_fence()
            return self._fence

    def is_valid(self) -> bool:
        """True while the lease is held; False once released or lost. Never blocks."""
        return self._valid

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` once if the lease is lost (not when released).

        Registered after the loss, the callback runs at once in this thread; otherwise
        it runs in whichever thread notices the loss (a backend's session thread, a
        fence draw). Callbacks must be quick, and must neither call the lock backend
        nor read :attr:`fence` (a draw under way may be waiting for the thread that
        runs them)."""
        with self._guard:
            lost = not self._valid
            self._callbacks.append(callback)
        if lost:
            callback(self)

    def release(self) -> None:
        """Give the lock up. Idempotent; releasing a lost lease is a no-op.

        Never raises for an unreachable lock service: the lock then goes with the
        session that holds it (see each backend).
        """
        with self._guard:
            if not self._valid:
                return
            self._valid = False
        self._release()

    def mark_lost(self, reason: str) -> None:
        """Backends call this when the lock is gone without a release: the lease
        becomes invalid and its on-lost callbacks run, in the calling thread."""
        with self._guard:
            if not self._valid:
                return
            self._valid = False
            callbacks = list(self._callbacks)
        log.warning("lock %s (fence %s) lost: %s", self.key, self._fence, reason)
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # a broken callback must not hide the loss from others
                log.exception("on-lost callback for %s failed", self.key)

    @abstractmethod
    def _draw_fence(self) -> int:
        """Draw this lease's fence and record it in the store as the newest of its key.

        Called on a read of :attr:`fence` while none is drawn and the lease is valid,
        one call at a time. Raise :class:`LockError` (after :meth:`mark_lost` and
        giving the lock up) if the lock turns out lost or superseded, so that no
        write is fenced with it.
        """

    @abstractmethod
    def _release(self) -> None:
        """Free the lock in the lock service. Called at most once, only for a lease
        that was valid; must not raise for an unreachable service."""

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "valid" if self._valid else "invalid"
        return f"<{type(self).__name__} {self.key} fence={self._fence} {state}>"


class LockBackend(ABC):
    """One coordination service: locks, presence checks and leader election.

    A backend is shared by every thread of a node; all its methods are thread-safe.
    Lock service failures surface as :class:`LockError` (or, where a method says so,
    as None for "unknown"), never as the service library's own exceptions.
    """

    #: The name used in ``lock.backend``.
    name: str = ""

    @property
    def dead_holder_grace(self) -> float:
        """The longest, in seconds, the lock service may go on holding the locks of a
        process that died without releasing them (a session that has yet to expire).

        A node restarted after a crash waits this long for its own presence lock
        before it takes the id for another live node's. The default, 0, suits
        backends whose locks die with the process (file, memory).
        """
        return 0.0

    @abstractmethod
    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        """Take the lock ``key`` for this node.

        ``blocking=False`` tries once; otherwise wait up to ``timeout`` seconds
        (forever if None). Returns the lease, or None if the lock was not free in
        time. A lock is exclusive across processes and within one: a second
        acquisition of a key this backend holds waits (or fails) like any other.
        Blocks the calling thread while waiting.

        Raises :class:`LockError` when the lock service cannot be reached.
        """

    @abstractmethod
    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        """Become leader of ``name``: take the lock :func:`election_key` of ``name``
        and make ``identity`` what :meth:`leader` answers while it is held.

        Waits as :meth:`acquire` does and returns the same: the lease, or None. The
        lease's fence is recorded with ``identity`` as its holder. Raises
        :class:`LockError` when the lock service cannot be reached.
        """

    @abstractmethod
    def is_held(self, key: str) -> bool | None:
        """Whether anyone (this process included) holds ``key``; None if unknown.

        Used to tell dead nodes from live ones: each node holds ``node/<id>`` for its
        lifetime, and the backend frees it when the node's process or session dies.
        Callers must treat None as "alive", so a backend answers None rather than
        False whenever it cannot be sure. Never raises for an unreachable service.
        """

    @abstractmethod
    def leader(self, name: str) -> str | None:
        """The identity of the current leader of ``name``; None if nobody holds its
        election lock, or if the lock service cannot tell."""

    def can_claim(self) -> bool:
        """False while the coordination session is uncertain (ZooKeeper SUSPENDED):
        schedulers then claim nothing new but let running jobs go on. Never blocks.

        The default, always True, suits backends that learn of a lost session only by
        failing a call (file, postgres).
        """
        return True

    def abort_waits(self) -> None:
        """The node is stopping: calls waiting for an unreachable coordination service
        give up now (they raise :class:`LockError` or return None) instead of waiting
        for it to come back. Leases still held are left to :meth:`close`.

        The default does nothing: it suits backends whose every wait ends within the
        timeout its caller gave.
        """

    def close(self) -> None:
        """Release every lease and drop connections; leases become invalid. Called
        once, when the node stops; returns within a session timeout even while the
        lock service is unreachable.

        The default does nothing: it suits backends that hold no connection and whose
        locks the node's own stop releases or its process's exit frees (file, memory).
        """

    def loops(self) -> list[Loop]:
        """The backend's background loops (a connection monitor), for the node to
        supervise: one that dies takes the node down. The default has none."""
        return []
