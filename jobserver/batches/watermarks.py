"""Source watermarks: the newest business date a source system has data for.

A system's first stage creates batches up to its source's watermark. A source says
where to read it, in one of three forms (as written in a BatchConfig)::

    watermark: {sql: "SELECT max(d) FROM wm WHERE system = :system", connection: source}
    watermark: {file: /data/order/watermark}     # the file holds an ISO date
    watermark: {given: true}                     # from ``--watermark`` of the command

A query's parameters are bound by name from the run's params (system, location,
context columns...), as in sql steps. ``None`` means the source has no data yet (the
query's value is NULL); anything unreadable is a :class:`WatermarkError`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from sqlalchemy import text

from jobserver.exceptions import WatermarkError
from jobserver.spec import Name, SqlText, StrictModel
from jobserver.steps.sql import bind_parameters

#: Seconds a watermark query may run (``statement_timeout`` on PostgreSQL).
QUERY_TIMEOUT = 60.0
#: The most of a watermark file read: a date, a newline, perhaps a comment.
MAX_FILE_BYTES = 4096


class WatermarkKind(str, enum.Enum):
    SQL = "sql"
    FILE = "file"
    GIVEN = "given"


class WatermarkSource(StrictModel):
    """Exactly one of ``sql`` (with ``connection``), ``file`` or ``given: true``."""

    sql: SqlText | None = None
    connection: Name | None = None
    file: str | None = Field(default=None, min_length=1, max_length=4096)
    given: bool | None = None

    @model_validator(mode="after")
    def _one_form(self) -> WatermarkSource:
        forms = [name for name in ("sql", "file", "given") if getattr(self, name) is not None]
        if len(forms) != 1:
            raise ValueError("give exactly one of sql (with connection), file or given: "
                             f"true; found {', '.join(forms) or 'none'}")
        if self.sql is not None and self.connection is None:
            raise ValueError("a sql watermark needs a connection (connections.<name>)")
        if self.sql is None and self.connection is not None:
            raise ValueError("connection goes with sql only")
        if self.given is False:
            raise ValueError("given must be true (or leave it out)")
        return self

    @property
    def kind(self) -> WatermarkKind:
        if self.sql is not None:
            return WatermarkKind.SQL
        return WatermarkKind.FILE if self.file is not None else WatermarkKind.GIVEN


def read_watermark(source: WatermarkSource, connections: Any, given: date | None,
                   params: Mapping[str, Any] | None = None) -> date | None:
    """The source's watermark; None when it has no data yet.

    ``given`` is the operator's ``--watermark``: a ``given`` source needs it, and for
    the other kinds it wins over the source (an operator's explicit word). ``params``
    are bound into a query by name. ``connections``: the node's
    :class:`~jobserver.connections.Connections` (an unknown name raises
    :class:`~jobserver.exceptions.UnknownConnection`). Raises :class:`WatermarkError`
    for a missing or unreadable file, a query with no row or a value not a date, and
    :class:`~jobserver.exceptions.MissingParameter` for a parameter nobody supplies.
    """
    if given is not None:
        return given
    if source.kind is WatermarkKind.GIVEN:
        raise WatermarkError("the watermark of this source is given on the command line "
                             "(--watermark DATE); none was given", {"watermark": "given"})
    if source.kind is WatermarkKind.FILE:
        assert source.file is not None
        return _read_file(Path(source.file).expanduser())
    assert source.sql is not None and source.connection is not None
    return _query(source.sql, source.connection, connections, params or {})


def _read_file(path: Path) -> date:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES)
    except FileNotFoundError:
        raise WatermarkError(f"watermark file {path} does not exist",
                             {"file": str(path)}) from None
    except OSError as exc:
        raise WatermarkError(f"watermark file {path} cannot be read: {exc.strerror or exc}",
                             {"file": str(path)}) from None
    lines = raw.decode("utf-8", errors="replace").strip().splitlines()
    first = lines[0].strip() if lines else ""
    try:
        return date.fromisoformat(first)
    except ValueError:
        shown = first[:40] or "nothing"
        raise WatermarkError(f"watermark file {path} holds {shown!r}, not an ISO date "
                             "(YYYY-MM-DD) on its first line", {"file": str(path)}) from None


def _query(sql: str, name: str, connections: Any, params: Mapping[str, Any]) -> date | None:
    values = bind_parameters([sql], params)[0]
    engine = connections.engine(name)
    with engine.connect() as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(QUERY_TIMEOUT * 1000)}")
        result = conn.execute(text(sql), values)
        if not result.returns_rows:
            raise WatermarkError(f"the watermark query on {name!r} returns no rows: "
                                 "it should be a SELECT of one date", {"connection": name})
        row = result.first()
    if row is None:
        raise WatermarkError(f"the watermark query on {name!r} returned no row",
                             {"connection": name})
    return _as_date(row[0], name)


def _as_date(value: Any, name: str) -> date | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):  # SQLite keeps dates as text
        try:
            return (date.fromisoformat(value) if len(value) == 10
                    else datetime.fromisoformat(value).date())
        except ValueError:
            pass
    raise WatermarkError(f"the watermark query on {name!r} returned {str(value)[:40]!r} "
                         f"({type(value).__name__}), not a date", {"connection": name})


__all__ = ["WatermarkKind", "WatermarkSource", "read_watermark"]
