"""Cluster safety of ``materialize`` on real nodes: two ``jobserver serve`` processes on
one PostgreSQL store, each asked at the same moment, over HTTP on its own port, to
materialize patterns that overlap. Planning runs on each node; every state write is a
compare-and-set, so the overlapping view partitions get one engine job each, and every
partition ends materialized. Five such races (a shop each), after a first plan-only
request has warmed each node up; the nodes' answers say the requests really met: the
loser of a compare-and-set planned again (``attempts``).

The lattice (noop sources delivered as ``_SUCCESS`` flags under the shared
``<data_dir>/views``)::

    t.src/Raw (noop, per shop and day) ──the same partition──▶ t.stage/Clean
        ──the last 3 days up to this day──▶ t.mart/Weekly
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jobserver.store import Store
from tests.helpers import free_port, wait_for
from tests.integration.nodes import TOKEN, TRANSIENT, Api, Harness, HttpError, http_call

PARAMS = [{"name": n} for n in ("shop", "year", "month", "day")]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}
SAME = {"shop": "$shop", "year": "$year", "month": "$month", "day": "$day"}
NOOP_JOB = {"job": {"steps": [{"name": "t", "type": "noop"}]}}
VIEWS = [
    {"name": "t.src/Raw", "parameters": PARAMS, "structure": FIELDS, "transformation": "noop",
     "location": "raw/${shop}/${year}${month}${day}"},
    {"name": "t.stage/Clean", "parameters": PARAMS, "structure": FIELDS,
     "dependencies": [{"view": "t.src/Raw", "map": SAME}], "transformation": NOOP_JOB},
    {"name": "t.mart/Weekly", "parameters": PARAMS, "structure": FIELDS,
     "dependencies": [{"view": "t.stage/Clean", "map": {"shop": "$shop"},
                       "days": {"last": 3}}], "transformation": NOOP_JOB}]
SHOPS = ("S1", "S2", "S3", "S4", "S5")
# Per shop, node 1: Weekly of the 3rd to the 5th (Clean and Raw of the 1st to the 5th
# with them: 13 partitions); node 2: Clean of the 1st to the 6th (and Raw: 12). Clean
# and Raw of the 1st to the 5th are asked of both.
ON_NODE_1 = "t.mart/Weekly/{shop}/rymd(20150503-20150505)"
ON_NODE_2 = "t.stage/Clean/{shop}/rymd(20150501-20150506)"
TRANSFORMED = {f"t.stage/Clean/{shop}/2015/05/{day:02d}" for shop in SHOPS
               for day in range(1, 7)} | {f"t.mart/Weekly/{shop}/2015/05/{day:02d}"
                                          for shop in SHOPS for day in range(3, 6)}


def _view_jobs_and_gates(api: Api) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The view jobs, and how many gates each partition has."""
    every = api.jobs()
    gates = Counter(job["name"].removeprefix("view gate ") for job in every
                    if job["name"].startswith("view gate "))
    return [job for job in every if not job["name"].startswith("view gate ")], gates


def _both_serving(apis: dict[str, Api]) -> bool:
    """Each node answers on its own port and sees both nodes alive."""
    try:
        for api in apis.values():
            status, cluster = http_call(api.base_url + "/api/v1/cluster", token=TOKEN,
                                        timeout=2)
            if status != 200 or not set(apis) <= {n["id"] for n in cluster["nodes"]
                                                  if n["alive"]}:
                return False
    except (*TRANSIENT, HttpError):
        return False
    return True


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_two_nodes_materializing_overlapping_patterns_submit_one_job_per_partition(
        harness: Harness, tmp_path: Path, store_on_postgres: Store) -> None:
    data_dir = tmp_path / "data"
    ports = {name: free_port() for name in ("node-1", "node-2")}
    nodes = {name: harness.start_node(name, port, data_dir, database_url=store_on_postgres.url,
                                      JOBSERVER_VIEWS__POLL_INTERVAL="0.2")
             for name, port in ports.items()}
    apis = {name: Api(f"http://127.0.0.1:{port}", TOKEN) for name, port in ports.items()}
    for proc in nodes.values():
        assert proc.running(), proc.tail()
    wait_for(lambda: _both_serving(apis), 40, 0.1, "both nodes serving on their own ports")
    for view in VIEWS:
        apis["node-1"].call("PUT", f"/api/v1/view-definitions/{view['name']}", view,
                            expect=(201,))
    for shop in SHOPS:
        for day in range(1, 7):
            flag = data_dir / "views" / "raw" / shop / f"201505{day:02d}"
            flag.mkdir(parents=True)
            (flag / "_SUCCESS").touch()

    for name, api in apis.items():  # each node's first request: a plan (loads the views)
        assert api.call("POST", "/api/v1/views/materialize",
                        {"pattern": ON_NODE_1.format(shop="S1"), "plan": True})["plan"]

    answers: dict[str, list[tuple[int, Any]]] = {"node-1": [], "node-2": []}
    for shop in SHOPS:  # a race per shop, each request to its node's own port
        barrier = threading.Barrier(2)

        def materialize(name: str, pattern: str) -> None:
            barrier.wait(10)
            answers[name].append(http_call(apis[name].base_url + "/api/v1/views/materialize",
                                           "POST", {"pattern": pattern}, TOKEN, timeout=30))

        threads = [threading.Thread(target=materialize, args=(name, pattern.format(shop=shop)))
                   for name, pattern in (("node-1", ON_NODE_1), ("node-2", ON_NODE_2))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(40)
    assert [status for name in answers for status, _ in answers[name]] == \
        [200] * 2 * len(SHOPS), answers
    replies = {name: [body for _, body in answers[name]] for name in answers}
    attempts = [[body["attempts"] for body in replies[name]] for name in replies]
    print(f"\nattempts per race (node-1, node-2): {list(zip(*attempts))}")
    # The requests really met: in some race a node's compare-and-set found the other's
    # write and it planned again (else this test would not test the race).
    assert any(n > 1 for n in attempts[0] + attempts[1]), attempts

    # One engine job per view partition to transform, whichever node planned it, and
    # one gate (jobserver.views.gates) per Clean partition a Weekly job waits for.
    jobs, gates = _view_jobs_and_gates(apis["node-2"])
    assert set(gates) <= TRANSFORMED and set(gates.values()) == {1}, gates
    per_partition = Counter(job["name"].removeprefix("view ") for job in jobs)
    assert set(per_partition) == TRANSFORMED
    assert {path: n for path, n in per_partition.items() if n != 1} == {}
    # Both answers name that job for a partition both asked for (transformed or joined).
    by_node = [{d["view"]: d["job_id"] for d in body["decisions"] if d["job_id"] is not None}
               for bodies in replies.values() for body in bodies]
    job_of = {job["name"].removeprefix("view "): job["id"] for job in jobs}
    for answer in by_node:
        assert {path: job_of.get(path) for path in answer} == answer

    # Every partition either node was asked for ends materialized (sources included).
    def overview(name: str, pattern: str) -> dict[str, int]:
        return apis[name].get(f"/api/v1/views?pattern={pattern}&dependencies=true"
                              "&overview=true")["overview"]

    every = "e(" + ",".join(SHOPS) + ")"
    on_1, on_2 = ON_NODE_1.format(shop=every), ON_NODE_2.format(shop=every)
    wait_for(lambda: overview("node-1", on_1) == {"materialized": 13 * len(SHOPS)}
             and overview("node-2", on_2) == {"materialized": 12 * len(SHOPS)}, 40, 0.2,
             "every view partition to be materialized")
    jobs, _ = _view_jobs_and_gates(apis["node-1"])
    assert {job["state"] for job in jobs} == {"SUCCEED"}
    assert len(jobs) == len(TRANSFORMED)  # none was run again
    # Every gate was let go once its partition was materialized.
    assert {job["state"] for job in apis["node-1"].jobs()
            if job["name"].startswith("view gate ")} == {"DISCARDED"}
    # Materialized and unchanged: asking each node again runs nothing.
    for name, pattern, size in (("node-1", on_1, 13), ("node-2", on_2, 12)):
        again = apis[name].call("POST", "/api/v1/views/materialize", {"pattern": pattern})
        assert again["counts"] == {"skip": size * len(SHOPS)}, (name, again["counts"])
