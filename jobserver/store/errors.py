"""The store's boundary for errors: driver exceptions in, jobserver's own out.

Every statement runs inside one of :class:`~jobserver.store.Transactions`' context
managers, whether through SQLAlchemy or on the driver's own cursor (the PostgreSQL
claim and submit), so those context managers are where driver errors are turned into
:class:`~jobserver.exceptions.StoreError` and its kinds, with the driver's error as the
cause. Nothing above the store catches a driver's or SQLAlchemy's exception class.

The rule of what is worth a retry is driver-agnostic: PostgreSQL errors are told by
their SQLSTATE class (psycopg 3 and psycopg2 alike), SQLite errors by their primary
result code, and SQLAlchemy's own connection-level failures (a disconnect it detected,
a pool that stayed empty) are outages.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from jobserver.exceptions import ConstraintViolation, StoreError, StoreUnavailable

#: SQLSTATE classes of an outage: connection exception (08), transaction rollback
#: such as a serialization failure or deadlock (40), insufficient resources (53),
#: operator intervention such as a shutdown or a terminated session (57), system
#: error (58).
PG_UNAVAILABLE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
#: Single SQLSTATEs of an outage: the session ended for idling in a transaction; a
#: row lock not obtained within the transaction's ``lock_timeout`` (retention's
#: deletes give up rather than wait, and try again later).
PG_UNAVAILABLE_STATES = frozenset({"25P03", "55P03"})
#: SQLite primary result codes of an outage: BUSY, LOCKED, IOERR, FULL, CANTOPEN,
#: PROTOCOL.
SQLITE_UNAVAILABLE_CODES = frozenset({5, 6, 10, 13, 14, 15})
SQLITE_UNAVAILABLE_WORDS = ("locked", "busy")


def driver_errors(dbapi: Any) -> tuple[type[BaseException], ...]:
    """What the store catches at its boundary: SQLAlchemy's wrappers and the errors
    of ``dbapi``, the driver module, which raw cursors raise unwrapped."""
    return (DBAPIError, DisconnectionError, PoolTimeout, dbapi.Error)


def translate(exc: BaseException) -> StoreError:
    """The jobserver error for ``exc``, a driver or SQLAlchemy error; its message is
    the driver's, without the statement and its parameters."""
    driver = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    message = str(driver).strip() or type(driver).__name__
    return _kind(exc, driver)(message)


def _kind(exc: BaseException, driver: BaseException) -> type[StoreError]:
    if isinstance(exc, (DisconnectionError, PoolTimeout)) or \
            getattr(exc, "connection_invalidated", False):
        return StoreUnavailable
    names = {cls.__name__ for cls in type(driver).__mro__}
    if "IntegrityError" in names:
        return ConstraintViolation
    if hasattr(driver, "sqlite_errorcode") or type(driver).__module__ == "sqlite3":
        return StoreUnavailable if _sqlite_unavailable(driver) else StoreError
    sqlstate = getattr(driver, "sqlstate", None) or getattr(driver, "pgcode", None)
    if sqlstate:
        return StoreUnavailable if _pg_unavailable(sqlstate) else StoreError
    # A PostgreSQL driver's error without a SQLSTATE comes from the client side of
    # the connection: refused, closed by the server, or already closed.
    return StoreUnavailable if names & {"OperationalError", "InterfaceError"} else StoreError


def _pg_unavailable(sqlstate: str) -> bool:
    return sqlstate[:2] in PG_UNAVAILABLE_CLASSES or sqlstate in PG_UNAVAILABLE_STATES


def _sqlite_unavailable(error: BaseException) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in SQLITE_UNAVAILABLE_CODES
    text = str(error).lower()
    return any(word in text for word in SQLITE_UNAVAILABLE_WORDS)
