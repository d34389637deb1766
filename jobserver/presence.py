"""Which nodes are alive, and which holds a seat (the active node, the planner), as
the API reports them.

A node is alive while its row says so (registered, not stopped), its heartbeat is
younger than ``server.dead_after`` *and* the lock backend does not know its presence
lock to be free. The last condition makes a crash visible at once: the backend frees
a killed process's presence lock within moments (the kernel for file locks, the
server as the connection closes for PostgreSQL, the session's end for ZooKeeper),
while its last heartbeat stays fresh for up to ``dead_after``. A backend that cannot
tell answers None (unreachable, or its own session just came back), and then the
heartbeat decides, as it does for the schedulers' rescue of orphaned jobs.

The API runs in gunicorn workers, apart from the node and its lock backend, so each
worker asks the lock service itself, through a backend of its own built on first use
(nothing is built at import or when the app is created) and used only for
``is_held``: it takes no lock and draws no fence. Answers are kept for
:data:`PRESENCE_TTL`, so that a burst of scrapes and dashboards costs the lock service
one question per node per half second instead of one per request, and a crash still
shows within that. Asking when someone looks was preferred over having a node record
deaths in the store: that would need a loop on every node polling every other node's
lock at sub-second intervals, a write racing with the dead node's restart, and the
view would still lag by the loop's period, while the lock service already knows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from schedulers.base import presence_key

if TYPE_CHECKING:
    from jobserver.config import Config
    from jobserver.store import Store
    from jobserver.store.epochs import Taken
    from jobserver.store.records import ServerRecord
    from locks.base import LockBackend

log = logging.getLogger(__name__)

#: How long an answer of the lock service is reused (seconds).
PRESENCE_TTL = 0.5
#: How long after a failed attempt to reach the lock service the next one is made;
#: meanwhile every answer is "unknown" and heartbeats alone decide.
RETRY_BUILD_AFTER = 5.0


class PresenceProbe:
    """Asks a lock backend whether keys are held, caching each answer briefly.

    ``build`` makes the backend on first use; it may return None (a backend that
    lives in one process only, such as ``memory``: nothing to ask) or raise (the lock
    service is unreachable: asked again after :data:`RETRY_BUILD_AFTER`). Either way
    :meth:`is_held` answers None meanwhile. Thread-safe.
    """

    def __init__(self, build: Callable[[], LockBackend | None],
                 ttl: float = PRESENCE_TTL) -> None:
        self._build = build
        self._ttl = ttl
        self._backend: LockBackend | None = None
        self._built = False
        self._failed_at: float | None = None
        self._answers: dict[str, tuple[float, bool | None]] = {}
        self._guard = threading.Lock()
        self._building = threading.Lock()

    @classmethod
    def over(cls, backend: LockBackend, ttl: float = PRESENCE_TTL) -> PresenceProbe:
        """A probe over a backend that exists already (a node's own, in one process)."""
        return cls(lambda: backend, ttl)

    def is_held(self, key: str) -> bool | None:
        """Whether ``key`` is held, as :meth:`LockBackend.is_held` answers it (None:
        unknown), at most :attr:`ttl` seconds old."""
        asked_at = time.monotonic()
        with self._guard:
            cached = self._answers.get(key)
        if cached is not None and asked_at - cached[0] < self._ttl:
            return cached[1]
        backend = self._backend_now()
        answer = None if backend is None else backend.is_held(key)
        with self._guard:
            self._answers[key] = (asked_at, answer)  # the time asked: never overstay
        return answer

    def _backend_now(self) -> LockBackend | None:
        if self._built:
            return self._backend
        with self._building:
            if self._built:
                return self._backend
            if (self._failed_at is not None
                    and time.monotonic() - self._failed_at < RETRY_BUILD_AFTER):
                return None
            try:
                self._backend = self._build()
            except Exception as exc:  # noqa: BLE001 - each backend's library has its own
                # connection errors; any of them means "cannot tell", never "dead".
                self._failed_at = time.monotonic()
                log.warning("cannot ask the lock service which nodes are present (%s); "
                            "judging by heartbeats for now", exc)
                return None
            self._built = True
            return self._backend


def probe_for(config: Config, store: Store) -> PresenceProbe:
    """The probe an API process uses: a backend of its own for ``lock.backend``, made
    on first use; none for ``memory`` (it knows only its own process's locks)."""
    def build() -> LockBackend | None:
        if config.lock.backend == "memory":
            return None
        from locks import make_lock_backend

        return make_lock_backend(config, store, identity=f"{config.server.id}/api")

    return PresenceProbe(build)


def alive_nodes(servers: Iterable[ServerRecord], dead_after: float,
                presence: PresenceProbe | None) -> set[str]:
    """The ids of the nodes alive (see the module's docstring); with no probe, by
    their rows and heartbeats alone."""
    alive = set()
    for server in servers:
        if server.state != "alive" or server.heartbeat_age > dead_after:
            continue
        if presence is not None and presence.is_held(presence_key(server.id)) is False:
            continue  # the lock service knows it is gone; its heartbeat is not stale yet
        alive.add(server.id)
    return alive


def seat_holder(store: Store, key: str | None, alive: set[str],
                presence: PresenceProbe | None) -> Taken | None:
    """The node holding the lock ``key`` now and since when: the newest holder the
    store records (``lock_epochs``) while that node is alive and the lock service does
    not know the lock free. None for no key, and between a holder's death or release
    and its successor's first fence: the row in ``lock_epochs`` outlives its holder
    until the successor draws a fence, so it alone would name a dead node."""
    if key is None:
        return None
    taken = store.epochs.taken(key)
    if taken is None or taken.holder not in alive:
        return None
    if presence is not None and presence.is_held(key) is False:
        return None  # released (a drain) or freed (a crash): nobody holds it right now
    return taken

