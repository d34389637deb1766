"""Watermark sources (jobserver.batches.watermarks) and named connections' config, on
a real SQLite file (and PostgreSQL for a typed date column): what a watermark may read
and how (read-only, bounded, nothing read echoed)."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from jobserver.batches import watermark_query
from jobserver.batches.spec import parse_batch_config
from jobserver.batches.watermarks import (Sources, WatermarkKind, WatermarkSource,
                                          check_sources, read_watermark)
from jobserver.config import load_config
from jobserver.connections import Connections
from jobserver.exceptions import (ConfigError, Forbidden, InvalidRequest, MissingParameter,
                                  UnknownConnection, WatermarkError)
from jobserver.requester import Requester
from jobserver.spec import parse_model
from jobserver.store.records import Actor

QUERY = "SELECT max(d) FROM wm WHERE system = :system"
SECRET = "hunter2-SECRET-VALUE"


def source(**body: object) -> WatermarkSource:
    return parse_model(WatermarkSource, json.dumps(body))


@pytest.fixture
def named(tmp_path: Path) -> Iterator[Sources]:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE wm (system TEXT, d TEXT)"))
        conn.execute(text("INSERT INTO wm VALUES ('ORDER', '2024-01-02'), "
                          f"('ORDER', '2024-01-05'), ('HR', '{SECRET}'), ('EMPTY', NULL)"))
    engine.dispose()
    connections = Connections(load_config(environ={
        "JOBSERVER_CONNECTIONS__SOURCE__URL": url}).connections)
    (tmp_path / "watermarks").mkdir()
    yield Sources(connections, tmp_path / "watermarks")
    connections.dispose()


def test_a_query_on_a_named_connection_binds_the_run_params(named: Sources) -> None:
    wm = source(sql=QUERY, connection="source")
    assert wm.kind is WatermarkKind.SQL
    assert read_watermark(wm, named, None, {"system": "ORDER"}) == date(2024, 1, 5)
    assert read_watermark(wm, named, None, {"system": "EMPTY"}) is None  # no data yet
    assert read_watermark(wm, named, date(2024, 1, 3), {}) == date(2024, 1, 3)  # given wins


def test_query_errors_are_clear_and_echo_nothing_read(named: Sources) -> None:
    with pytest.raises(WatermarkError, match="not a date") as caught:
        read_watermark(source(sql=QUERY, connection="source"), named, None, {"system": "HR"})
    assert SECRET not in caught.value.message and SECRET not in str(caught.value.details)
    with pytest.raises(WatermarkError, match="returned no row"):
        read_watermark(source(sql="SELECT d FROM wm WHERE 1 = 0", connection="source"),
                       named, None, {})
    with pytest.raises(WatermarkError, match="no such table: nowhere"):
        read_watermark(source(sql="SELECT d FROM nowhere", connection="source"),
                       named, None, {})
    with pytest.raises(MissingParameter, match=":system"):
        read_watermark(source(sql=QUERY, connection="source"), named, None, {})
    with pytest.raises(UnknownConnection, match="'warehouse'"):
        read_watermark(source(sql=QUERY, connection="warehouse"), named, None,
                       {"system": "ORDER"})
    with pytest.raises(WatermarkError, match="only watermarks given"):
        read_watermark(source(sql=QUERY, connection="source"), None, None, {})


@pytest.mark.parametrize("sql, words", [
    ("DELETE FROM wm", "is not a SELECT"),
    ("SELECT '2024-01-01'; DELETE FROM wm", "more than one statement"),
    ("ATTACH '{dir}/new.db' AS n", "is not a SELECT"),
    ("PRAGMA query_only = OFF", "is not a SELECT"),
    ("VACUUM INTO '{dir}/copy.db'", "is not a SELECT"),
])
def test_a_query_that_is_not_one_select_is_refused(named: Sources, tmp_path: Path,
                                                   sql: str, words: str) -> None:
    with pytest.raises(WatermarkError, match=words):
        read_watermark(source(sql=sql.format(dir=tmp_path), connection="source"), named,
                       None, {})
    _assert_untouched(named, tmp_path)


@pytest.mark.parametrize("sql", ["DELETE FROM wm", "ATTACH '{dir}/new.db' AS n",
                                 "PRAGMA query_only = OFF", "CREATE TEMP TABLE t (x)"])
def test_a_sqlite_query_reads_only_past_the_keyword_rule_too(
        named: Sources, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str) -> None:
    """With the text rule out of the way, the connection's own guards (query_only and
    an authorizer) refuse what writes; the pooled connection writes again after."""
    monkeypatch.setattr(watermark_query, "problem_of", lambda _sql: None)
    with pytest.raises(WatermarkError, match="read-only"):
        read_watermark(source(sql=sql.format(dir=tmp_path), connection="source"), named,
                       None, {})
    _assert_untouched(named, tmp_path)
    with named.connections.engine("source").begin() as conn:
        conn.execute(text("INSERT INTO wm VALUES ('NEW', '2024-02-01')"))
    _assert_untouched(named, tmp_path, rows=5)


def _assert_untouched(named: Sources, tmp_path: Path, rows: int = 4) -> None:
    engine = named.connections.engine("source")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM wm")).scalar() == rows
    assert sorted(os.listdir(tmp_path)) == ["source.db", "watermarks"]


def test_a_sqlite_query_stops_at_its_time_limit(named: Sources) -> None:
    endless = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
               "SELECT max(i) FROM n")
    started = time.monotonic()
    with pytest.raises(WatermarkError, match="timed out after 0.3 s"):
        watermark_query.first_value(named.connections.engine("source"), "source",
                                    endless, {}, timeout=0.3)
    assert time.monotonic() - started < 3


def test_a_file_holds_an_iso_date_under_the_watermark_dir(tmp_path: Path,
                                                          named: Sources) -> None:
    (named.root / "order").mkdir()
    path = named.root / "order" / "watermark"
    path.write_text("2024-02-29\n# written by the extract\n")
    assert read_watermark(source(file="order/watermark"), named, None, {}) == \
        date(2024, 2, 29)
    assert read_watermark(source(file=str(path)), named, None, {}) == date(2024, 2, 29)
    path.write_text(f"{SECRET}\n")
    with pytest.raises(WatermarkError, match="does not hold an ISO date") as caught:
        read_watermark(source(file="order/watermark"), named, None, {})
    assert SECRET not in caught.value.message
    with pytest.raises(WatermarkError, match="does not exist"):
        read_watermark(source(file="absent"), named, None, {})


@pytest.mark.parametrize("file", ["/etc/passwd", "/proc/self/environ", "../source.db",
                                  "order/../../source.db", "link/passwd", "escape"])
def test_a_file_outside_the_watermark_dir_is_refused_when_saved_and_read(
        named: Sources, file: str) -> None:
    os.symlink("/etc", named.root / "link")
    os.symlink("/etc/passwd", named.root / "escape")
    with pytest.raises(WatermarkError, match="resolves outside") as caught:
        read_watermark(source(file=file), named, None, {})
    assert "root:" not in caught.value.message
    with pytest.raises(InvalidRequest, match=r"watermark\.file: resolves outside"):
        check_sources(_config({"file": file}), Requester(Actor("t")), named.root)


def test_a_fifo_or_a_device_is_refused_at_once(named: Sources) -> None:
    os.mkfifo(named.root / "fifo")
    os.symlink("/dev/zero", named.root / "zero")  # outside, as any device is
    started = time.monotonic()
    with pytest.raises(WatermarkError, match="not a regular file"):
        read_watermark(source(file="fifo"), named, None, {})
    with pytest.raises(WatermarkError, match="resolves outside"):
        read_watermark(source(file="zero"), named, None, {})
    assert time.monotonic() - started < 1


def _config(watermark: dict[str, object]) -> object:
    return parse_batch_config({"valid_systems": ["S"], "valid_stages": ["A"],
                               "system_stage_mapping": [{"system": "S", "stages": ["A"],
                                                         "watermark": watermark}],
                               "job_group_mapping": [{"stage": "A", "job_group": ["G"]}],
                               "job_groups": [{"name": "G", "jobs": [{"name": "g",
                                                                      "type": "noop"}]}]})


def test_saving_a_sql_watermark_needs_the_sql_scope(tmp_path: Path) -> None:
    config = _config({"sql": QUERY, "connection": "source"})
    with pytest.raises(Forbidden, match=r"system_stage_mapping\[0\]\.watermark\.sql.*'sql'"):
        check_sources(config, Requester(Actor("t"), frozenset({"read", "submit"})), tmp_path)
    check_sources(config, Requester(Actor("t"), frozenset({"submit", "sql"})), tmp_path)
    with pytest.raises(InvalidRequest, match=r"watermark\.sql: is not a SELECT"):
        check_sources(_config({"sql": "DELETE FROM wm", "connection": "source"}),
                      Requester(Actor("t"), frozenset({"submit", "sql"})), tmp_path)


def test_a_given_watermark_comes_from_the_command_line(named: Sources) -> None:
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


@pytest.fixture
def pg(pg_url: str, tmp_path: Path) -> Iterator[tuple[Sources, str]]:
    table = f"wm_{uuid.uuid4().hex[:8]}"
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {table} (d date, secret text)"))
        conn.execute(text(f"INSERT INTO {table} VALUES ('2024-01-05', '{SECRET}')"))
    connections = Connections(load_config(environ={
        "JOBSERVER_CONNECTIONS__PG__URL": pg_url}).connections)
    try:
        yield Sources(connections, tmp_path), table
    finally:
        connections.dispose()
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {table}"))
        engine.dispose()


def test_a_postgres_date_column_is_read_as_a_date(pg: tuple[Sources, str]) -> None:
    sources, table = pg
    wm = source(sql="SELECT CAST(:d AS date) + 1", connection="pg")
    assert read_watermark(wm, sources, None, {"d": "2024-12-31"}) == date(2025, 1, 1)
    assert read_watermark(source(sql=f"SELECT max(d) FROM {table}", connection="pg"),
                          sources, None, {}) == date(2024, 1, 5)


@pytest.mark.parametrize("sql, words", [
    ("WITH gone AS (DELETE FROM {t} RETURNING d) SELECT max(d) FROM gone", "read-only"),
    ("SELECT secret FROM {t}", "not a date"),
    ("SELECT CAST(secret AS date) FROM {t}", "InvalidDatetimeFormat"),
    ("SELECT query_to_xml('SELECT * FROM ' || quote_ident(secret), true, true, '') FROM {t}",
     "UndefinedTable"),
    ("SELECT d FROM {t} FOR UPDATE", "read-only"),
])
def test_a_postgres_query_reads_only_and_its_errors_echo_nothing(
        pg: tuple[Sources, str], sql: str, words: str) -> None:
    sources, table = pg
    with pytest.raises(WatermarkError, match=words) as caught:
        read_watermark(source(sql=sql.format(t=table), connection="pg"), sources, None, {})
    assert SECRET not in caught.value.message and SECRET not in str(caught.value.details)
    with sources.connections.engine("pg").connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 1


def test_a_postgres_query_stops_at_its_time_limit(pg: tuple[Sources, str]) -> None:
    started = time.monotonic()
    with pytest.raises(WatermarkError, match="timed out after 0.3 s"):
        watermark_query.first_value(pg[0].connections.engine("pg"), "pg",
                                    "SELECT pg_sleep(5)", {}, timeout=0.3)
    assert time.monotonic() - started < 3


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
