"""The locks a node takes as it starts: the schema upgrade's, then its presence.

Both retry while the lock backend is unreachable: a node (re)started while its lock
connection drops (a PostgreSQL restart, terminated sessions) would otherwise exit,
though the backend reconnects within a second. A presence lock still held by this
id's dead process is waited for, within what the lock service may keep it; one held
by a live process is a configuration error (two nodes with one ``server.id``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobserver.exceptions import ConfigError, LockError
from jobserver.retrying import retry
from jobserver.store import Store
from locks.base import Lease, LockBackend
from schedulers.base import presence_key

log = logging.getLogger(__name__)

SCHEMA_LOCK = "schema/upgrade"
#: How long start-up keeps trying a lock whose backend connection is down.
START_RETRY_FOR = 15.0
#: Added to the lock service's grace for a dead holder: its expiry is noticed late.
PRESENCE_MARGIN = 2.0
#: How long a start waits for a presence lock that dies with its holder's process (file
#: locks): another process asking whether it is held (the cluster view, a rescue) takes
#: it for a moment, and must not make this node refuse its own id.
PRESENCE_PROBE_WAIT = 0.5


def _at_start(take: Callable[[], Lease | None]) -> Lease | None:
    """``take`` a lock, retrying while the backend is unreachable."""
    return retry(take, on=LockError, for_seconds=START_RETRY_FOR,
                 what="taking a lock at start-up", first_pause=0.2, max_pause=0.2)


def upgrade_schema(store: Store, locks: LockBackend) -> None:
    """Run migrations under a lock so nodes starting together do not race."""
    lease = _at_start(lambda: locks.acquire(SCHEMA_LOCK, blocking=True, timeout=120))
    if lease is None:
        raise ConfigError("timed out waiting for another node's schema upgrade")
    with lease:
        store.upgrade()


def take_presence(locks: LockBackend, node_id: str) -> Lease:
    """Take the presence lock of ``node_id``. A node restarted at once after a crash
    may find it still held by its dead process's session; that ends within the lock
    service's grace, so wait that long (and a little) before refusing the id."""
    key = presence_key(node_id)
    lease = _at_start(lambda: locks.acquire(key, blocking=False))
    grace = locks.dead_holder_grace
    if lease is None:
        wait = grace + PRESENCE_MARGIN if grace > 0 else PRESENCE_PROBE_WAIT
        if grace > 0:
            log.warning("server.id %r is held, perhaps by this node's last process: "
                        "waiting up to %.0f s for its %s session to end", node_id, wait,
                        locks.name)
        lease = _at_start(lambda: locks.acquire(key, blocking=True, timeout=wait))
    if lease is None:
        raise ConfigError(f"server.id: {node_id!r} is in use by another live node")
    return lease
