"""The metadata store: the only place that talks SQL.

:class:`Store` owns the engine and hands out repositories by concern — ``jobs`` (what
the API does), ``runs`` (what schedulers and runners do), ``fences`` (whether a
run's claim is still current), ``browse`` (bounded lists and counts of jobs for the
dashboard, see :mod:`jobserver.store.browse`), ``servers`` (nodes and heartbeats),
``epochs`` (fence counters for lock backends), ``tokens`` (API tokens),
``ui_sessions`` (the dashboard's sign-ins, see :mod:`jobserver.store.ui_sessions`),
``retention`` (deleting old finished jobs, see :mod:`jobserver.store.retention`),
``step_logs`` (the full output of step attempts), ``changes`` (who changed what).
Each installed planner adds its own repositories by name (``schedules``,
``datasets``, ``partitions``, ``consumers``, ``views``, ``batch_configs``,
``batches``, ``batch_audit`` from the built-in ones; :mod:`jobserver.planners.base`):
the store builds them but does not know them.

Every statement runs inside :class:`Transactions`, whose context managers raise
:class:`~jobserver.exceptions.StoreError` (and its kinds, see
:mod:`jobserver.store.errors`) for any failure of the driver: no driver or SQLAlchemy
exception class leaves the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from jobserver.exceptions import ConfigError
from jobserver.planners import Planner
from jobserver.planners import installed as installed_planners
from jobserver.store.engine import READONLY, make_engine
from jobserver.store.errors import driver_errors, translate
from jobserver.store.models import Base

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


#: The PostgreSQL channel that wakes idle schedulers (see ``jobserver.wakeup``).
WAKE_CHANNEL = "jobserver_work"
#: The whole statements on that channel (a channel is an identifier, never a parameter).
NOTIFY_WORK = "NOTIFY jobserver_work"
LISTEN_WORK = "LISTEN jobserver_work"


class Transactions:
    """Write and read transactions on one engine (``BEGIN IMMEDIATE`` vs deferred on SQLite).

    The one way into the database: a driver error raised inside a transaction, or by
    its commit, leaves as a :class:`~jobserver.exceptions.StoreError` caused by it.
    Errors of jobserver's own (a :class:`~jobserver.exceptions.FencedOff` raised in
    the body) pass through unchanged.
    """

    def __init__(self, engine: Engine, notify: bool = True) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.notifies = notify and self.dialect == "postgresql"
        self._driver_errors = driver_errors(engine.dialect.loaded_dbapi)

    def notify(self, conn: Connection) -> None:
        """Wake idle schedulers when this transaction commits (PostgreSQL only)."""
        if self.notifies:
            conn.exec_driver_sql(NOTIFY_WORK)

    def wake_all(self) -> None:
        """Wake every node's idle scheduler now (PostgreSQL only): for work that
        became claimable by the clock, which no commit announces."""
        if self.notifies:
            with self.statement() as conn:
                conn.exec_driver_sql(NOTIFY_WORK)

    @contextmanager
    def write(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except self._driver_errors as exc:
            raise translate(exc) from exc

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """A connection whose every statement commits by itself (autocommit): for a
        write that is one statement, it saves the round trip of a separate COMMIT."""
        try:
            with self.engine.connect() as conn:
                yield conn.execution_options(isolation_level="AUTOCOMMIT")
        except self._driver_errors as exc:
            raise translate(exc) from exc

    @contextmanager
    def read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(**{READONLY: True})
                with conn.begin():
                    yield conn
        except self._driver_errors as exc:
            raise translate(exc) from exc


class Store:
    def __init__(self, url: str, pool_size: int = 5, notify: bool = True,
                 stall_timeout: float | None = None,
                 planners: Sequence[Planner] | None = None) -> None:
        from jobserver.store.browse import JobBrowser
        from jobserver.store.changes import ChangeHistory
        from jobserver.store.epochs import EpochRepository
        from jobserver.store.fences import FenceRepository
        from jobserver.store.holds import HoldRepository
        from jobserver.store.hooks import PlannerHooks
        from jobserver.store.jobs import JobRepository
        from jobserver.store.logs import StepLogRepository
        from jobserver.store.retention import RetentionRepository
        from jobserver.store.runs import RunRepository
        from jobserver.store.servers import ServerRepository
        from jobserver.store.tokens import TokenRepository
        from jobserver.store.ui_sessions import UiSessionRepository

        self.url = url
        self.engine = make_engine(url, pool_size, stall_timeout)
        self.tx = Transactions(self.engine, notify)
        #: For the statements that find every row by key (see ``make_engine``'s
        #: ``keyed``): the group commit. One writer thread uses it: one connection.
        self.keyed_engine = (make_engine(url, 1, stall_timeout, keyed=True)
                             if self.tx.dialect == "postgresql" else None)
        keyed_tx = Transactions(self.keyed_engine, notify) if self.keyed_engine else self.tx
        #: The planners' hooks into the core repositories' transactions: filled once
        #: the planners are built, below (:mod:`jobserver.store.hooks`).
        self.hooks = PlannerHooks()
        self.jobs = JobRepository(self.tx, self.hooks)
        self.browse = JobBrowser(self.tx)
        self.runs = RunRepository(self.tx, keyed_tx, self.hooks)
        self.holds = HoldRepository(self.tx, self.runs)
        self.fences = FenceRepository(self.tx)
        self.servers = ServerRepository(self.tx, self.hooks)
        self.epochs = EpochRepository(self.tx)
        self.tokens = TokenRepository(self.tx)
        self.ui_sessions = UiSessionRepository(self.tx)
        self.retention = RetentionRepository(self.tx, self.hooks)
        self.step_logs = StepLogRepository(self.tx)
        self.changes = ChangeHistory(self.tx)
        planners = installed_planners() if planners is None else planners
        self._planned = self._planner_repositories(planners)
        self.hooks.install(planners, self)

    def _planner_repositories(self, planners: Sequence[Planner]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for planner in planners:
            planner.define_tables()
            for name, repository in planner.repositories(self).items():
                if name in found or name in self.__dict__:
                    raise ConfigError(f"planner {planner.name} names a repository {name!r} "
                                      "that the store has already")
                found[name] = repository
        return found

    def __getattr__(self, name: str) -> Any:
        """An installed planner's repository, by the name the planner gives it
        (``store.schedules``, ``store.partitions``; :mod:`jobserver.planners.base`)."""
        planned = self.__dict__.get("_planned", {})
        if name in planned:
            return planned[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def dialect(self) -> str:
        return self.tx.dialect

    def upgrade(self) -> None:
        """Bring the schema to the newest migration (``jobserver db upgrade``)."""
        from alembic import command

        command.upgrade(alembic_config(self.url, self.engine), "head")

    def create_all(self) -> None:
        """Create tables straight from the models (unit tests only)."""
        Base.metadata.create_all(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()
        if self.keyed_engine is not None:
            self.keyed_engine.dispose()


def alembic_config(url: str, engine: Engine | None = None) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if engine is not None:
        config.attributes["engine"] = engine
    return config
