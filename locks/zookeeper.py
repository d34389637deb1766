"""ZooKeeper locks with kazoo's ``Lock`` recipe (ephemeral sequential nodes).

Paths live under ``zookeeper.root``: ``<root>/locks/<key>``. The fence is the lock
node's ``czxid``, which ZooKeeper makes strictly increasing across the ensemble.

With ``zookeeper.auth`` ("digest:USER:PASSWORD") the client authenticates as that
user and every node it creates (the root, ``locks/`` and the lock nodes) carries a
digest ACL granting that user everything and nobody else anything: other clients can
neither read nor delete the locks. Digest credentials cross the network in clear text
unless the ensemble uses TLS.

Session states follow kazoo's advice: SUSPENDED (connection lost, the session may
survive) stops new claims but keeps leases; LOST (session expired) marks every lease
lost at once, and so does a suspension longer than ``LOCAL_EXPIRY`` of the session
timeout, since a cut-off client hears of its expiry only when it reconnects. The state
listener only flips flags, starts a timer and calls the lost callbacks; it never calls
ZooKeeper (kazoo issue 381). After a LOST the client reconnects with a new session and
schedulers acquire afresh.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from urllib.parse import quote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from jobserver.exceptions import LockError
from locks.base import Lease, LockBackend, RecordFence, election_key

log = logging.getLogger(__name__)

#: The share of the session timeout after which a suspended session counts as lost
#: locally. A dropped connection is reported at once, about a whole timeout before the
#: server can expire the session, so this leaves a third of it to stop the jobs; a
#: silent one is reported only after kazoo's read timeout (two thirds), so there this
#: narrows the window in which another node holds our locks but does not close it.
LOCAL_EXPIRY = 2 / 3


def digest_acl_options(auth: str | None) -> dict[str, Any]:
    """KazooClient options for ``digest:USER:PASSWORD``: authenticate, and create nodes
    that only this user may read, write, create under, delete or administer."""
    if not auth:
        return {}
    scheme, _, credential = auth.partition(":")
    user, _, password = credential.partition(":")
    if scheme != "digest" or not user or not password:
        raise LockError("zookeeper.auth must be 'digest:USER:PASSWORD'")
    return {"auth_data": [("digest", f"{user}:{password}")],
            "default_acl": [make_digest_acl(user, password, all=True)]}


class ZooKeeperLease(Lease):
    """The fence is the lock node's ``czxid``, recorded in the store on first use. A
    larger one recorded already means another node held the lock after this one
    queued for it (this session lost it unnoticed, or the ensemble was replaced): the
    lease is lost then, and its node deleted so that the lock is free for others."""

    def __init__(self, key: str, czxid: int, holder: str, lock: Any,
                 backend: ZooKeeperLockBackend) -> None:
        super().__init__(key)
        self._czxid = czxid
        self._holder = holder
        self._lock = lock
        self._backend = backend

    def _draw_fence(self) -> int:
        if self._backend._record_fence(self.key, self._czxid, self._holder):
            return self._czxid
        self._backend._forget(self)
        self.mark_lost(f"a lease newer than fence {self._czxid} is recorded")
        self._backend._delete_lock_node(self._lock, self.key)
        raise LockError(f"lease {self.key}: fence {self._czxid} is superseded")

    def _release(self) -> None:
        self._backend._forget(self)
        self._backend._delete_lock_node(self._lock, self.key)


class ZooKeeperLockBackend(LockBackend):
    name = "zookeeper"

    def __init__(self, hosts: str, identity: str, record_fence: RecordFence,
                 root: str = "/jobserver", session_timeout: float = 6.0,
                 auth: str | None = None) -> None:
        self._identity = identity
        self._record_fence = record_fence
        self._root = "/" + root.strip("/")
        # Reconnect at least every second: kazoo's default backoff grows to an hour,
        # so after an outage of N seconds a client might wait about N more before it
        # tried again, long enough for its session (and the leadership or the locks it
        # holds) to expire on a server that came back long before.
        self._client = KazooClient(hosts=hosts, timeout=session_timeout,
                                   connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
                                   **digest_acl_options(auth))
        self._leases: dict[str, ZooKeeperLease] = {}
        self._abandoned: list[Any] = []  # failed acquisitions to clean up (see _abandon)
        self._session_timeout = session_timeout
        self._expiry_timer: threading.Timer | None = None
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
            self._stop_expiry_timer()
            return
        self._connected.clear()
        if state == KazooState.LOST:
            self._stop_expiry_timer()
            self._lose_all("ZooKeeper session expired")
        else:
            log.warning("ZooKeeper connection suspended: claims pause until it returns")
            self._start_expiry_timer()

    def _start_expiry_timer(self) -> None:
        """A client cut off from ZooKeeper only learns that its session expired when it
        reconnects; meanwhile the server frees its locks and other nodes take them. So
        a suspension that lasts ``LOCAL_EXPIRY`` of the session timeout counts as LOST
        here and now (as in Curator), and jobs run under those locks are stopped."""
        with self._mutex:
            if self._expiry_timer is None:
                self._expiry_timer = threading.Timer(
                    self._session_timeout * LOCAL_EXPIRY, self._suspended_too_long)
                self._expiry_timer.daemon = True
                self._expiry_timer.start()

    def _stop_expiry_timer(self) -> None:
        with self._mutex:
            timer, self._expiry_timer = self._expiry_timer, None
        if timer is not None:
            timer.cancel()

    def _suspended_too_long(self) -> None:
        with self._mutex:
            self._expiry_timer = None
        if not self._connected.is_set():
            seconds = self._session_timeout * LOCAL_EXPIRY
            self._lose_all(f"no word from ZooKeeper for {seconds:.1f} s: "
                           "the session may have expired")

    def _lose_all(self, reason: str) -> None:
        with self._mutex:
            leases = list(self._leases.values())
            self._leases.clear()
            # If the session survives after all, their nodes must go (see _abandon).
            self._abandoned.extend(lease._lock for lease in leases)
        for lease in leases:
            lease.mark_lost(reason)

    def can_claim(self) -> bool:
        return self._connected.is_set()

    # -- the interface -------------------------------------------------------------------
    @property
    def dead_holder_grace(self) -> float:
        """A killed process's ephemeral lock nodes live on until its session expires."""
        return self._session_timeout

    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        return self._take(key, self._identity, blocking, timeout)

    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        """The lock node's data is ``identity`` (kazoo's ``identifier``), which
        :meth:`leader` reads from the first contender."""
        return self._take(election_key(name), identity, blocking, timeout)

    def _take(self, key: str, identity: str, blocking: bool,
              timeout: float | None) -> Lease | None:
        with self._mutex:
            if key in self._leases and not blocking:
                return None
        if self._abandoned and self._connected.is_set():
            self._sweep()
        lock = self._client.Lock(self._path(key), identifier=identity)
        try:
            if not lock.acquire(blocking=blocking, timeout=timeout):
                self._abandon(lock)
                return None
            stat = self._client.exists(f"{lock.path}/{lock.node}")
        except LockTimeout:
            self._abandon(lock)
            return None
        except (KazooException, KazooTimeoutError) as exc:
            lock.cancel()
            self._abandon(lock, always=True)
            raise LockError(f"ZooKeeper lock {key}: {exc!r}") from None
        if stat is None:
            lock.release()
            raise LockError(f"ZooKeeper lock {key}: node vanished right after acquisition")
        lease = ZooKeeperLease(key, stat.czxid, identity, lock, self)
        with self._mutex:
            self._leases[key] = lease
        return lease

    def _abandon(self, lock: Any, always: bool = False) -> None:
        """Remember a failed acquisition whose contender node may outlive it.

        kazoo deletes the node of a failed acquisition, but not while the connection
        is down; if the session then survives, the node stays in the queue with no
        lease behind it and every later contender, this process's own included, waits
        behind it forever. :meth:`_sweep` deletes such nodes once connected again.
        """
        if always or not self._client.connected:
            with self._mutex:
                self._abandoned.append(lock)

    def _sweep(self) -> None:
        with self._mutex:
            abandoned, self._abandoned = self._abandoned, []
        keep = []
        for lock in abandoned:
            try:
                for child in self._client.get_children(lock.path):
                    if child.startswith(lock.prefix):
                        self._client.delete(f"{lock.path}/{child}")
                        log.info("deleted the stranded lock node %s/%s", lock.path, child)
            except NoNodeError:
                pass
            except (KazooException, KazooTimeoutError):
                keep.append(lock)
        if keep:
            with self._mutex:
                self._abandoned.extend(keep)

    def _delete_lock_node(self, lock: Any, key: str) -> None:
        """Delete a released lease's node, waiting at most one session timeout.

        kazoo's own release waits for the connection without end, so a node stopping
        during an outage never exited. A node not deleted goes with the session, or is
        swept before the next acquisition if the session survives (see _abandon).
        """
        if not self._connected.is_set():
            log.info("releasing %s while ZooKeeper is unreachable: its node goes with "
                     "the session", key)
            self._abandon(lock, always=True)
            return
        try:
            self._client.delete_async(f"{lock.path}/{lock.node}").get(
                timeout=self._session_timeout)
        except NoNodeError:  # the session expired and took the node
            pass
        except (KazooException, KazooTimeoutError) as exc:
            log.info("releasing %s: %r; its node goes with the session", key, exc)
            self._abandon(lock, always=True)

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

    def leader(self, name: str) -> str | None:
        try:
            contenders = self._client.Lock(self._path(election_key(name))).contenders()
        except (KazooException, KazooTimeoutError):
            return None
        return contenders[0] if contenders else None

    def lock_children(self, key: str) -> int:
        """How many nodes sit under a lock path (tests check none are left behind)."""
        try:
            return len(self._client.get_children(self._path(key)))
        except NoNodeError:
            return 0

    def abort_waits(self) -> None:
        """kazoo's synchronous calls wait for the connection to return, whatever the
        timeout given to a lock acquisition (a standby's acquisition was still waiting
        20 s into an outage). Stopping the client fails them at once. Only done while
        disconnected: connected, every wait ends within its timeout, and the session
        stays until :meth:`close` has deleted this node's lock nodes."""
        if not self._connected.is_set():
            log.info("stopping during a ZooKeeper outage: calls waiting for it give up")
            self._client.stop()

    def close(self) -> None:
        self._stop_expiry_timer()
        with self._mutex:
            leases = list(self._leases.values())
        for lease in leases:
            lease.release()
        self._client.stop()
        self._client.close()
