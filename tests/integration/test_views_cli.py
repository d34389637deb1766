"""Views as a user drives them: ``jobserver apply`` of examples/views.yaml, then
``materialize``, ``invalidate`` and ``views`` through ``main([...])`` against a live
API (werkzeug, in a thread), and the API's refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobserver.store import Store
from tests.integration.test_apply import TOKEN, Run, run, url  # noqa: F401

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "views.yaml"
MART = "app.eci.datamart/SearchExport/SHOP10/2015/05"
pytestmark = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


def test_apply_twice_then_plan_materialize_invalidate_and_views(run: Run) -> None:
    code, out, err = run("apply", str(EXAMPLE))
    assert code == 0, err
    assert out.splitlines() == [f"view {name}: created" for name in (
        "app.eci.source/Search", "app.eci.source/Shops", "app.eci.stage/Search",
        "app.eci.stage/SearchWeekly", "app.eci.datamart/SearchExport")]
    code, out, _ = run("apply", str(EXAMPLE))
    assert code == 0 and {line.split(": ")[1] for line in out.splitlines()} == {"unchanged"}
    code, out, _ = run("materialize", "-v", MART, "--plan")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["VIEW", "ACTION", "JOB", "REASON"]
    assert lines[-1] == "plan only: nothing run (DEFAULT): no-data 108"
    rows = [re.split(r"\s{2,}", line) for line in lines[1:-1]]
    assert ["app.eci.stage/Search/SHOP10/2015/05/03", "no-data", "-",
            "all dependencies have no data"] in rows
    assert rows[0][3] == ("no _SUCCESS flag at source/search/SHOP10/"
                          "20150425/_SUCCESS")
    code, out, _ = run("materialize", "-v", MART, "-m", "SET_ONLY")
    assert code == 0 and out.splitlines()[-1] == "submitted (SET_ONLY): set 1"
    code, out, _ = run("views", "-v", MART, "-o")
    assert (code, out.strip()) == (0, "materialized 1")
    code, out, _ = run("views", "-v", MART, "-d", "-s", "receive", "-o")
    assert (code, out.strip()) == (0, "receive 107")
    code, out, _ = run("invalidate", "-v", MART)
    assert (code, out.strip()) == (0, "1 of 1 view partition(s) invalidated")
    code, out, _ = run("views", "-v", MART)
    assert code == 0 and out.splitlines()[1].split()[:2] == [MART, "receive"]


def test_bad_patterns_and_modes_exit_2_saying_where(run: Run) -> None:
    assert run("apply", str(EXAMPLE))[0] == 0
    code, _, err = run("materialize", "-v", "app.eci.datamart/SearchExport/SHOP10/rym(2015")
    assert code == 2 and "at character 46" in err and "expected ')'" in err
    code, _, err = run("materialize", "-v", "app.eci.datamart/Nope/SHOP10")
    assert code == 2 and "no view named app.eci.datamart/Nope" in err
    code, _, err = run("views", "-v", "app.eci.datamart/SearchExport/SHOP10")
    assert code == 2 and "takes 3 parameter value(s)" in err
    code, _, err = run("materialize", "-v", MART, "-m", "EVERYTHING")
    assert code == 2 and "invalid choice: 'EVERYTHING'" in err and len(err.splitlines()) == 1


def test_the_api_refuses_bad_requests_naming_the_field(store: Store, tmp_path: Path) -> None:
    from jobserver.api import create_app
    from jobserver.apply import load
    from jobserver.config import load_config

    environ = {"JOBSERVER_DATA_DIR": str(tmp_path / "d"), "JOBSERVER_API__TOKENS": TOKEN}
    client = create_app(load_config(environ=environ), store=store).test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    documents = load(EXAMPLE.read_text())
    for document in documents:
        assert client.put(f"/api/v1/view-definitions/{document['name']}", json=document,
                          headers=auth).status_code == 201

    def error(response: object) -> tuple[int, str]:
        body = response.json  # type: ignore[attr-defined]
        return response.status_code, body["error"]["details"][0]["field"]  # type: ignore[attr-defined]

    assert error(client.post("/api/v1/views/materialize", headers=auth,
                             json={"pattern": MART, "mode": "FAST"})) == (422, "mode")
    assert error(client.get(f"/api/v1/materialize/{MART}?mode=FAST", headers=auth)) == (
        422, "mode")
    assert error(client.post("/api/v1/views/materialize", headers=auth,
                             json={"pattern": "a/b/ymd(20150230)"})) == (422, "pattern")
    weekly = dict(documents[3])
    weekly["dependencies"] = [{"view": "app.eci.stage/Nope", "map": {"shop": "$shop"}}]
    assert error(client.put("/api/v1/view-definitions/app.eci.stage/SearchWeekly",
                            headers=auth, json=weekly)) == (422, "dependencies[0].view")
    weekly["dependencies"] = [{"view": "app.eci.stage/Search", "map": {"shop": "$shop"}}]
    assert error(client.put("/api/v1/view-definitions/app.eci.stage/SearchWeekly",
                            headers=auth, json=weekly)) == (422, "dependencies[0].map.year")
    reply = client.delete("/api/v1/view-definitions/app.eci.source/Shops", headers=auth)
    assert reply.status_code == 409
    assert reply.json["error"]["details"]["dependents"] == [
        "app.eci.datamart/SearchExport", "app.eci.stage/Search"]
    stored = client.get("/api/v1/view-definitions/app.eci.stage/SearchWeekly", headers=auth)
    assert stored.json["spec"]["dependencies"][0]["days"] == {"last": 7, "into": [
        "year", "month", "day"]}  # nothing changed
