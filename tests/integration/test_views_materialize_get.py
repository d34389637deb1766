"""Schedoscope's ``GET /api/v1/materialize/<pattern>`` over real HTTP (the API served
by werkzeug in a thread, called with urllib as ``curl`` would): what it answers, that
it does what ``POST /api/v1/views/materialize`` does (a job per partition to transform,
the partitions' states), and that it needs a token with the ``submit`` scope."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobserver.store import Store
from tests.helpers import live_api
from tests.integration.nodes import http_call

CONFIG_TOKEN = "views-get-config-token-0123456789"
PARAMS = [{"name": n} for n in ("shop", "year", "month", "day")]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}
SAME = {"shop": "$shop", "year": "$year", "month": "$month", "day": "$day"}
# Schedoscope's form: slashes at both ends, a date range, percent-encoded parentheses.
PATTERN = "/t.stage/Clean/SHOP10/rymd%2820150504-20150503%29/"
DAYS = ("03", "04")
pytestmark = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


@pytest.fixture
def base(store: Store, tmp_path: Path) -> Iterator[str]:
    with live_api(store, tmp_path / "data", CONFIG_TOKEN) as url:
        views = [
            {"name": "t.src/Raw", "parameters": PARAMS, "structure": FIELDS,
             "transformation": "noop",
             "location": f"{tmp_path}/raw/${{shop}}/${{year}}${{month}}${{day}}"},
            {"name": "t.stage/Clean", "parameters": PARAMS, "structure": FIELDS,
             "dependencies": [{"view": "t.src/Raw", "map": SAME}],
             "transformation": {"job": {"steps": [{"name": "clean", "type": "noop"}]}}}]
        for view in views:
            status, body = http_call(f"{url}/api/v1/view-definitions/{view['name']}", "PUT",
                                     view, CONFIG_TOKEN)
            assert status == 201, body
        for day in DAYS:
            (tmp_path / "raw" / "SHOP10" / f"201505{day}").mkdir(parents=True)
            (tmp_path / "raw" / "SHOP10" / f"201505{day}" / "_SUCCESS").touch()
        yield url


def call(url: str, token: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    return http_call(url, method, body, token)


def job_count(base: str) -> int:
    status, body = call(f"{base}/api/v1/jobs?limit=500", CONFIG_TOKEN)
    assert status == 200, body
    return len(body["jobs"])


def test_get_materialize_answers_the_decisions_and_does_what_the_post_does(
        base: str, store: Store) -> None:
    _, submitter = store.tokens.create("ci-submit", ["submit"])
    clean = {f"t.stage/Clean/SHOP10/2015/05/{day}" for day in DAYS}
    raw = {f"t.src/Raw/SHOP10/2015/05/{day}" for day in DAYS}

    status, planned = call(f"{base}/api/v1/materialize{PATTERN}?plan=true", submitter)
    assert status == 200, planned
    assert (planned["plan"], planned["counts"]) == (True, {"set": 2, "transform": 2})
    assert job_count(base) == 0  # a plan runs nothing

    status, reply = call(f"{base}/api/v1/materialize{PATTERN}", submitter)
    assert status == 200, reply
    assert (reply["mode"], reply["plan"], reply["counts"]) == (
        "DEFAULT", False, {"set": 2, "transform": 2})
    decided = {d["view"]: d for d in reply["decisions"]}
    assert set(decided) == clean | raw
    for path in clean:
        assert (decided[path]["action"], decided[path]["reason"]) == (
            "transform", "never transformed")
        assert decided[path]["upstream"] == []  # its dependency is set: no job to wait for
    for path in raw:
        assert decided[path]["action"] == "set" and decided[path]["job_id"] is None
    jobs = {path: decided[path]["job_id"] for path in clean}
    for path, job_id in jobs.items():  # the jobs exist, named after their partitions
        status, job = call(f"{base}/api/v1/jobs/{job_id}", CONFIG_TOKEN)
        assert status == 200 and (job["name"], job["state"]) == (f"view {path}", "READY")
    assert job_count(base) == 2
    status, listed = call(f"{base}/api/v1/views?pattern=t.stage/Clean/SHOP10/"
                          "rymd(20150503-20150504)&dependencies=true", CONFIG_TOKEN)
    assert status == 200, listed
    assert {v["path"]: (v["status"], v["job_id"]) for v in listed["views"]} == {
        **{path: ("waiting", job_id) for path, job_id in jobs.items()},
        **{path: ("materialized", None) for path in raw}}

    # The POST of the same pattern now finds the GET's jobs in flight: it joins them.
    status, again = call(f"{base}/api/v1/views/materialize", submitter, "POST",
                         {"pattern": PATTERN})
    assert status == 200, again
    assert again["counts"] == {"join": 2, "skip": 2}
    assert {d["view"]: d["job_id"] for d in again["decisions"] if d["action"] == "join"} \
        == jobs
    assert job_count(base) == 2


def test_get_materialize_needs_the_submit_scope(base: str, store: Store) -> None:
    token, reader = store.tokens.create("dashboard", ["read"])
    status, body = call(f"{base}/api/v1/materialize{PATTERN}", reader)
    assert status == 403, body
    assert body["error"]["details"] == {"required_scope": "submit", "token": "dashboard",
                                        "token_id": token.id}
    assert http_call(f"{base}/api/v1/materialize{PATTERN}")[0] == 401  # no token
    # Refused means nothing done: no job, no view partition stored.
    assert job_count(base) == 0
    status, listed = call(f"{base}/api/v1/views", reader)
    assert (status, listed["views"]) == (200, [])


def test_the_views_query_pages_by_partitions_and_dependency_paths(
        base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobserver.views.status.MAX_LISTED_LINKS", 1)
    query = f"{base}/api/v1/views?pattern=t.stage/Clean/SHOP10/rymd(20150503-20150504)"
    status, first = call(f"{query}&dependencies=true", CONFIG_TOKEN)
    assert status == 200, first
    assert [v["path"] for v in first["views"]] == [
        "t.src/Raw/SHOP10/2015/05/03", "t.stage/Clean/SHOP10/2015/05/03",
        "t.src/Raw/SHOP10/2015/05/04"]  # a second dependency path would pass 1
    assert (first["truncated"], first["next_offset"]) == (True, 3)
    status, rest = call(f"{query}&dependencies=true&offset=3", CONFIG_TOKEN)
    assert [v["path"] for v in rest["views"]] == ["t.stage/Clean/SHOP10/2015/05/04"]
    assert (rest["truncated"], rest["next_offset"], rest["overview"]) == (
        False, None, {"receive": 4})
    status, one = call(f"{query}&limit=1", CONFIG_TOKEN)
    assert (len(one["views"]), one["next_offset"]) == (1, 1)
    status, refused = call(f"{base}/api/v1/views?offset=1", CONFIG_TOKEN)
    assert status == 422 and refused["error"]["details"][0]["field"] == "offset"
