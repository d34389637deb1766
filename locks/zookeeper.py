"""ZooKeeper locks with kazoo's ``Lock`` recipe (ephemeral sequential nodes).

Paths live under ``zookeeper.root``: ``<root>/locks/<key>``. The fence is the lock
node's ``czxid``, which ZooKeeper makes strictly increasing across the ensemble.

Session states follow kazoo's advice: SUSPENDED (connection lost, the session may
survive) stops new claims but keeps leases; LOST (session expired) marks every lease
lost at once. The state listener only flips flags and calls the lost callbacks; it
never calls ZooKeeper (kazoo issue 381). After a LOST the client reconnects with a new
session and schedulers acquire afresh.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from urllib.parse import quote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from jobserver.exceptions import LockError
from locks.base import Lease, LockBackend

log = logging.getLogger(__name__)


class ZooKeeperLease(Lease):
    def __init__(self, key: str, fence: int, lock: Any, backend: ZooKeeperLockBackend) -> None:
        super().__init__(key, fence)
        self._lock = lock
        self._backend = backend

    def _release(self) -> None:
        self._backend._forget(self)
        try:
            self._lock.release()
        except KazooException as exc:  # the session is gone; so is the ephemeral node
            log.info("releasing %s: %s", self.key, exc)


class ZooKeeperLockBackend(LockBackend):
    name = "zookeeper"

    def __init__(self, hosts: str, identity: str, root: str = "/jobserver",
                 session_timeout: float = 6.0) -> None:
        self._identity = identity
        self._root = "/" + root.strip("/")
        self._client = KazooClient(hosts=hosts, timeout=session_timeout)
        self._leases: dict[str, ZooKeeperLease] = {}
        self._mutex = threading.Lock()
        self._connected = threading.Event()
        self._client.add_listener(self._on_state)
        try:
            self._client.start(timeout=max(5.0, session_timeout))
        except KazooTimeoutError:
            self._client.close()
            raise LockError(f"cannot reach ZooKeeper at {hosts}") from None
        self._connected.set()

    def _path(self, key: str) -> str:
        return f"{self._root}/locks/{quote(key, safe='')}"

    # -- session states (no ZooKeeper calls in here) ---------------------------------------
    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
            return
        self._connected.clear()
        if state == KazooState.LOST:
            with self._mutex:
                leases = list(self._leases.values())
                self._leases.clear()
            for lease in leases:
                lease.mark_lost("ZooKeeper session expired")
        else:
            log.warning("ZooKeeper connection suspended: claims pause until it returns")

    def can_claim(self) -> bool:
        return self._connected.is_set()

    # -- the interface -------------------------------------------------------------------
    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        return self._take(key, self._identity, blocking, timeout)

    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        return self._take(f"election/{name}", identity, blocking, timeout)

    def _take(self, key: str, identity: str, blocking: bool,
              timeout: float | None) -> Lease | None:
        with self._mutex:
            if key in self._leases and not blocking:
                return None
        lock = self._client.Lock(self._path(key), identifier=identity)
        try:
            if not lock.acquire(blocking=blocking, timeout=timeout):
                return None
            stat = self._client.exists(f"{lock.path}/{lock.node}")
        except LockTimeout:
            return None
        except (KazooException, KazooTimeoutError) as exc:
            lock.cancel()
            raise LockError(f"ZooKeeper lock {key}: {exc!r}") from None
        if stat is None:
            lock.release()
            raise LockError(f"ZooKeeper lock {key}: node vanished right after acquisition")
        lease = ZooKeeperLease(key, stat.czxid, lock, self)
        with self._mutex:
            self._leases[key] = lease
        return lease

    def _forget(self, lease: ZooKeeperLease) -> None:
        with self._mutex:
            if self._leases.get(lease.key) is lease:
                del self._leases[lease.key]

    def is_held(self, key: str) -> bool | None:
        try:
            return bool(self._client.get_children(self._path(key)))
        except NoNodeError:
            return False
        except (KazooException, KazooTimeoutError):
            return None

    def _publish_leader(self, name: str, identity: str, lease: Lease) -> None:
        """The lock node's data is the identity already (kazoo's ``identifier``)."""

    def leader(self, name: str) -> str | None:
        try:
            contenders = self._client.Lock(self._path(f"election/{name}")).contenders()
        except (KazooException, KazooTimeoutError):
            return None
        return contenders[0] if contenders else None

    def lock_children(self, key: str) -> int:
        """How many nodes sit under a lock path (tests check none are left behind)."""
        try:
            return len(self._client.get_children(self._path(key)))
        except NoNodeError:
            return 0

    def close(self) -> None:
        with self._mutex:
            leases = list(self._leases.values())
        for lease in leases:
            lease.release()
        self._client.stop()
        self._client.close()
