"""In-process locks for unit tests: no liveness, but loss can be simulated."""

from __future__ import annotations

import threading
from collections import defaultdict

from locks.base import Lease, LockBackend


class MemoryLease(Lease):
    def __init__(self, key: str, fence: int, backend: MemoryLockBackend) -> None:
        super().__init__(key, fence)
        self._backend = backend

    def _release(self) -> None:
        self._backend._free(self)


class MemoryLockBackend(LockBackend):
    name = "memory"

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders: dict[str, MemoryLease] = {}
        self._fences: defaultdict[str, int] = defaultdict(int)
        self._leaders: dict[str, str] = {}

    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        with self._cond:
            if blocking:
                self._cond.wait_for(lambda: key not in self._holders, timeout)
            if key in self._holders:
                return None
            self._fences[key] += 1
            lease = MemoryLease(key, self._fences[key], self)
            self._holders[key] = lease
            return lease

    def _free(self, lease: MemoryLease) -> None:
        with self._cond:
            if self._holders.get(lease.key) is lease:
                del self._holders[lease.key]
                self._cond.notify_all()

    def is_held(self, key: str) -> bool | None:
        with self._cond:
            return key in self._holders

    def expire(self, key: str) -> None:
        """Simulate a lost session: the holder's lease is invalidated and freed."""
        with self._cond:
            lease = self._holders.pop(key, None)
            self._cond.notify_all()
        if lease is not None:
            lease.mark_lost("expired by test")

    def _publish_leader(self, name: str, identity: str, lease: Lease) -> None:
        with self._cond:
            self._leaders[name] = identity

    def leader(self, name: str) -> str | None:
        with self._cond:
            if f"election/{name}" not in self._holders:
                return None
            return self._leaders.get(name)
