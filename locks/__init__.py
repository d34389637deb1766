"""Lock backends, chosen by name from ``lock.backend``.

Optional backends are imported only when chosen, with an actionable message when
their library is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from jobserver.exceptions import ConfigError
from locks.base import Lease, LockBackend

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
    ``jobserver.node.make_lock_backend``) so that every fence drawn is recorded.

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


__all__ = ["BACKENDS", "Lease", "LockBackend", "create_lock_backend"]
