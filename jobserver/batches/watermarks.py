"""Source watermarks: the newest business date a source system has data for.

A system's first stage creates batches up to its source's watermark. A source says
where to read it, in one of three forms (as written in a BatchConfig)::

    watermark: {sql: "SELECT max(d) FROM wm WHERE system = :system", connection: source}
    watermark: {file: order/watermark}           # under batches.watermark_dir: an ISO date
    watermark: {given: true}                     # from ``--watermark`` of the command

A query's parameters are bound by name from the run's params (system, location,
context columns...), as in sql steps. ``None`` means the source has no data yet (the
query's value is NULL); anything unreadable is a :class:`WatermarkError`.

A watermark is read inside a ``batch run`` request, for a caller with ``submit`` only,
so it may do only what reading a date needs (the rules live in
:mod:`jobserver.batches.watermark_query` and :mod:`jobserver.batches.watermark_file`):
a query is one read-only SELECT with a time limit, a file lies under one directory and
is read bounded, and no error shows what was read. Saving a config whose watermark runs
SQL needs the ``sql`` scope, as a job with a sql step does (:func:`check_sources`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from jobserver.batches import watermark_file, watermark_query
from jobserver.batches.spec import BatchConfig, FileWatermark, SqlWatermark
from jobserver.exceptions import WatermarkError
from jobserver.requester import Requester
from jobserver.spec import Name, SqlText, StrictModel, refuse
from jobserver.steps.sql import bind_parameters
from jobserver.store.tokens import SQL


@dataclass(frozen=True)
class Sources:
    """Where a node reads watermarks: its named connections
    (:class:`~jobserver.connections.Connections`) and ``batches.watermark_dir``."""

    connections: Any
    root: Path


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


def read_watermark(source: WatermarkSource, sources: Sources | None, given: date | None,
                   params: Mapping[str, Any] | None = None) -> date | None:
    """The source's watermark; None when it has no data yet.

    ``given`` is the operator's ``--watermark``: a ``given`` source needs it, and for
    the other kinds it wins over the source (an operator's explicit word). ``params``
    are bound into a query by name. ``sources``: where this node reads them (None: it
    reads none; an unknown connection raises
    :class:`~jobserver.exceptions.UnknownConnection`). Raises :class:`WatermarkError`
    for a missing or unreadable file, a query refused, failed or timed out, no row or
    a value not a date, and :class:`~jobserver.exceptions.MissingParameter` for a
    parameter nobody supplies.
    """
    if given is not None:
        return given
    if source.kind is WatermarkKind.GIVEN:
        raise WatermarkError("the watermark of this source is given on the command line "
                             "(--watermark DATE); none was given", {"watermark": "given"})
    if sources is None:
        raise WatermarkError("this server reads only watermarks given with the run",
                             {"watermark": source.kind.value})
    if source.kind is WatermarkKind.FILE:
        assert source.file is not None
        return watermark_file.read_date(sources.root, source.file)
    assert source.sql is not None and source.connection is not None
    values = bind_parameters([source.sql], params or {})[0]
    engine = sources.connections.engine(source.connection)
    value = watermark_query.first_value(engine, source.connection, source.sql, values)
    return _as_date(value, source.connection)


def _as_date(value: Any, name: str) -> date | None:
    """The query's value as a date; the error names its type, never the value."""
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
    raise WatermarkError(f"the watermark query on {name!r} returned a "
                         f"{type(value).__name__} that is not a date (the value is not "
                         "shown)", {"connection": name})


def check_sources(config: BatchConfig, requester: Requester, root: Path) -> None:
    """What saving ``config`` needs of its watermarks, checked before it is stored:
    a query runs SQL, so it needs the ``sql`` scope, as a sql step does (a 403 naming
    ``system_stage_mapping[i].watermark.sql``), and must be one reading statement; a
    file must lie under ``root`` (``batches.watermark_dir``) as far as can be told
    now. Scopes are checked first: a caller without them learns nothing more."""
    entries = [(f"system_stage_mapping[{index}].watermark", entry.watermark)
               for index, entry in enumerate(config.spec.system_stage_mapping)]
    for where, source in entries:
        if isinstance(source, SqlWatermark):
            requester.require(SQL, f"{where}.sql", "a watermark that runs SQL")
    problems = []
    for where, source in entries:
        if isinstance(source, SqlWatermark):
            problem = watermark_query.problem_of(source.sql)
            field = f"{where}.sql"
        elif isinstance(source, FileWatermark):
            problem = watermark_file.problem_of(root, source.file)
            field = f"{where}.file"
        else:
            continue
        if problem is not None:
            problems.append({"field": field, "message": problem})
    refuse(problems)


__all__ = ["Sources", "WatermarkKind", "WatermarkSource", "check_sources", "read_watermark"]
