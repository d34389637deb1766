"""Watermark sources (jobserver.batches.watermarks) and named connections' config, on
a real SQLite file (and PostgreSQL for a typed date column)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from jobserver.batches.watermarks import WatermarkKind, WatermarkSource, read_watermark
from jobserver.config import load_config
from jobserver.connections import Connections
from jobserver.exceptions import (ConfigError, InvalidRequest, MissingParameter,
                                  UnknownConnection, WatermarkError)
from jobserver.spec import parse_model

QUERY = "SELECT max(d) FROM wm WHERE system = :system"


def source(**body: object) -> WatermarkSource:
    return parse_model(WatermarkSource, json.dumps(body))


@pytest.fixture
def named(tmp_path: Path) -> Iterator[Connections]:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE wm (system TEXT, d TEXT)"))
        conn.execute(text("INSERT INTO wm VALUES ('ORDER', '2024-01-02'), "
                          "('ORDER', '2024-01-05'), ('HR', 'soon'), ('EMPTY', NULL)"))
    engine.dispose()
    connections = Connections(load_config(environ={
        "JOBSERVER_CONNECTIONS__SOURCE__URL": url}).connections)
    yield connections
    connections.dispose()


def test_a_query_on_a_named_connection_binds_the_run_params(named: Connections) -> None:
    wm = source(sql=QUERY, connection="source")
    assert wm.kind is WatermarkKind.SQL
    assert read_watermark(wm, named, None, {"system": "ORDER"}) == date(2024, 1, 5)
    assert read_watermark(wm, named, None, {"system": "EMPTY"}) is None  # no data yet
    assert read_watermark(wm, named, date(2024, 1, 3), {}) == date(2024, 1, 3)  # given wins


def test_query_errors_are_clear(named: Connections) -> None:
    with pytest.raises(WatermarkError, match="not a date"):
        read_watermark(source(sql=QUERY, connection="source"), named, None, {"system": "HR"})
    with pytest.raises(WatermarkError, match="returned no row"):
        read_watermark(source(sql="SELECT d FROM wm WHERE 1 = 0", connection="source"),
                       named, None, {})
    with pytest.raises(MissingParameter, match=":system"):
        read_watermark(source(sql=QUERY, connection="source"), named, None, {})
    with pytest.raises(UnknownConnection, match="'warehouse'"):
        read_watermark(source(sql=QUERY, connection="warehouse"), named, None,
                       {"system": "ORDER"})


def test_a_file_holds_an_iso_date(tmp_path: Path, named: Connections) -> None:
    path = tmp_path / "watermark"
    path.write_text("2024-02-29\n# written by the extract\n")
    assert read_watermark(source(file=str(path)), named, None, {}) == date(2024, 2, 29)
    path.write_text("yesterday\n")
    with pytest.raises(WatermarkError, match="'yesterday', not an ISO date"):
        read_watermark(source(file=str(path)), named, None, {})
    with pytest.raises(WatermarkError, match="does not exist"):
        read_watermark(source(file=str(tmp_path / "absent")), named, None, {})


def test_a_given_watermark_comes_from_the_command_line(named: Connections) -> None:
    wm = source(given=True)
    assert wm.kind is WatermarkKind.GIVEN
    assert read_watermark(wm, named, date(2024, 1, 1), {}) == date(2024, 1, 1)
    with pytest.raises(WatermarkError, match="--watermark"):
        read_watermark(wm, named, None, {})


@pytest.mark.parametrize("body, words", [
    ({}, "exactly one of"),
    ({"sql": QUERY, "file": "/x", "connection": "c"}, "found sql, file"),
    ({"sql": QUERY}, "needs a connection"),
    ({"file": "/x", "connection": "c"}, "with sql only"),
    ({"given": False}, "given must be true"),
    ({"given": True, "extra": 1}, "unknown field"),
])
def test_malformed_sources_are_refused(body: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        source(**body)
    assert words in caught.value.message


def test_a_postgres_date_column_is_read_as_a_date(pg_url: str) -> None:
    connections = Connections(load_config(environ={
        "JOBSERVER_CONNECTIONS__PG__URL": pg_url}).connections)
    try:
        wm = source(sql="SELECT CAST(:d AS date) + 1", connection="pg")
        assert read_watermark(wm, connections, None, {"d": "2024-12-31"}) == date(2025, 1, 1)
    finally:
        connections.dispose()


# -- connections.<name> in the config -------------------------------------------------------
def test_url_references_to_the_environment_are_expanded_and_kept_secret() -> None:
    config = load_config(environ={
        "JOBSERVER_CONNECTIONS__WAREHOUSE__URL": "postgresql://etl:${WH_PASSWORD}@db/wh",
        "WH_PASSWORD": "s3cret"})
    url = config.connections["warehouse"].url
    assert url.get_secret_value() == "postgresql://etl:s3cret@db/wh"
    assert "s3cret" not in repr(config) and "s3cret" not in str(config.model_dump())
    assert Connections(config.connections).describe("warehouse") == \
        "postgresql://etl:***@db/wh"


def test_a_missing_variable_or_a_bad_url_stops_start_up_without_the_password(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"connections\.wh\.url.*WH_PASSWORD") as missing:
        load_config(environ={"JOBSERVER_CONNECTIONS__WH__URL": "postgresql://u:${WH_PASSWORD}@h/d"})
    assert "JOBSERVER_CONNECTIONS__WH__URL" in missing.value.message
    with pytest.raises(ConfigError, match="not a SQLAlchemy URL") as bad:
        load_config(environ={"JOBSERVER_CONNECTIONS__WH__URL": "s3cret-not-a-url"})
    assert "s3cret" not in bad.value.message
    with pytest.raises(ConfigError, match="no driver"):
        load_config(environ={"JOBSERVER_CONNECTIONS__WH__URL": "nosuchdb://u:p@h/d"})
    config_file = tmp_path / "jobserver.toml"
    config_file.write_text('[connections.source]\nurl = "sqlite:///${SRC_DIR}/source.db"\n'
                           "pool_size = 1\n")
    config = load_config(config_file, environ={"SRC_DIR": "/data"})
    assert config.connections["source"].url.get_secret_value() == "sqlite:////data/source.db"


def test_attached_sqlite_files_are_readable_on_every_pooled_connection(
        tmp_path: Path) -> None:
    """``connections.<name>.attach``: one statement reads a source file and writes the
    warehouse, again and again (a statement's own ATTACH would fail the second time)."""
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = create_engine(source_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER, d TEXT)"))
        conn.execute(text("INSERT INTO orders VALUES (1, '2024-01-01'), (2, '2024-01-02')"))
    engine.dispose()
    connections = Connections(load_config(environ={
        "JOBSERVER_CONNECTIONS__WAREHOUSE__URL": f"sqlite:///{tmp_path / 'warehouse.db'}",
        "JOBSERVER_CONNECTIONS__WAREHOUSE__POOL_SIZE": "1",
        "JOBSERVER_CONNECTIONS__WAREHOUSE__ATTACH__SRC": str(tmp_path / "source.db"),
    }).connections)
    try:
        warehouse = connections.engine("warehouse")
        with warehouse.begin() as conn:
            conn.execute(text("CREATE TABLE stg (id INTEGER, d TEXT)"))
        for day in ("2024-01-01", "2024-01-02"):
            with warehouse.begin() as conn:
                conn.execute(text("INSERT INTO stg SELECT id, d FROM src.orders WHERE d = :d"),
                             {"d": day})
        with warehouse.connect() as conn:
            assert conn.execute(text("SELECT id FROM stg ORDER BY id")).scalars().all() == [1, 2]
    finally:
        connections.dispose()


@pytest.mark.parametrize(("url", "schema", "words"), [
    ("postgresql://u:p@h/d", "src", "attach is for SQLite connections only"),
    ("sqlite:////data/w.db", "main", "SQLite's own schema name"),
    ("sqlite:////data/w.db", "bad-name", "connections.wh.attach.bad-name"),
])
def test_attach_is_refused_where_it_cannot_work(url: str, schema: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(environ={"JOBSERVER_CONNECTIONS__WH__URL": url,
                             f"JOBSERVER_CONNECTIONS__WH__ATTACH__{schema.upper()}": "/s.db"})
