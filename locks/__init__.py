"""Lock backends, chosen by name from ``lock.backend``.

Optional backends are imported only when chosen, with an actionable message when
their library is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jobserver.exceptions import ConfigError
from locks.base import Lease, LockBackend

if TYPE_CHECKING:
    from jobserver.config import Config
    from jobserver.store import Store

#: name -> (module, class, pip extra that provides its library)
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "file": ("locks.file", "FileLockBackend", None),
    "memory": ("locks.memory", "MemoryLockBackend", None),
    "postgres": ("locks.postgres", "PostgresLockBackend", "postgres"),
    "zookeeper": ("locks.zookeeper", "ZooKeeperLockBackend", "zookeeper"),
}


def create_lock_backend(name: str, **options: Any) -> LockBackend:
    """A new backend ``name``, built with ``options`` as its constructor's keyword
    arguments: the store's fence recorder among them, which a node passes (see
    :func:`make_lock_backend`) so that every fence drawn is recorded.

    Raises :class:`ConfigError` for an unknown name, and for a backend whose library
    is missing, naming the extra that installs it.
    """
    if name not in BACKENDS:
        raise ConfigError(f"lock.backend: unknown backend {name!r}; "
                          f"choose one of {', '.join(sorted(BACKENDS))}")
    module_name, class_name, extra = BACKENDS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f": pip install 'jobserver[{extra}]'" if extra else ""
        raise ConfigError(f"lock.backend={name} needs {exc.name}{hint}") from None
    return getattr(module, class_name)(**options)


def make_lock_backend(config: Config, store: Store,
                      identity: str | None = None) -> LockBackend:
    """The configured backend, recording every fence it draws in ``store``: file and
    postgres draw theirs there, ZooKeeper and memory record their own. ``identity``
    names its holder (default ``server.id``; the API's own backend, which only asks
    whether nodes are present, gives another name to its lock-service session)."""
    identity = identity or config.server.id
    lock_url = config.lock.url or config.database_url
    if config.lock.backend == "postgres" and not lock_url.startswith("postgresql"):
        raise ConfigError("lock.backend: postgres locks need a PostgreSQL database.url "
                          "(or lock.url)")
    options: dict[str, dict[str, object]] = {
        "file": {"directory": config.data_dir / "locks", "next_fence": store.epochs.bump,
                 "identity": identity},
        "postgres": {"url": lock_url, "identity": identity,
                     "next_fence": store.epochs.bump, "holder_of": store.epochs.holder,
                     "session_timeout": config.lock.session_timeout},
        "zookeeper": {"hosts": config.zookeeper.hosts, "root": config.zookeeper.root,
                      "identity": identity, "record_fence": store.epochs.advance,
                      "session_timeout": config.zookeeper.session_timeout,
                      "auth": (config.zookeeper.auth.get_secret_value()
                               if config.zookeeper.auth else None)},
        "memory": {"record_fence": store.epochs.advance, "identity": identity},
    }
    return create_lock_backend(config.lock.backend, **options.get(config.lock.backend, {}))


__all__ = ["BACKENDS", "Lease", "LockBackend", "create_lock_backend", "make_lock_backend"]
