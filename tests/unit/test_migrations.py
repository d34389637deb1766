"""The Alembic migrations and the SQLAlchemy models never drift apart."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from jobserver.store import Store
from jobserver.store.models import Base


def _drift(store: Store) -> list:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def test_migrations_match_models(store: Store) -> None:
    assert _drift(store) == []


def test_drift_is_detected(store: Store) -> None:
    """The check above can fail: an extra column in the models shows up as drift."""
    from sqlalchemy import Column, Integer

    table = Base.metadata.tables["servers"]
    column = Column("extra_probe", Integer)
    table.append_column(column)
    try:
        assert any("extra_probe" in str(diff) for diff in _drift(store))
    finally:
        table._columns.remove(column)
