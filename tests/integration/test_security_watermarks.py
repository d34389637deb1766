"""Batch watermarks obey the security model (issue 33, items 2 and 3), tried as an
attacker would against a real ``jobserver serve`` on each store: saving a watermark
that runs SQL needs ``sql``; a query runs read-only and its 409 shows nothing it read;
a file lies under ``batches.watermark_dir``, is read bounded, and nothing of it is
echoed.

Each node reaches two warehouses holding a ``secrets`` table: a SQLite file in its
data directory (``wh_sqlite``) and a PostgreSQL database (``wh_pg``). A config saved
"before the rules" is written straight into the store, as an old node stored it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jobserver.batches.spec import parse_batch_config
from tests.integration.attack import (AttackNode, _fresh_database, attack_node,  # noqa: F401
                                      unique)

SECRET = "hunter2-SECRET-VALUE"
CONNECTIONS = ("wh_sqlite", "wh_pg")


@pytest.fixture(scope="module")
def attack_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The nodes' two warehouses: a SQLite file per node, one PostgreSQL database."""
    url, drop = _fresh_database("postgres", tmp_path_factory.mktemp("wh"))
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE secrets (name TEXT, value TEXT)"))
        conn.execute(text(f"INSERT INTO secrets VALUES ('api', '{SECRET}')"))
    engine.dispose()
    try:
        yield {"JOBSERVER_CONNECTIONS__WH_SQLITE__URL": "sqlite:///{data_dir}/wh.db",
               "JOBSERVER_CONNECTIONS__WH_PG__URL": url}
    finally:
        drop()


@pytest.fixture(scope="module")
def node(attack_node: AttackNode) -> AttackNode:  # noqa: F811
    """The node, with its SQLite warehouse's secrets table."""
    with sqlite3.connect(attack_node.data_dir / "wh.db") as conn:
        conn.execute("CREATE TABLE secrets (name TEXT, value TEXT)")
        conn.execute("INSERT INTO secrets VALUES ('api', ?)", (SECRET,))
    return attack_node


def secrets_left(node: AttackNode, pg_url: str) -> tuple[int, int]:
    """The rows of each warehouse's secrets table."""
    with sqlite3.connect(node.data_dir / "wh.db") as conn:
        lite = conn.execute("SELECT count(*) FROM secrets").fetchone()[0]
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            pg = conn.execute(text("SELECT count(*) FROM secrets")).scalar()
    finally:
        engine.dispose()
    return lite, pg


def config(system: str, watermark: dict[str, Any]) -> dict[str, Any]:
    return {"valid_systems": [system], "valid_stages": ["STG"],
            "system_stage_mapping": [{"system": system, "stages": ["STG"],
                                      "watermark": watermark}],
            "job_group_mapping": [{"system": system, "stage": "STG", "job_group": ["G"]}],
            "job_groups": [{"name": "G", "jobs": [{"name": "n", "type": "noop"}]}]}


def put(node: AttackNode, watermark: dict[str, Any], token: str) -> tuple[str, int, Any]:
    """PUT a new config with ``watermark``: its system, the status and the reply."""
    name, system = unique("wm"), unique("S")
    status, reply = node.call("PUT", f"/api/v1/batches/configs/{name}",
                              config(system, watermark), token)
    return system, status, reply


def stored_before_the_rules(node: AttackNode, watermark: dict[str, Any]) -> str:
    """A config with ``watermark`` written straight into the store; its system."""
    system = unique("S")
    node.store.batch_configs.put(parse_batch_config({"name": unique("old"),
                                                     **config(system, watermark)}))
    return system


def run(node: AttackNode, system: str, timeout: float = 30.0) -> tuple[int, Any]:
    return node.call("POST", "/api/v1/batches/run", {"system": system, "location": "IN"},
                     "submit", timeout=timeout)


def refused(status: int, reply: Any, expected: int, *hidden: str) -> dict[str, Any]:
    """The error of a refusal, checked to quote none of ``hidden``."""
    assert status == expected, (status, reply)
    body = json.dumps(reply)
    for value in (SECRET, *hidden):
        assert value not in body, body
    return reply["error"]


def no_batches(node: AttackNode, system: str) -> None:
    status, reply = node.call("GET", f"/api/v1/batches?system={system}", token="read")
    assert status == 200 and reply["batches"] == [], reply


def nothing_stored(node: AttackNode, system: str) -> None:
    no_batches(node, system)
    assert all(system not in record.systems for record in node.store.batch_configs.list())


# -- 2. a watermark that runs SQL ---------------------------------------------------------
def test_a_submit_token_cannot_save_a_sql_watermark(node: AttackNode) -> None:
    for connection in CONNECTIONS:
        watermark = {"sql": "SELECT max(value) FROM secrets", "connection": connection}
        system, status, reply = put(node, watermark, "submit")
        failure = refused(status, reply, 403)
        assert failure["details"][0]["field"] == "system_stage_mapping[0].watermark.sql"
        assert "'sql' scope" in failure["message"], failure
        nothing_stored(node, system)
        _, status, reply = put(node, watermark, "sql")  # the scope is the scope
        assert status == 201, reply


def test_a_watermark_that_writes_leaves_the_rows(node: AttackNode,
                                                 attack_env: dict[str, str]) -> None:
    for connection in CONNECTIONS:
        for sql in ("DELETE FROM secrets", "SELECT '2024-01-01'; DELETE FROM secrets"):
            system, status, reply = put(node, {"sql": sql, "connection": connection},
                                        "admin")
            assert refused(status, reply, 422)["details"][0]["field"] == \
                "system_stage_mapping[0].watermark.sql"
            nothing_stored(node, system)
            system = stored_before_the_rules(node, {"sql": sql, "connection": connection})
            refused(*run(node, system), 409)
            no_batches(node, system)
    # One statement that reads on its face and writes inside: the transaction refuses.
    cte = "WITH gone AS (DELETE FROM secrets RETURNING value) SELECT max(value) FROM gone"
    system, status, reply = put(node, {"sql": cte, "connection": "wh_pg"}, "admin")
    assert status == 201, reply
    failure = refused(*run(node, system), 409)
    assert "read-only" in failure["message"], failure
    no_batches(node, system)
    assert secrets_left(node, attack_env["JOBSERVER_CONNECTIONS__WH_PG__URL"]) == (1, 1)


def test_a_query_returning_a_secret_gets_a_409_without_it(node: AttackNode) -> None:
    for connection, sql in (("wh_sqlite", "SELECT value FROM secrets"),
                            ("wh_pg", "SELECT value FROM secrets"),
                            ("wh_pg", "SELECT CAST(value AS date) FROM secrets"),
                            ("wh_pg", "SELECT query_to_xml('SELECT * FROM ' || "
                                      "quote_ident(value), true, true, '') FROM secrets")):
        system, status, reply = put(node, {"sql": sql, "connection": connection}, "admin")
        assert status == 201, reply
        failure = refused(*run(node, system), 409)
        assert failure["code"] == "watermark_unreadable", failure
        no_batches(node, system)


# -- 3. a file watermark ------------------------------------------------------------------
def test_a_file_outside_the_watermark_dir_is_refused_and_echoes_nothing(
        node: AttackNode) -> None:
    passwd = open("/etc/passwd", encoding="utf-8").read()[:40]
    environ = open("/proc/self/environ", "rb").read().split(b"\0")[0].decode()[:40]
    for file in ("/etc/passwd", "/proc/self/environ", "../../../../../../etc/passwd"):
        system, status, reply = put(node, {"file": file}, "submit")
        failure = refused(status, reply, 422, passwd, environ, "root:", "JOBSERVER_")
        assert failure["details"][0]["field"] == "system_stage_mapping[0].watermark.file"
        assert "resolves outside batches.watermark_dir" in failure["message"]
        nothing_stored(node, system)
        system = stored_before_the_rules(node, {"file": file})
        failure = refused(*run(node, system), 409, passwd, environ, "root:",
                          "JOBSERVER_")
        assert "resolves outside batches.watermark_dir" in failure["message"], failure


def test_a_symlink_out_of_the_watermark_dir_is_refused(node: AttackNode) -> None:
    root = node.data_dir / "watermarks"
    root.mkdir(exist_ok=True)
    link = unique("link")
    os.symlink("/etc/passwd", root / link)
    system, status, reply = put(node, {"file": link}, "submit")
    refused(status, reply, 422, "root:")
    nothing_stored(node, system)
    system = stored_before_the_rules(node, {"file": link})
    refused(*run(node, system), 409, "root:")


def test_a_fifo_does_not_hang_the_api(node: AttackNode) -> None:
    root = node.data_dir / "watermarks"
    root.mkdir(exist_ok=True)
    fifo = unique("fifo")
    os.mkfifo(root / fifo)
    system, status, reply = put(node, {"file": fifo}, "submit")
    assert status == 201, reply  # under the directory: saved; read, it is no file
    answers: list[tuple[int, Any]] = []
    started = time.monotonic()
    runner = threading.Thread(target=lambda: answers.append(run(node, system, timeout=5)))
    runner.start()
    health_started = time.monotonic()
    status, _ = node.call("GET", "/healthz", timeout=1.0)
    assert status == 200 and time.monotonic() - health_started < 1.0
    runner.join(10)
    assert answers and time.monotonic() - started < 5, answers
    failure = refused(*answers[0], 409)
    assert "is not a regular file" in failure["message"], failure
