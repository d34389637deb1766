"""SQL steps on real databases: a SQLite file and a scratch schema on PostgreSQL.

The step bodies run directly for what they do to the data (rows moved, parameters
bound, timeouts); a job on a real store and runner shows the step's ``records_out``
in its audit and a pause or discard interrupting a running statement; the API refuses
unknown connections and tokens without the ``sql`` scope.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.connections import Connections
from jobserver.runner import Runner
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import Operation, State
from jobserver.steps import StepContext, step_types
from jobserver.steps.python import PythonSteps
from jobserver.steps.sql import SqlSteps
from jobserver.store import Store
from tests.helpers import FakeLease, job_spec, wait_for

CONFIG = load_config(environ={})
#: A SQLite statement that runs until interrupted, in constant memory.
ENDLESS_SQLITE = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                  "SELECT count(*) FROM c")


def connections(**urls: str) -> Connections:
    environ = {f"JOBSERVER_CONNECTIONS__{name.upper()}__URL": url for name, url in urls.items()}
    return Connections(load_config(environ=environ).connections)


def context(params: dict[str, Any] | None = None) -> StepContext:
    return StepContext(job_id=1, job_name="j", step="s", attempt=1, job_attempt=1, fence=1,
                       node="n1", params=params or {}, shell=CONFIG.steps.shell)


def sql_step(*statements: str, connection: str = "db", **fields: Any) -> dict[str, Any]:
    return {"connection": connection, "statements": list(statements), **fields}


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[tuple[Connections, str]]:
    """A SQLite file with a source table of three orders, one on another day."""
    url = f"sqlite:///{tmp_path / 'warehouse.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE src (id INTEGER, d TEXT, note TEXT)"))
        conn.execute(text("CREATE TABLE stg (id INTEGER, d TEXT, note TEXT)"))
        conn.execute(text("INSERT INTO src VALUES (1, '2024-01-02', 'a'), "
                          "(2, '2024-01-02', 'b'), (3, '2024-01-03', 'c')"))
    engine.dispose()
    named = connections(db=url)
    yield named, url
    named.dispose()


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[tuple[str, str]]:
    """A scratch schema in the test run's PostgreSQL database: (url, schema)."""
    schema = f"sqlsteps_{uuid.uuid4().hex[:8]}"
    url = "postgresql+psycopg2://" + pg_url.split("://", 1)[1]
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
        conn.execute(text(f"CREATE TABLE {schema}.src (id int, d date, note text)"))
        conn.execute(text(f"CREATE TABLE {schema}.stg (id int, d date, note text)"))
        conn.execute(text(f"INSERT INTO {schema}.src VALUES (1, '2024-01-02', 'a'), "
                          "(2, '2024-01-02', 'b'), (3, '2024-01-03', 'c')"))
    yield url, schema
    with engine.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


def rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(query))]
    finally:
        engine.dispose()


# -- the step body ----------------------------------------------------------------------
def test_sqlite_moves_rows_with_bound_params_and_reports_records_out(sqlite_db) -> None:
    named, url = sqlite_db
    outcome = SqlSteps(named).run(sql_step(
        "INSERT INTO stg SELECT * FROM src WHERE d = :business_date",
        "UPDATE stg SET note = :note WHERE d = :business_date",
        "SELECT count(*) FROM stg", params={"note": "loaded"}),
        context({"business_date": "2024-01-02", "system": "ORDER"}))
    assert outcome.state is State.SUCCEED, outcome.error
    assert outcome.metrics == {"records_out": 4, "statements": 3}
    assert rows(url, "SELECT id, note FROM stg ORDER BY id") == [(1, "loaded"), (2, "loaded")]
    lines = outcome.output.splitlines()
    assert "2 row(s) affected" in lines[0] and "2 row(s) affected" in lines[1]
    assert "returned rows" in lines[2] and "records_out 4" in lines[3]


def test_an_injection_string_stays_data_and_the_step_params_win(sqlite_db) -> None:
    named, url = sqlite_db
    evil = "x'); DROP TABLE src; --"
    outcome = SqlSteps(named).run(
        sql_step("INSERT INTO stg VALUES (9, :business_date, :note)",
                 params={"note": evil}),
        context({"business_date": "2024-01-09", "note": "the job's"}))
    assert outcome.state is State.SUCCEED, outcome.error
    assert rows(url, "SELECT note FROM stg") == [(evil,)]
    assert rows(url, "SELECT count(*) FROM src") == [(3,)]


def test_a_parameter_nobody_supplies_fails_the_step_before_anything_runs(sqlite_db) -> None:
    named, url = sqlite_db
    outcome = SqlSteps(named).run(sql_step(
        "INSERT INTO stg SELECT * FROM src",
        "DELETE FROM stg WHERE d = :business_date AND id = :batch_id"),
        context({"business_date": "2024-01-02"}))
    assert outcome.state is State.ERROR and not outcome.retryable
    assert ":batch_id" in outcome.error and "statements[1]" in outcome.error
    assert rows(url, "SELECT count(*) FROM stg") == [(0,)]
    cast = SqlSteps(named).run(sql_step("SELECT :business_date::date"),
                               context({"business_date": "2024-01-02"}))
    assert cast.state is State.ERROR and "CAST(:business_date AS type)" in cast.error


def test_a_failing_statement_rolls_back_the_whole_transaction(sqlite_db) -> None:
    named, url = sqlite_db
    outcome = SqlSteps(named).run(sql_step("INSERT INTO stg SELECT * FROM src",
                                           "INSERT INTO missing_table VALUES (1)"), context())
    assert outcome.state is State.ERROR and not outcome.retryable
    assert outcome.error.startswith("statements[1]: ") and "missing_table" in outcome.error
    assert rows(url, "SELECT count(*) FROM stg") == [(0,)]


def test_an_unknown_connection_fails_the_step_naming_it(sqlite_db) -> None:
    named, _ = sqlite_db
    outcome = SqlSteps(named).run(sql_step("SELECT 1", connection="nope"), context())
    assert outcome.state is State.ERROR and "'nope'" in outcome.error


def test_sqlite_timeout_interrupts_the_statement(sqlite_db) -> None:
    named, _ = sqlite_db
    started = time.monotonic()
    outcome = SqlSteps(named).run(sql_step(ENDLESS_SQLITE, timeout=0.3), context())
    assert outcome.state is State.ERROR and "timed out after 0.3 s" in outcome.error
    assert time.monotonic() - started < 2


def test_postgres_moves_rows_and_reports_records_out(pg_schema) -> None:
    url, schema = pg_schema
    named = connections(db=url)
    try:
        outcome = SqlSteps(named).run(sql_step(
            f"INSERT INTO {schema}.stg SELECT * FROM {schema}.src WHERE d = :business_date",
            f"DELETE FROM {schema}.src WHERE d = CAST(:business_date AS date) - 1"),
            context({"business_date": "2024-01-03"}))
    finally:
        named.dispose()
    assert outcome.state is State.SUCCEED, outcome.error
    assert outcome.metrics == {"records_out": 3, "statements": 2}
    assert rows(url, f"SELECT id FROM {schema}.stg") == [(3,)]
    assert rows(url, f"SELECT count(*) FROM {schema}.src") == [(1,)]


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_postgres_statement_timeout_ends_the_step_error(pg_schema, driver: str) -> None:
    url, schema = pg_schema
    named = connections(db=url.replace("+psycopg2", f"+{driver}"))
    started = time.monotonic()
    try:
        outcome = SqlSteps(named).run(sql_step(
            f"INSERT INTO {schema}.stg SELECT * FROM {schema}.src",
            "SELECT pg_sleep(20)", timeout=0.5), context())
    finally:
        named.dispose()
    assert outcome.state is State.ERROR and "timed out after 0.5 s" in outcome.error
    assert "statements[1]" in outcome.error and time.monotonic() - started < 3
    assert rows(url, f"SELECT count(*) FROM {schema}.stg") == [(0,)], "not rolled back"


def test_a_cancel_interrupts_a_running_postgres_statement(pg_schema) -> None:
    url, _ = pg_schema
    named, ctx = connections(db=url), context()
    marker = uuid.uuid4().hex
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(outcome=SqlSteps(named).run(
        sql_step(f"SELECT pg_sleep(30) /* {marker} */"), ctx)))
    thread.start()
    try:
        wait_for(lambda: _active(url, marker), timeout=5, what="the statement to run")
        ctx.cancelled.set()
        cancelled_at = time.monotonic()
        thread.join(5)
        assert time.monotonic() - cancelled_at < 2
        assert result["outcome"].state is State.STOPPED
        assert not _active(url, marker), "the statement still runs on the server"
    finally:
        ctx.cancelled.set()
        thread.join()
        named.dispose()


def _active(url: str, marker: str) -> bool:
    return rows(url, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                     f"AND query LIKE '%{marker}%' AND pid <> pg_backend_pid()")[0][0] > 0


# -- as a job on a runner ---------------------------------------------------------------
class SqlRunner:
    def __init__(self, store: Store, named: Connections) -> None:
        self.store = store
        self.runner = Runner(store, step_types(PythonSteps(), named), CONFIG.steps.shell, 2)
        self.runner.start()

    def run(self, steps: list[dict[str, Any]], **fields: Any) -> int:
        spec = parse_job(json.dumps(job_spec(steps=steps, **fields)))
        job, _ = self.store.jobs.submit(spec, validate_job(spec, Policy(lambda _: False, None,
                                                                        ["db"])))
        for claimed in self.store.runs.claim("n1", FakeLease(self.store), 10):
            self.runner.submit(claimed)
        return job.id

    def close(self) -> None:
        self.runner.cancel_all("test over")
        self.runner.wait_idle(10)
        self.runner.shutdown()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'jobserver.db'}")
    store.upgrade()
    yield store
    store.dispose()


def test_a_job_records_the_sql_steps_records_out(sqlite_store: Store, sqlite_db) -> None:
    named, url = sqlite_db
    harness = SqlRunner(sqlite_store, named)
    try:
        job_id = harness.run(params={"business_date": "2024-01-02"}, steps=[
            {"name": "load", "type": "sql", "connection": "db", "statements": [
                "INSERT INTO stg SELECT * FROM src WHERE d = :business_date"]}])
        job = wait_for(lambda: (j := sqlite_store.jobs.get(job_id)).state is State.SUCCEED
                       and j, timeout=10, what="the job to succeed")
    finally:
        harness.close()
    assert job.steps[0].metrics == {"records_out": 2, "statements": 1}
    assert "2 row(s) affected" in job.steps[0].output


@pytest.mark.parametrize("operation", [Operation.PAUSE, Operation.DISCARD])
def test_pause_or_discard_interrupts_a_running_statement(sqlite_store: Store, sqlite_db,
                                                         operation: Operation) -> None:
    named, _ = sqlite_db
    harness = SqlRunner(sqlite_store, named)
    try:
        job_id = harness.run(steps=[{"name": "endless", "type": "sql", "connection": "db",
                                     "statements": [ENDLESS_SQLITE]}])
        wait_for(lambda: sqlite_store.jobs.get(job_id).steps[0].state is State.RUNNING,
                 timeout=5, what="the statement to start")
        time.sleep(0.2)  # let the statement get under way: the guard must interrupt it
        sqlite_store.jobs.apply(job_id, operation)
        applied = time.monotonic()
        assert harness.runner.wait_idle(2), "the statement was not interrupted"
        assert time.monotonic() - applied < 2
    finally:
        harness.close()
    final = State.STOPPED if operation is Operation.PAUSE else State.DISCARDED
    job = sqlite_store.jobs.get(job_id)
    assert job.state is final and job.steps[0].state is final


# -- the API ------------------------------------------------------------------------------
@pytest.fixture
def client(sqlite_store: Store, tmp_path: Path) -> FlaskClient:
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path / "data"),
                                  "JOBSERVER_CONNECTIONS__WAREHOUSE__URL":
                                      f"sqlite:///{tmp_path / 'w.db'}"})
    return create_app(config, store=sqlite_store).test_client()


def post(client: FlaskClient, secret: str, connection: str = "warehouse") -> Any:
    body = job_spec(steps=[{"name": "a", "type": "noop"},
                           {"name": "load", "type": "sql", "connection": connection,
                            "statements": ["SELECT 1"]}])
    return client.post("/api/v1/jobs", data=json.dumps(body), content_type="application/json",
                       headers={"Authorization": f"Bearer {secret}"})


def test_sql_steps_need_the_sql_scope(client: FlaskClient, sqlite_store: Store) -> None:
    _, submit_only = sqlite_store.tokens.create("plain", ["submit"])
    _, shell = sqlite_store.tokens.create("sheller", ["submit", "shell"])
    _, sql = sqlite_store.tokens.create("loader", ["submit", "sql"])
    for secret in (submit_only, shell):
        reply = post(client, secret)
        assert reply.status_code == 403
        error = reply.get_json()["error"]
        assert error["details"][0]["field"] == "steps[1].type" and "'sql'" in error["message"]
    assert post(client, sql).status_code == 201


def test_an_unknown_connection_is_refused_at_submit(client: FlaskClient,
                                                    sqlite_store: Store) -> None:
    _, sql = sqlite_store.tokens.create("loader", ["submit", "sql"])
    reply = post(client, sql, connection="elsewhere")
    assert reply.status_code == 422
    error = reply.get_json()["error"]
    assert error["details"][0]["field"] == "steps[1].connection"
    assert "'elsewhere'" in error["message"]
    assert sqlite_store.jobs.list()[0] == []


CAST = "SELECT :business_date::date"
CAST_MESSAGE = ":business_date:: is not read as a parameter; write CAST(:business_date AS type)"


def refusal(reply: Any) -> dict[str, Any]:
    assert reply.status_code == 422, reply.get_data(True)
    return reply.get_json()["error"]


def test_a_parameter_cast_is_refused_at_submit_naming_the_statement(
        client: FlaskClient, sqlite_store: Store) -> None:
    """``:d::date`` is not a parameter (SQLAlchemy reads none there): refused when the
    job is submitted, not when its step runs."""
    _, secret = sqlite_store.tokens.create("loader", ["submit", "sql"])
    body = job_spec(steps=[{"name": "a", "type": "noop"},
                           {"name": "load", "type": "sql", "connection": "warehouse",
                            "statements": ["SELECT 1", CAST]}])
    error = refusal(client.post("/api/v1/jobs", json=body,
                                headers={"Authorization": f"Bearer {secret}"}))
    assert error["details"] == [{"field": "steps[1].statements[1]", "message": CAST_MESSAGE}]
    assert error["message"] == f"steps[1].statements[1]: {CAST_MESSAGE}"
    assert sqlite_store.jobs.list()[0] == []


def test_a_parameter_cast_in_a_view_or_batch_template_is_refused_at_save(
        client: FlaskClient, sqlite_store: Store) -> None:
    from tests.integration.test_batches_api import seed

    _, secret = sqlite_store.tokens.create("definer", ["read", "admin", "submit", "sql"])
    auth = {"Authorization": f"Bearer {secret}"}
    sql = {"name": "load", "type": "sql", "connection": "warehouse", "statements": [CAST]}
    view = {"structure": {"fields": [{"name": "id", "type": "bigint"}]},
            "transformation": {"job": {"steps": [sql]}}}
    error = refusal(client.put("/api/v1/view-definitions/app.x/V", json=view, headers=auth))
    assert [d["field"] for d in error["details"]] == [
        "transformation.job.steps[0].statements[0]"], error
    assert client.get("/api/v1/view-definitions/app.x/V", headers=auth).status_code == 404
    config = seed()
    config["jobs"].append(sql)
    config["job_groups"][0]["jobs"] = ["load"]
    error = refusal(client.put("/api/v1/batches/configs/seed", json=config, headers=auth))
    assert [d["field"] for d in error["details"]] == ["job_groups[0].jobs[0].statements[0]"]
    assert client.get("/api/v1/batches/configs/seed", headers=auth).status_code == 404
