"""A draining node plans nothing: three real ``jobserver serve`` nodes all sent
SIGTERM, in ``distributed`` mode (the planner lock) and ``leader`` mode (the
leadership the planners act under).

What a user checks is the store's record of every lease taken (``lock_epochs``: the
newest fence of each lock with its holder): once the nodes were told to stop, no node
takes the planner lock or the leadership any more. The two nodes that do not plan are
sent SIGTERM first and the planner once both show their drain (no capacity left), so
that the planner's lock is let go only when every other node is draining: whoever
took it then would be a draining node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from jobserver.planner import PLANNER_LOCK
from jobserver.store import Store
from jobserver.store.tables import epochs
from locks.base import election_key
from schedulers.leader import ELECTION
from tests.helpers import free_port, wait_for
from tests.integration.nodes import Harness

NODES = ("n1", "n2", "n3")


def newest(store: Store, key: str) -> tuple[int, str] | None:
    """The newest fence of ``key`` and who took it."""
    with store.tx.read() as conn:
        row = conn.execute(select(epochs.c.epoch, epochs.c.holder)
                           .where(epochs.c.key == key)).first()
    return None if row is None else (int(row[0]), str(row[1]))


def draining(store: Store, node_ids: list[str]) -> bool:
    capacity = {server.id: server.capacity for server in store.servers.list()}
    return all(capacity.get(node_id) == 0 for node_id in node_ids)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode,key", [("distributed", PLANNER_LOCK),
                                      ("leader", election_key(ELECTION))])
def test_no_node_takes_the_planners_lease_once_told_to_stop(
        harness: Harness, tmp_path: Path, mode: str, key: str) -> None:
    data_dir, port = tmp_path / "data", free_port()
    data_dir.mkdir()
    store = Store(f"sqlite:///{(data_dir / 'jobserver.db').resolve()}")
    store.upgrade()
    procs = {node_id: harness.start_node(node_id, port, data_dir,
                                         JOBSERVER_SCHEDULER__MODE=mode)
             for node_id in NODES}
    try:
        def planning() -> Any:
            """Every node registered under its own pid with capacity, one planning."""
            up = {(server.id, server.pid) for server in store.servers.list()
                  if server.capacity > 0}
            held = newest(store, key)
            return up == {(node_id, proc.pid) for node_id, proc in procs.items()} and \
                held is not None and held[1] in NODES and held

        fence, planner = wait_for(planning, 60, 0.1, "three nodes up, one planning")
        others = [node_id for node_id in NODES if node_id != planner]
        for node_id in others:
            procs[node_id].popen.terminate()
        wait_for(lambda: draining(store, others), 20, 0.02, f"{others} draining")
        procs[planner].popen.terminate()
        for node_id, proc in procs.items():
            assert proc.wait_exit(30) == 0, f"{node_id}: {proc.tail()}"
        assert newest(store, key) == (fence, planner), (
            f"a draining node took {key} after SIGTERM")
    finally:
        store.dispose()
