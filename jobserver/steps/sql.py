"""SQL steps: statements run in one transaction on a named connection.

Parameters are bound by name (``:business_date``) from the job's params merged with
the step's own (the step's win); they are never formatted into the text, so a value
is data whatever it holds. A statement naming a parameter nobody supplies fails the
step before anything runs. (A colon that is not a parameter, inside a string literal
for instance, is written ``\\:``; a cast of a parameter is ``CAST(:d AS date)``, as
SQLAlchemy does not read ``:d::date`` as a parameter: such a statement is refused
when the job is submitted, naming ``steps[i].statements[j]``.)

The transaction commits after the last statement, or rolls back on any failure,
pause, discard or timeout. A running statement is interrupted through the driver
(psycopg's ``cancel``, SQLite's ``interrupt``) within a fraction of a second of a
pause or discard, and at the step's ``timeout``; on PostgreSQL ``statement_timeout``
bounds each statement on the server too, so a statement of a node that died ends.

The rows the data-changing statements (INSERT, UPDATE, DELETE, MERGE) report are
summed into the step's ``records_out`` metric; the output (the attempt's log, which
``jobserver logs`` prints) has a line per statement and, when the step fails, the
error it ends with.
"""

from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from jobserver.exceptions import MissingParameter, UnknownConnection
from jobserver.states import State
from jobserver.store.records import StepOutcome

#: Leading keywords of the statements whose row counts are records written.
DML_KEYWORDS = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "REPLACE", "UPSERT", "WITH"})
#: How often the guard looks at the step's cancel event and its deadline.
GUARD_INTERVAL = 0.05
#: How often an interrupt is repeated while the statement keeps running (it may have
#: started just after the first one).
INTERRUPT_REPEAT = 0.25
_COMMENTS = re.compile(r"^(\s+|--[^\n]*(\n|$)|/\*.*?\*/)*", re.DOTALL)
#: ``:name::type``: SQLAlchemy's ``text`` leaves it alone, so PostgreSQL would see
#: the colon and fail with a syntax error that does not say why.
_PARAMETER_CAST = re.compile(r"(?<![:\w\\]):(\w+)::")
POSTGRES_TIMEOUT_SQLSTATE = "57014"  # query_canceled: statement_timeout or a cancel


class Interruption(enum.Enum):
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"


def parameter_names(statement: str) -> list[str]:
    """The ``:name`` parameters ``statement`` binds, as SQLAlchemy's ``text`` reads it."""
    return list(text(statement).compile().params)


def cast_problem(statement: str) -> tuple[str, str] | None:
    """``(parameter, why)`` when ``statement`` casts a parameter as ``:name::type``,
    which is not read as a parameter; None otherwise. Submitting refuses it
    (:func:`jobserver.spec.validate_job`), and so does running a step stored before."""
    cast = _PARAMETER_CAST.search(statement)
    if cast is None:
        return None
    return cast.group(1), (f"{cast.group()} is not read as a parameter; write "
                           f"CAST({cast.group()[:-2]} AS type)")


def bind_parameters(statements: list[str], params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each statement's parameter values, taken by name from ``params``;
    :class:`MissingParameter` names the first statement and parameter nobody supplies."""
    bound = []
    for index, statement in enumerate(statements):
        cast = cast_problem(statement)
        if cast:
            raise MissingParameter(f"statements[{index}]: {cast[1]}", {"parameter": cast[0]})
        names = parameter_names(statement)
        missing = [name for name in names if name not in params]
        if missing:
            raise MissingParameter(
                f"statements[{index}] names parameter :{missing[0]}, which neither the "
                "job's params nor the step's supply", {"parameter": missing[0]})
        bound.append({name: params[name] for name in names})
    return bound


def is_dml(statement: str) -> bool:
    """Whether the statement's row count is records written (comments skipped)."""
    rest = statement[_COMMENTS.match(statement).end():]  # type: ignore[union-attr]
    keyword = re.match(r"[A-Za-z]+", rest)
    return keyword is not None and keyword.group().upper() in DML_KEYWORDS


class StatementGuard(threading.Thread):
    """Interrupts the running statement once the step is cancelled or its time is up.

    :attr:`reason` says which, once one did; statements not started yet are not
    started (the runner checks :attr:`reason` before each).
    """

    def __init__(self, cancelled: threading.Event, timeout: float,
                 interrupt: Callable[[], None]) -> None:
        super().__init__(daemon=True, name="sql-guard")
        self._cancelled, self._interrupt = cancelled, interrupt
        self._deadline = time.monotonic() + timeout
        self._done = threading.Event()
        self.executing = threading.Event()
        self.reason: Interruption | None = None

    def run(self) -> None:
        interrupted_at: float | None = None
        while not self._done.is_set():
            now = time.monotonic()
            if self.reason is None and self._cancelled.is_set():
                self.reason = Interruption.CANCELLED
            elif self.reason is None and now >= self._deadline:
                self.reason = Interruption.TIMEOUT
            if (self.reason is not None and self.executing.is_set()
                    and (interrupted_at is None or now - interrupted_at >= INTERRUPT_REPEAT)):
                self._interrupt()
                interrupted_at = now
            self._done.wait(GUARD_INTERVAL)

    def stop(self) -> None:
        self._done.set()
        self.join()


def interrupter(conn: Connection) -> Callable[[], None]:
    """A thread-safe way to interrupt the statement ``conn`` is running."""
    raw = conn.connection.dbapi_connection
    for name in ("interrupt", "cancel_safe", "cancel"):  # sqlite3; psycopg 3; psycopg2
        method = getattr(raw, name, None)
        if callable(method):
            def call(method: Callable[[], Any] = method) -> None:
                try:
                    method()
                except Exception:  # noqa: BLE001 - the connection may be closing
                    pass
            return call
    return lambda: None  # a driver without cancel: only the timeout's rollback stops it


class _Interrupted(Exception):
    """Raised between statements to roll back once the guard has fired."""


class SqlSteps:
    """The ``sql`` step type of a node, with the node's named connections."""

    def __init__(self, connections: Any) -> None:
        self._connections = connections

    def run(self, spec: dict[str, Any], ctx: Any) -> StepOutcome:
        started, cpu_before = time.monotonic(), time.thread_time()
        try:
            engine = self._connections.engine(spec["connection"])
            bound = bind_parameters(spec["statements"],
                                    {**ctx.params, **(spec.get("params") or {})})
        except (UnknownConnection, MissingParameter) as exc:
            return StepOutcome(State.ERROR, output=f"error: {exc.message}", error=exc.message,
                               retryable=False, wall_seconds=time.monotonic() - started)
        if ctx.cancelled.is_set():
            return StepOutcome(State.STOPPED, error="cancelled before the first statement")
        run = _Run(spec, bound)
        try:
            with engine.connect() as conn:
                run.execute(conn, ctx.cancelled)
        except SQLAlchemyError as exc:
            run.failure = run.failure or exc
        outcome = run.outcome()
        outcome.wall_seconds = time.monotonic() - started
        outcome.cpu_seconds = time.thread_time() - cpu_before
        return outcome


class _Run:
    """One attempt: the statements, what each did, and how it ended."""

    def __init__(self, spec: dict[str, Any], bound: list[dict[str, Any]]) -> None:
        self.statements: list[str] = spec["statements"]
        self.timeout = float(spec.get("timeout") or 300.0)
        self.bound = bound
        self.lines: list[str] = []
        self.records = 0
        self.current = -1  # before the first statement: connecting, beginning
        self.reason: Interruption | None = None
        self.failure: BaseException | None = None

    def execute(self, conn: Connection, cancelled: threading.Event) -> None:
        guard = StatementGuard(cancelled, self.timeout, interrupter(conn))
        guard.start()
        try:
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    # Computed here, an integer: nothing of the request's is formatted.
                    conn.exec_driver_sql("SET LOCAL statement_timeout = "
                                         f"{max(1, int(self.timeout * 1000))}")
                for index, statement in enumerate(self.statements):
                    self.current = index
                    if guard.reason is not None:
                        raise _Interrupted()
                    self._one(conn, guard, statement, self.bound[index])
        except (_Interrupted, SQLAlchemyError) as exc:
            self.failure = exc
        finally:
            guard.stop()
            self.reason = guard.reason

    def _one(self, conn: Connection, guard: StatementGuard, statement: str,
             values: dict[str, Any]) -> None:
        started = time.monotonic()
        guard.executing.set()
        try:
            result = conn.execute(text(statement), values)
        finally:
            guard.executing.clear()
        seconds = time.monotonic() - started
        head = f"[{self.current + 1}] {_head(statement)}"
        if result.returns_rows:
            result.close()
            self.lines.append(f"{head}: returned rows ({seconds:.3f} s)")
        elif is_dml(statement) and result.rowcount >= 0:
            self.records += result.rowcount
            self.lines.append(f"{head}: {result.rowcount} row(s) affected ({seconds:.3f} s)")
        else:
            self.lines.append(f"{head}: done ({seconds:.3f} s)")

    def outcome(self) -> StepOutcome:
        if self.failure is None:
            self.lines.append(f"committed: {len(self.statements)} statement(s), "
                              f"records_out {self.records}")
            return StepOutcome(State.SUCCEED, output="\n".join(self.lines),
                               metrics={"records_out": self.records,
                                        "statements": len(self.statements)})
        where = f"statements[{self.current}]" if self.current >= 0 else "the connection"
        outcome = self._failed(where)
        # The output is the attempt's log (jobserver logs): it ends with the error.
        self.lines += [f"rolled back at {where}", f"error: {outcome.error}"]
        outcome.output = "\n".join(self.lines)
        return outcome

    def _failed(self, where: str) -> StepOutcome:
        """How the attempt ended, ``where`` it failed, without its output yet."""
        if self.reason is Interruption.CANCELLED:
            return StepOutcome(State.STOPPED,
                               error=f"cancelled at {where}; transaction rolled back")
        if self.reason is Interruption.TIMEOUT or _server_timeout(self.failure):
            return StepOutcome(State.ERROR, error=f"timed out after {self.timeout:g} s at "
                                                  f"{where}; transaction rolled back")
        assert self.failure is not None
        return StepOutcome(State.ERROR, error=f"{where}: {_describe(self.failure)}"[:4000],
                           retryable=_retryable(self.failure))


def _head(statement: str, width: int = 60) -> str:
    """The statement's start on one line, for the output."""
    line = " ".join(statement.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def _server_timeout(exc: BaseException | None) -> bool:
    """PostgreSQL ended the statement at its ``statement_timeout``."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "pgcode", None) or getattr(getattr(orig, "diag", None),
                                                    "sqlstate", None)
    return code == POSTGRES_TIMEOUT_SQLSTATE and "statement timeout" in str(orig)


def _describe(exc: BaseException) -> str:
    """The driver's words (its first line), without SQLAlchemy's statement echo."""
    orig = getattr(exc, "orig", None) if isinstance(exc, DBAPIError) else None
    source = orig if orig is not None else exc
    first = (str(source).strip().splitlines() or [""])[0]
    return f"{type(source).__name__}: {first}"


def _retryable(exc: BaseException) -> bool:
    """A lost connection or a database going away may mend; a statement the database
    refuses (syntax, constraint, type) will fail the same way again."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError):
        return False
    # sqlite3 reports nearly everything (a missing table too) as OperationalError; of
    # its errors only a busy or locked database passes.
    module = type(exc.orig).__module__ if exc.orig is not None else ""
    return not module.startswith("sqlite3") or "locked" in str(exc.orig) \
        or "busy" in str(exc.orig)


__all__ = ["SqlSteps", "bind_parameters", "cast_problem", "is_dml", "parameter_names"]
