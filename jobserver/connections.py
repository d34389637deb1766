"""Named databases (``connections.<name>`` in the config) for sql steps and watermarks.

A node makes one SQLAlchemy engine per name, on first use, and every step of the node
shares it: a step never opens a pool of its own, so a node holds at most
``pool_size + max_overflow`` connections to each database whatever its load. The
engines are disposed when the node stops. A SQLite connection's ``attach`` files are
attached to each pooled connection as it is opened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from jobserver.config import ConnectionConfig
from jobserver.exceptions import UnknownConnection

log = logging.getLogger(__name__)

#: Seconds a step waits for a free pooled connection before it fails (retryably).
POOL_TIMEOUT = 60.0


class Connections:
    """The node's named connections; thread-safe."""

    def __init__(self, configs: Mapping[str, ConnectionConfig]) -> None:
        self._configs = dict(configs)
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        return frozenset(self._configs)

    def __contains__(self, name: object) -> bool:
        return name in self._configs

    def engine(self, name: str) -> Engine:
        """The engine of ``name``, made on first use; :class:`UnknownConnection` when
        the config does not define it."""
        with self._lock:
            engine = self._engines.get(name)
            if engine is None:
                engine = self._engines[name] = self._make(name)
            return engine

    def describe(self, name: str) -> str:
        """The URL of ``name`` without its password, for messages and logs."""
        url = make_url(self._config(name).url.get_secret_value())
        return url.render_as_string(hide_password=True)

    def dispose(self) -> None:
        """Close every pooled connection; a later :meth:`engine` makes a new engine."""
        with self._lock:
            engines, self._engines = self._engines, {}
        for engine in engines.values():
            engine.dispose()

    def _config(self, name: str) -> ConnectionConfig:
        try:
            return self._configs[name]
        except KeyError:
            known = ", ".join(sorted(self._configs)) or "none is configured"
            raise UnknownConnection(
                f"no connection named {name!r} (connections.<name>.url; known: {known})",
                {"connection": name}) from None

    def _make(self, name: str) -> Engine:
        config = self._config(name)
        url = make_url(config.url.get_secret_value())
        log.info("connection %s: engine for %s", name,
                 url.render_as_string(hide_password=True))
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            engine = create_engine(url)  # one in-memory database per connection: no pool
        else:
            engine = create_engine(url, pool_size=config.pool_size,
                                   max_overflow=config.max_overflow, pool_timeout=POOL_TIMEOUT,
                                   pool_pre_ping=True, pool_recycle=1800)
        if config.attach:
            event.listen(engine, "connect", attacher(config.attach))
        return engine


def attacher(attach: Mapping[str, str]) -> Callable[[Any, Any], None]:
    """A ``connect`` hook attaching ``attach``'s files (schema name -> path) to each new
    SQLite connection, outside any transaction, once per pooled connection. The names
    are checked identifiers (``ATTACH_NAME``); the paths are bound, not formatted."""
    def attach_all(dbapi_connection: Any, _record: Any) -> None:
        for schema, path in attach.items():
            dbapi_connection.execute(f'ATTACH DATABASE ? AS "{schema}"', (path,))
    return attach_all
