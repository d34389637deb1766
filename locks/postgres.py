"""PostgreSQL session advisory locks on one dedicated connection per node.

The server frees a session's advisory locks when its connection ends, which is how
other nodes learn that a holder died. Detection is bounded three ways: TCP keepalives
and ``tcp_user_timeout`` for a vanished host, ``idle_session_timeout`` (PostgreSQL 14+)
for a holder that is alive but stopped (SIGSTOP, a long GC pause) — a monitor thread
pings every second, so only a stalled process goes idle that long — and the monitor's
failed ping for this side, which marks every lease lost at once.

Advisory locks are re-entrant within a session, so this module keeps its own table of
held keys: a second lease on the same key in this process is refused like any other.
Keys are hashed to a stable signed 64-bit integer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg2

from jobserver.exceptions import LockError
from jobserver.loops import Loop, Periodic
from jobserver.store.engine import libpq_params
from locks.base import DrawFence, Lease, LockBackend, election_key

log = logging.getLogger(__name__)

RETRY_INTERVAL = 0.05
PING_INTERVAL = 1.0
#: How long this node's own session must outlive the answer that a lock is free
#: before that answer counts (see ``is_held``); PostgreSQL ends a burst of sessions
#: in milliseconds.
FREE_SETTLE = 0.1


def advisory_key(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)


class PostgresLease(Lease):
    def __init__(self, key: str, backend: PostgresLockBackend, next_fence: DrawFence,
                 holder: str) -> None:
        super().__init__(key)
        self._backend = backend
        self._next_fence = next_fence
        self._holder = holder

    def _draw_fence(self) -> int:
        return self._backend._confirm(self, self._next_fence(self.key, self._holder))

    def _release(self) -> None:
        self._backend._unlock(self)


class PostgresLockBackend(LockBackend):
    name = "postgres"

    def __init__(self, url: str, identity: str, next_fence: DrawFence,
                 holder_of: Callable[[str], str | None], session_timeout: float = 5.0) -> None:
        self._params = libpq_params(url)
        self._identity = identity
        self._next_fence = next_fence
        self._holder_of = holder_of
        self._session_timeout = session_timeout
        self._mutex = threading.RLock()
        self._leases: dict[str, PostgresLease] = {}
        self._conn: Any = None
        #: when the monitor last re-established a lost lock session (monotonic)
        self._rejoined_at: float | None = None
        #: how many times the lock session was re-established
        self._session_number = 0
        #: keys found free after the settle, with the session they were found on: asked
        #: again on that session, they are free without a second pause
        self._found_free: dict[str, int] = {}
        self._closed = threading.Event()
        self._connect()
        # A failed ping or reconnection is reported through mark_lost and tried again.
        self._monitor = Periodic("pg-lock-monitor", PING_INTERVAL, self._check_connection,
                                 expected=(LockError, psycopg2.Error, OSError))
        self._monitor.start()

    @property
    def dead_holder_grace(self) -> float:
        """A killed process's connection closes at once, but a vanished or stalled
        host's session lasts until ``idle_session_timeout`` ends it."""
        return self._session_timeout

    # -- connection ----------------------------------------------------------------------
    def _connect(self) -> None:
        timeout_ms = int(self._session_timeout * 1000)
        conn = psycopg2.connect(
            **self._params, connect_timeout=max(2, int(self._session_timeout)),
            application_name=f"jobserver-locks {self._identity}"[:63],
            keepalives=1, keepalives_idle=1, keepalives_interval=1, keepalives_count=2,
            tcp_user_timeout=timeout_ms)
        conn.autocommit = True
        with conn.cursor() as cursor:
            if conn.server_version >= 140000:
                cursor.execute("SET idle_session_timeout = %s", (f"{timeout_ms}ms",))
        self._conn = conn

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        with self._mutex:
            if self._conn is None:
                raise LockError("the lock connection to PostgreSQL is down")
            try:
                with self._conn.cursor() as cursor:
                    cursor.execute(sql, params)
                    return cursor.fetchone()[0]
            except psycopg2.Error as exc:  # any driver error: the session is in doubt
                self._connection_lost(str(exc).strip())
                raise LockError(f"lock connection failed: {exc}") from None

    def _connection_lost(self, reason: str) -> None:
        """The server has dropped (or will drop) every lock of this session."""
        with self._mutex:
            leases = list(self._leases.values())
            self._leases.clear()
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:  # already broken
                    pass
            self._conn = None
        for lease in leases:
            lease.mark_lost(f"PostgreSQL session ended: {reason}")

    def _check_connection(self) -> None:
        if self._closed.is_set():
            return
        if self._conn is None:
            with self._mutex:
                self._connect()
                self._rejoined_at = time.monotonic()
                self._session_number += 1
            log.info("lock connection to PostgreSQL re-established")
        else:
            self._query("SELECT 1")

    # -- the interface -------------------------------------------------------------------
    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        return self._take(key, self._identity, blocking, timeout)

    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        """The fence is drawn at once: its row in the store names the holder, which
        :meth:`leader` reads."""
        lease = self._take(election_key(name), identity, blocking, timeout)
        if lease is not None:
            try:
                lease.fence  # noqa: B018 - drawing the fence records the leader's identity
            except LockError:
                return None  # lost before it could name its holder
        return lease

    def _take(self, key: str, holder: str, blocking: bool,
              timeout: float | None) -> Lease | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._mutex:
                if key not in self._leases and self._query(
                        "SELECT pg_try_advisory_lock(%s)", (advisory_key(key),)):
                    lease = PostgresLease(key, self, self._next_fence, holder)
                    self._leases[key] = lease
                    return lease
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                return None
            time.sleep(RETRY_INTERVAL)

    def _confirm(self, lease: PostgresLease, fence: int) -> int:
        """``fence`` was just drawn from the store. It may count only if this session
        held the lock all along, which a round trip on the lock connection after the
        draw proves (a session advisory lock ends only with an unlock or the session).
        A holder stalled between acquiring and drawing may have lost the lock meanwhile
        and another node may have taken it and drawn a smaller fence: then the failed
        round trip marks the lease lost and the draw raises :class:`LockError`."""
        try:
            self._query("SELECT 1")
        except LockError:
            pass  # the session is gone, and with it every lease of it, this one included
        with self._mutex:
            held = self._leases.get(lease.key) is lease
        if not held:
            lease.mark_lost("the lock session ended before the fence was drawn")
            raise LockError(f"lease {lease.key} was lost while its fence was drawn")
        return fence

    def _unlock(self, lease: PostgresLease) -> None:
        with self._mutex:
            if self._leases.get(lease.key) is not lease:
                return
            del self._leases[lease.key]
            try:
                self._query("SELECT pg_advisory_unlock(%s)", (advisory_key(lease.key),))
            except LockError:
                pass  # the session is gone, and the lock with it

    def is_held(self, key: str) -> bool | None:
        """Held, free, or None for unknown. A lock found free counts as free only if
        this node's own session survives :data:`FREE_SETTLE` seconds after the answer:
        a server restart or an operator terminating every session ends the sessions one
        after another, so another node's lock can be free for a moment because its live
        holder's session went just before this one. Its holder takes it back within
        ``_rejoining``'s window, but a rescue decided in that moment would run its jobs
        twice. The burst reaches this session within the pause, and the second round
        trip then fails: unknown, never dead. A killed holder's lock stays free, so
        this costs a crash's detection the pause, once: a key found free is free
        without a pause when asked again on the same session (a leader asks about a
        dead follower every round until its heartbeat goes stale)."""
        with self._mutex:
            if key in self._leases:
                return True
        try:
            session = self._session_number
            if self._held_on_server(key):
                self._found_free.pop(key, None)
                return True
            if self._found_free.get(key) != session:
                time.sleep(FREE_SETTLE)
                if self._held_on_server(key):
                    return True  # taken back meanwhile
                if self._session_number != session:
                    return None  # this session ended during the pause: unknown
        except LockError:
            return None  # unknown: callers must not treat it as dead
        if self._rejoining():
            return None  # unknown: its holder may not have rejoined yet (see _rejoining)
        self._found_free[key] = session
        return False

    def _held_on_server(self, key: str) -> bool:
        unsigned = advisory_key(key) & 0xFFFFFFFFFFFFFFFF
        return bool(self._query(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND database = (SELECT oid FROM pg_database "
            "WHERE datname = current_database()) AND classid = %s AND objid = %s "
            "AND objsubid = 1)", (unsigned >> 32, unsigned & 0xFFFFFFFF)))

    def _rejoining(self) -> bool:
        """True for a while after this node's own lock session came back.

        When PostgreSQL itself went away (a restart, every session terminated) every
        node lost its session, and with it its presence lock, at the same moment. The
        others notice at their next ping, reconnect at the one after and take their
        presence lock again at their next heartbeat. Until then a free presence lock
        does not mean that its node is gone: answering False made the first node back
        rescue the running jobs of healthy nodes, which then ran twice (the late
        writes fenced off, the side effects not). Callers treat None as "unknown" and
        fall back to heartbeats, which a store outage this short leaves fresh.
        Heartbeats come well within the session timeout, so that bounds the wait.
        """
        rejoined_at = self._rejoined_at
        return (rejoined_at is not None and
                time.monotonic() - rejoined_at < 2 * PING_INTERVAL + self._session_timeout)

    def leader(self, name: str) -> str | None:
        key = election_key(name)
        if not self.is_held(key):
            return None
        return self._holder_of(key)

    def loops(self) -> list[Loop]:
        return [self._monitor]

    def close(self) -> None:
        self._closed.set()
        self._monitor.stop()
        with self._mutex:
            leases = list(self._leases.values())
        for lease in leases:
            lease.release()
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
