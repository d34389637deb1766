"""``connections.<name>``: the databases sql steps and watermark queries reach by name."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

from pydantic import (Field, SecretStr, StringConstraints, ValidationInfo, field_validator,
                      model_validator)

from jobserver.config.sections import _Section

#: ``${NAME}`` in a connection URL: replaced by the environment variable NAME at load.
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: The names of ``connections.<name>`` (and of a sql step's ``connection``).
CONNECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
#: A schema name under ``connections.<name>.attach`` (quoted into ATTACH ... AS "name").
ATTACH_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class ConnectionConfig(_Section):
    """A database that sql steps and watermark queries use by name.

    ``url`` is a SQLAlchemy URL. Each ``${NAME}`` in it is replaced, when the config is
    loaded, by the environment variable NAME (a missing one stops start-up), so that
    a password need not be written in the config file; the value is inserted as it is
    (percent-encode ``@``, ``:`` or ``/`` in a password). The expanded URL is a secret:
    it is never logged or shown with its password.
    """

    url: SecretStr
    # Connections of this node's engine for this database: held open (pool_size) and
    # opened beyond that while busy (max_overflow).
    pool_size: int = Field(default=2, ge=1, le=20)
    max_overflow: int = Field(default=2, ge=0, le=50)
    # SQLite only: other database files attached to every connection, schema name ->
    # path, so one statement can read a source file and write the warehouse
    # (``INSERT INTO stg SELECT ... FROM src.orders``). A statement cannot ATTACH for
    # itself: SQLite refuses it inside a transaction, and a pooled connection would
    # keep it.
    attach: dict[Annotated[str, StringConstraints(pattern=ATTACH_NAME)],
                 Annotated[str, StringConstraints(min_length=1, max_length=4096)]] = \
        Field(default_factory=dict, max_length=8)

    @field_validator("url", mode="before")
    @classmethod
    def _expand(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str):
            return value
        environ = (info.context or {}).get("environ", os.environ)
        missing = [name for name in _ENV_REFERENCE.findall(value) if name not in environ]
        if missing:
            raise ValueError(f"environment variable {missing[0]} (named in the URL as "
                             f"${{{missing[0]}}}) is not set")
        expanded = _ENV_REFERENCE.sub(lambda match: environ[match.group(1)], value)
        _check_url(expanded)
        return expanded

    @model_validator(mode="after")
    def _attach_on_sqlite(self) -> ConnectionConfig:
        from sqlalchemy.engine import make_url

        if self.attach and make_url(self.url.get_secret_value()).get_backend_name() != "sqlite":
            raise ValueError("attach is for SQLite connections only")
        reserved = [name for name in self.attach if name.lower() in ("main", "temp")]
        if reserved:
            raise ValueError(f"attach: {reserved[0]!r} is SQLite's own schema name")
        return self


def _check_url(url: str) -> None:
    """A URL SQLAlchemy parses, of a dialect whose driver is installed. The messages
    never quote the URL: it may hold a password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError("not a SQLAlchemy URL such as "
                         "postgresql://user:${PASSWORD}@host/db or sqlite:////path/db") \
            from None
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        raise ValueError(f"no driver for {parsed.drivername!r}: {exc}") from None
