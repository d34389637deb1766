"""The lock-backend interface every backend implements.

A lock only says who *should* act; the store decides who *may*. Every lease carries a
``fence``: an integer that grows with each acquisition of the same key, written on
every job a node claims under it, so that a node which lost its lease without
noticing (paused, partitioned, expired) has its later writes refused by the store.

Semantics follow ``threading.Lock`` where they can: ``acquire(blocking, timeout)``
returns a lease or ``None``; a lease is a context manager. Unlike a thread lock a lease
can be *lost* (session expiry, dropped connection): the backend then marks it invalid
and calls its on-lost callbacks. Loss is exposed, never hidden.
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


class Lease:
    """A held lock. Backends subclass it and implement :meth:`_release`.

    Read ``fence`` while the lease is held; a backend may draw it lazily.
    """

    def __init__(self, key: str, fence: int | Callable[[], int]) -> None:
        """``fence`` is the token, or a callable that draws it on first use."""
        self.key = key
        self._fence = fence if isinstance(fence, int) else None
        self._draw_fence = None if isinstance(fence, int) else fence
        self._valid = True
        self._callbacks: list[LostCallback] = []
        self._guard = threading.Lock()

    @property
    def fence(self) -> int:
        """Grows with every acquisition of the same key; written on every claim."""
        if self._fence is None:
            if not self._valid:
                raise LockError(f"lease {self.key} ended before its fence was read")
            self._fence = self._draw_fence()  # type: ignore[misc]
        return self._fence

    def is_valid(self) -> bool:
        """True while the lease is held; False once released or lost."""
        return self._valid

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` (from a backend thread) if the lease is lost.

        Callbacks must be quick and must not call the lock backend themselves.
        """
        with self._guard:
            lost = not self._valid
            self._callbacks.append(callback)
        if lost:
            callback(self)

    def release(self) -> None:
        """Give the lock up. Idempotent; releasing a lost lease is a no-op."""
        with self._guard:
            if not self._valid:
                return
            self._valid = False
        self._release()

    def mark_lost(self, reason: str) -> None:
        """Backends call this when the lock is gone without a release."""
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

    def _release(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "valid" if self._valid else "invalid"
        return f"<{type(self).__name__} {self.key} fence={self._fence} {state}>"


class LockBackend(ABC):
    """One coordination service: locks, presence checks and leader election."""

    #: The name used in ``lock.backend``.
    name: str = ""
    #: True when fences are drawn from the store's epoch counters (file, postgres),
    #: False when the backend has its own (ZooKeeper's czxid, memory).
    fences_from_store: bool = False

    @abstractmethod
    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        """Take the lock ``key``.

        ``blocking=False`` tries once. Otherwise wait up to ``timeout`` seconds
        (forever if None). Returns the lease, or None if not acquired in time.
        """

    @abstractmethod
    def is_held(self, key: str) -> bool | None:
        """Whether anyone (this process included) holds ``key``; None if unknown.

        Used to tell dead nodes from live ones: each node holds ``node/<id>`` for its
        lifetime, and the backend frees it when the node's process or session dies.
        """

    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        """Become leader of ``name``: a lock on ``election/<name>`` plus the identity.

        The default builds election on :meth:`acquire`; backends with a native
        election recipe may override.
        """
        lease = self.acquire(f"election/{name}", blocking=blocking, timeout=timeout)
        if lease is not None:
            self._publish_leader(name, identity, lease)
        return lease

    def can_claim(self) -> bool:
        """False while the coordination session is uncertain (ZooKeeper SUSPENDED):
        schedulers then claim nothing new but let running jobs go on."""
        return True

    @abstractmethod
    def leader(self, name: str) -> str | None:
        """The identity of the current leader of ``name``, or None."""

    @abstractmethod
    def _publish_leader(self, name: str, identity: str, lease: Lease) -> None:
        """Record ``identity`` as the holder of the election lease."""

    def abort_waits(self) -> None:
        """The node is stopping: calls waiting for an unreachable coordination service
        give up now (they raise :class:`LockError` or return None) instead of waiting
        for it to come back. Leases still held are left to :meth:`close`.

        The default does nothing: it suits backends whose every wait ends within the
        timeout its caller gave.
        """

    def close(self) -> None:
        """Release everything and drop connections; leases become invalid."""

    def loops(self) -> list[Loop]:
        """The backend's background loops (a connection monitor), for the node to
        supervise: one that dies takes the node down. The default has none."""
        return []
