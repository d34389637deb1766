"""The cluster view names the planner, the node whose planner loops (schedules,
retention) act, and names another once it dies: three real ``jobserver serve`` nodes
in ``distributed`` mode, where every node schedules and only the planner lock's holder
plans, on file locks over SQLite and on advisory locks over PostgreSQL.

``server.dead_after`` is a minute, so nothing here can come from a heartbeat ageing
out: after a ``kill -9`` of the planner, ``GET /api/v1/cluster``, ``jobserver
cluster`` and the dashboard must stop naming it and name the node that took the lock.
"""

from __future__ import annotations

import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jobserver.planner import PLANNER_LOCK
from jobserver.store import Store
from tests.helpers import free_port, wait_for
from tests.integration.attack import Browser
from tests.integration.nodes import JOBSERVER, TOKEN, TRANSIENT, Api, Harness, Proc

NODES = ("n1", "n2", "n3")


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Store, dict[str, str]]:
    """The store the nodes share (to read the planner lock's record) and the nodes'
    settings: file locks over SQLite, or advisory locks over a clean PostgreSQL."""
    if request.param == "file":
        (tmp_path / "data").mkdir()
        store = Store(f"sqlite:///{(tmp_path / 'data' / 'jobserver.db').resolve()}")
        store.upgrade()
        request.addfinalizer(store.dispose)
        return store, {}
    from tests.conftest import _empty

    store = request.getfixturevalue("pg_store_session")
    _empty(store)
    return store, {"database_url": store.url, "JOBSERVER_LOCK__BACKEND": "postgres"}


def _planning(api: Api, procs: dict[str, Proc]) -> dict[str, Any] | None:
    """The view once every node is alive under its own pid and one is the planner."""
    try:
        view = api.cluster()
    except TRANSIENT:
        return None
    alive = {node["id"]: node["pid"] for node in view["nodes"] if node["alive"]}
    ready = alive == {node_id: proc.pid for node_id, proc in procs.items()}
    return view if ready and view["planner"] is not None else None


def _cli_header(harness: Harness, base: str) -> str:
    shown = subprocess.run(JOBSERVER + ["cluster", "--url", base, "--token", TOKEN],
                           capture_output=True, text=True, timeout=60, env=harness.base_env())
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.splitlines()[0]


def _dashboard_planner(base: str) -> str:
    """The planner fact of the dashboard's cluster page, signed in as a browser is."""
    browser = Browser(base)
    status, _ = browser.form("/ui/sign-in", {"token": TOKEN}, csrf_from="/ui/sign-in")
    assert status in (200, 303), status
    _, page = browser.open("/ui/cluster/live")
    fact = re.search(r'data-fact="planner"[^>]*>(.*?)</span>\s*</div>', page, re.S)
    assert fact, page[:2000]
    return fact.group(1)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_view_names_the_planner_and_its_successor_after_a_kill_9(
        harness: Harness, tmp_path: Path, backend: tuple[Store, dict[str, str]]) -> None:
    store, settings = backend
    port, data_dir = free_port(), tmp_path / "data"
    procs = {node_id: harness.start_node(node_id, port, data_dir,
                                         JOBSERVER_SCHEDULER__MODE="distributed",
                                         JOBSERVER_SERVER__DEAD_AFTER="60", **settings)
             for node_id in NODES}
    base = f"http://127.0.0.1:{port}"
    api = Api(base, TOKEN)
    view = wait_for(lambda: _planning(api, procs), 60, 0.1, "three nodes up, one planning")
    planner = view["planner"]["node"]
    # The node the store records as the planner lock's newest holder, and no other.
    assert view["active"] is None and planner == store.epochs.holder(PLANNER_LOCK), view
    assert set(view["planner"]) == {"node", "since"}, view  # as the OpenAPI document says
    since = datetime.fromisoformat(view["planner"]["since"])
    assert f"planner: {planner} (since " in _cli_header(harness, base)
    assert planner in _dashboard_planner(base)

    harness.kill9(procs[planner])
    seen: list[str] = []

    def moved() -> dict[str, Any] | None:
        view = api.cluster()
        victim = next(node for node in view["nodes"] if node["id"] == planner)
        seen.append(f"{victim['alive']=} planner={view['planner']}")
        named = (view["planner"] or {}).get("node")
        # Never the dead node once the view knows it dead.
        assert victim["alive"] or named != planner, "\n".join(seen)
        return view if not victim["alive"] and named not in (None, planner) else None

    view = wait_for(moved, 15, 0.05, f"{planner} dead and another node named the planner")
    successor = view["planner"]["node"]
    assert successor in NODES and datetime.fromisoformat(view["planner"]["since"]) >= since
    assert f"planner: {successor} (since " in _cli_header(harness, base)
    assert successor in _dashboard_planner(base)
