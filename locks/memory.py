"""In-process locks for unit tests: no liveness, but loss can be simulated.

Fences come from a counter per key, as ZooKeeper's come from its ``czxid``, and are
recorded with the injected :data:`~locks.base.RecordFence`. Built without one, the
counter is the only record: right for tests that fence no store write.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from jobserver.exceptions import LockError
from locks.base import Lease, LockBackend, RecordFence, election_key


def record_nowhere(key: str, fence: int, holder: str) -> bool:
    """A :data:`~locks.base.RecordFence` for locks used without a store (tests): every
    fence counts as the newest. Never for a node: its claims would go unfenced."""
    return True


class MemoryLease(Lease):
    def __init__(self, key: str, fence: int, holder: str, backend: MemoryLockBackend) -> None:
        super().__init__(key)
        self.holder = holder
        self._own_fence = fence
        self._backend = backend

    def _draw_fence(self) -> int:
        if self._backend._record_fence(self.key, self._own_fence, self.holder):
            return self._own_fence
        self._backend._lose(self, f"a lease newer than fence {self._own_fence} is recorded")
        raise LockError(f"lease {self.key}: fence {self._own_fence} is superseded")

    def _release(self) -> None:
        self._backend._free(self)


class MemoryLockBackend(LockBackend):
    name = "memory"

    def __init__(self, record_fence: RecordFence = record_nowhere, identity: str = "") -> None:
        self._record_fence = record_fence
        self._identity = identity
        self._cond = threading.Condition()
        self._holders: dict[str, MemoryLease] = {}
        self._fences: defaultdict[str, int] = defaultdict(int)

    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        return self._take(key, self._identity, blocking, timeout)

    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        """The lease names its holder, which :meth:`leader` reads."""
        return self._take(election_key(name), identity, blocking, timeout)

    def _take(self, key: str, holder: str, blocking: bool,
              timeout: float | None) -> Lease | None:
        with self._cond:
            if blocking:
                self._cond.wait_for(lambda: key not in self._holders, timeout)
            if key in self._holders:
                return None
            self._fences[key] += 1
            lease = MemoryLease(key, self._fences[key], holder, self)
            self._holders[key] = lease
            return lease

    def _free(self, lease: MemoryLease) -> None:
        with self._cond:
            if self._holders.get(lease.key) is lease:
                del self._holders[lease.key]
                self._cond.notify_all()

    def _lose(self, lease: MemoryLease, reason: str) -> None:
        self._free(lease)
        lease.mark_lost(reason)

    def is_held(self, key: str) -> bool | None:
        with self._cond:
            return key in self._holders

    def expire(self, key: str) -> None:
        """Simulate a lost session: the holder's lease is invalidated and freed."""
        with self._cond:
            lease = self._holders.get(key)
        if lease is not None:
            self._lose(lease, "expired by test")

    def leader(self, name: str) -> str | None:
        with self._cond:
            lease = self._holders.get(election_key(name))
            return lease.holder if lease is not None else None
