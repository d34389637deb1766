"""The cluster view and the node metrics tell a crash at once: real ``serve`` processes,
a real ``kill -9`` of the active node (the global lock's holder, or the leader), on the
file and the PostgreSQL lock backends.

``server.dead_after`` is a minute here, so nothing in these tests can come from a
heartbeat ageing out: within a second of the kill, ``GET /api/v1/cluster`` and
``GET /metrics`` must say the node is gone (its presence lock is free), and "active"
must name exactly one live node, the successor. Once the jobs the victim ran are
rescued, the view (the API's, the command line's, the dashboard's) shows it ``dead``
running none: not its row's ``alive`` and its last heartbeat's count.
"""

from __future__ import annotations

import http.cookiejar
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import free_port, wait_for
from tests.integration.nodes import JOBSERVER, TOKEN, TRANSIENT, Api, Harness
from tests.integration.scrape import Samples, scrape, value

#: What a user may wait, after a kill -9, for the view to stop showing the node alive.
TRUTH_BOUND = 1.0
#: Far beyond the tests' length: a stale heartbeat cannot be what gives the node away.
DEAD_AFTER = "60"
#: Jobs running when the victim dies: they outlast the test.
LONG_JOBS = 2


@pytest.fixture(params=["file", pytest.param("postgres", marks=pytest.mark.postgres),
                        "file-leader"])
def backend(request: pytest.FixtureRequest) -> dict[str, str]:
    """Node settings for the lock backend: file locks over SQLite (in ``single`` mode,
    or in ``leader`` mode), or advisory locks over a clean, migrated PostgreSQL
    database."""
    if request.param == "file":
        return {}
    if request.param == "file-leader":
        return {"JOBSERVER_SCHEDULER__MODE": "leader"}
    from tests.conftest import _empty

    store = request.getfixturevalue("pg_store_session")
    _empty(store)
    return {"database_url": store.url, "JOBSERVER_LOCK__BACKEND": "postgres"}


def _view(api: Api, base: str) -> tuple[dict[str, Any], Samples] | None:
    """The cluster view and a scrape, both through the shared port; None if a request
    landed on the killed node's API as it went down."""
    try:
        return api.cluster(), scrape(base, TOKEN, timeout=2)
    except TRANSIENT:
        return None


def _truthful(view: dict[str, Any], samples: Samples, victim: str) -> bool:
    """The victim is dead in the view and the metrics; "active" names one live node
    other than it, and only that node has the role ``active``."""
    nodes = {node["id"]: node for node in view["nodes"]}
    active = view["active"]
    roles = [node["id"] for node in view["nodes"] if node["role"] == "active"]
    return (not nodes[victim]["alive"] and nodes[victim]["role"] == "none"
            and value(samples, "jobserver_node_alive", node=victim) == 0
            and value(samples, "jobserver_node_dead", node=victim) == 1
            and active not in (None, victim) and nodes[active]["alive"]
            and roles == [active]
            and value(samples, "jobserver_node_alive", node=active) == 1)


def _running(api: Api) -> dict[str, int]:
    """The jobs RUNNING on each node, as the jobs say."""
    counts: dict[str, int] = {}
    for job in api.jobs():
        if job["state"] == "RUNNING":
            counts[job["node"]] = counts.get(job["node"], 0) + 1
    return counts


def _busy(api: Api) -> dict[str, int]:
    """Once ``LONG_JOBS`` jobs run and every node's heartbeat has counted them: how
    many each node runs."""
    def counted() -> dict[str, int]:
        running = _running(api)
        shown = {n["id"]: n["running"] for n in api.cluster()["nodes"]}
        if sum(running.values()) == LONG_JOBS and all(
                shown[node] == running.get(node, 0) for node in shown):
            return running
        return {}
    return wait_for(counted, 15, 0.1, "the long jobs to run and the heartbeats to count them")


def _shown_dead(view: dict[str, Any], node: str) -> dict[str, Any]:
    """The view, if it shows ``node`` not alive, ``dead`` and running no job; else {}."""
    row = next(n for n in view["nodes"] if n["id"] == node)
    return view if (row["alive"], row["state"], row["running"]) == (False, "dead", 0) \
        else {}


def _dashboard_dead(base: str, node: str) -> str:
    """The dashboard's row of ``node``, if it shows it dead and running no job; else ""."""
    row = _dashboard_row(base, node)
    return row if 'data-state="dead"' in row and 'data-running="0"' in row else ""


def _dashboard_row(base: str, node: str) -> str:
    """The node's row of the dashboard's cluster page (its live part), signed in with
    the token as a browser would."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = opener.open(f"{base}/ui/sign-in", timeout=10).read().decode()
    csrf = re.search(r'name="csrf_token" value="([^"]*)"', form)
    assert csrf, form[:500]
    opener.open(f"{base}/ui/sign-in", urllib.parse.urlencode(
        {"csrf_token": csrf.group(1), "token": TOKEN}).encode(), timeout=10).read()
    page = opener.open(f"{base}/ui/cluster/live", timeout=10).read().decode()
    row = re.search(rf'<tr\b[^>]*\bdata-node="{re.escape(node)}".*?</tr>', page, re.S)
    assert row, page[:2000]
    return row.group(0)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_active_node_shows_dead_within_a_second(
        harness: Harness, tmp_path: Path, backend: dict[str, str]) -> None:
    port, data_dir = free_port(), tmp_path / "data"
    nodes = {f"node-{i}": harness.start_node(f"node-{i}", port, data_dir,
                                             JOBSERVER_SERVER__DEAD_AFTER=DEAD_AFTER,
                                             **backend)
             for i in (1, 2, 3)}
    base = f"http://127.0.0.1:{port}"
    api = Api(base, TOKEN)
    before = harness.wait_nodes_ready(api, list(nodes.values()), port)
    victim = before["active"]
    assert [n["id"] for n in before["nodes"] if n["role"] == "active"] == [victim], before
    samples = scrape(base, TOKEN)
    assert all(value(samples, "jobserver_node_alive", node=i) == 1 for i in nodes), samples
    for index in range(LONG_JOBS):
        api.submit({"name": f"long-{index}", "steps": [
            {"name": "s", "type": "shell", "argv": ["sleep", "120"]}]})
    on_victim = _busy(api).get(victim, 0)
    if "JOBSERVER_SCHEDULER__MODE" not in backend:  # single mode: the active node runs all
        assert on_victim == LONG_JOBS, (victim, _running(api))

    killed_at = harness.kill9(nodes[victim])
    seen: list[str] = []
    while time.monotonic() - killed_at < TRUTH_BOUND + 5:
        # Timed from when the view was asked for: how long one answer takes to come
        # back is the machine's load (1.6 s seen in CI-like runs), not the view's lag.
        asked = time.monotonic()
        answer = _view(api, base)
        if answer is None:
            continue
        view, samples = answer
        elapsed = asked - killed_at
        seen.append(f"{elapsed:.2f} s: active={view['active']} " + ", ".join(
            f"{n['id']} {n['role']} {'alive' if n['alive'] else 'dead'}"
            for n in view["nodes"]))
        if _truthful(view, samples, victim):
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the view never told the truth:\n" + "\n".join(seen))
    print(f"\nkill -9 of {victim} shown after {elapsed:.2f} s; first view: {seen[0]}")
    assert elapsed <= TRUTH_BOUND, "\n".join(seen)
    # The last heartbeat of the victim is still fresh: the lock backend told.
    victim_row = next(n for n in view["nodes"] if n["id"] == victim)
    assert victim_row["heartbeat_age_seconds"] < float(DEAD_AFTER), victim_row
    # Its jobs rescued, it is dead and runs nothing, though its row and its last
    # heartbeat (LONG_JOBS running) say otherwise.
    # (Waited for, not read once: a file lock's presence is probed by taking it, so a
    # probe at the same moment as another process's may see it held, for PRESENCE_TTL.)
    wait_for(lambda: victim not in _running(api), 15, 0.1, "the victim's jobs to be rescued")
    view = wait_for(lambda: _shown_dead(api.cluster(), victim), 5, 0.1,
                    f"{victim} shown dead, running none, after its jobs' rescue")
    row = wait_for(lambda: _dashboard_dead(base, victim), 5, 0.1,
                   f"the dashboard to show {victim} dead, running none")
    assert ">dead<" in row and ">alive<" not in row, row
    # The command line says the same.
    shown = subprocess.run(JOBSERVER + ["cluster", "--url", base, "--token", TOKEN],
                           capture_output=True, text=True, timeout=60,
                           env=harness.base_env())
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"active: {view['active']}   nodes alive: 2/3" in lines[0], shown.stdout
    assert re.search(rf"^{victim}\s+none\s+dead\s+\S+\s+0\s", shown.stdout, re.M), \
        shown.stdout
    assert [line.split()[0] for line in lines if re.search(r"^\S+\s+active\s", line)] \
        == [view["active"]], shown.stdout
