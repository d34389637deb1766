"""The group commit runs on the store's keyed engine (``make_engine(keyed=True)``),
where PostgreSQL may keep one generic plan per prepared statement instead of planning
every batch. That is only safe if the generic plan finds every row by key whatever
the tables held when it was made: one made on empty tables must not scan them, or it
would stay in use while they grow to millions of rows."""

from __future__ import annotations

import json
import re

import pytest

from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import State
from jobserver.store import Store
from jobserver.store.batch import statement
from jobserver.store.engine import make_engine
from tests.helpers import job_spec

pytestmark = pytest.mark.postgres


def _numbered(sql: str) -> tuple[str, list[str]]:
    """``sql`` with its ``%(name)s`` placeholders as ``$1``.., and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%"), names


def _params(step_ids: list[int], job_ids: list[int]) -> dict[str, object]:
    rows = [{"i": i, "step_id": step, "step": "s", "job_id": job, "node": "n", "fence": 1,
             "attempt": 1, "step_attempt": 1, "state": State.SUCCEED.value,
             "job_state": State.SUCCEED.value, "has_next": False}
            for i, (step, job) in enumerate(zip(step_ids, job_ids))]
    return {"rows": json.dumps(rows), "step_ids": step_ids, "job_ids": job_ids,
            "next": json.dumps([{"i": 0, "step_id": step_ids[0]}]), "next_ids": step_ids[:1]}


def _generic_plan(url: str, params: dict[str, object]) -> str:
    """The plan PostgreSQL keeps for the group commit on a keyed connection once it
    settles on a generic one (forced here, so that the test need not wait for it)."""
    import psycopg

    engine = make_engine(url, 1, keyed=True)
    raw = engine.raw_connection()
    try:
        cursor = psycopg.ClientCursor(raw.driver_connection)
        sql, names = _numbered(statement())
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute("PREPARE group_commit AS " + sql)
        cursor.execute("EXPLAIN EXECUTE group_commit(" + ", ".join(["%s"] * len(names)) + ")",
                       [params[name] for name in names])
        return "\n".join(row[0] for row in cursor.fetchall())
    finally:
        raw.close()
        engine.dispose()


def test_a_generic_plan_made_on_empty_tables_finds_every_row_by_key(
        store_on_postgres: Store) -> None:
    spec = parse_job(json.dumps(job_spec(steps=[
        {"name": "a", "type": "noop"}, {"name": "b", "type": "noop", "depends_on": ["a"]}])))
    job, _ = store_on_postgres.jobs.submit(spec, validate_job(spec, Policy(lambda _: False, None)))
    steps = [step.id for step in store_on_postgres.jobs.get(job.id).steps or []]
    plan = _generic_plan(store_on_postgres.url, _params(steps, [job.id] * len(steps)))
    assert "$2" in plan  # generic: planned without the values
    assert "Seq Scan" not in plan, plan
    for table in ("steps", "jobs", "consumer_partitions"):
        assert re.search(rf"Index Scan using \w+ on {table}\b", plan), (table, plan)


def test_the_group_commit_runs_on_the_keyed_engine(store_on_postgres: Store) -> None:
    """The settings the test above relies on are the ones the group commit gets."""
    from sqlalchemy import text

    with store_on_postgres.keyed_engine.connect() as conn:
        settings = {name: conn.execute(text(f"SHOW {name}")).scalar()
                    for name in ("plan_cache_mode", "enable_seqscan")}
    assert settings == {"plan_cache_mode": "auto", "enable_seqscan": "off"}
    with store_on_postgres.engine.connect() as conn:
        assert conn.execute(text("SHOW plan_cache_mode")).scalar() == "force_custom_plan"
