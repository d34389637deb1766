"""Whether the cluster view takes a node for alive: rows, heartbeats and presence locks
(an in-process lock backend; the real ones are exercised in tests/integration)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from jobserver.config import load_config
from jobserver.presence import PresenceProbe, alive_nodes, probe_for, seat_holder
from jobserver.store.epochs import Taken
from jobserver.store.records import ServerRecord
from locks.memory import MemoryLockBackend
from schedulers.base import presence_key

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def server(node: str, state: str = "alive", age: float = 0.5) -> ServerRecord:
    return ServerRecord(id=node, host="h", pid=1, mode="single", role="active",
                        state=state, capacity=1, running=0, started_at=NOW,
                        heartbeat_at=NOW, heartbeat_age=age)


class Counting(MemoryLockBackend):
    """Counts the questions asked, and answers None (unknown) for keys in ``unknown``."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0
        self.unknown: set[str] = set()

    def is_held(self, key: str) -> bool | None:
        self.asked += 1
        return None if key in self.unknown else super().is_held(key)


class Holders:
    """The store's ``epochs`` as :func:`seat_holder` reads it."""

    def __init__(self, **holders: str) -> None:
        self.epochs = self
        self._holders = holders

    def taken(self, key: str) -> Taken | None:
        holder = self._holders.get(key)
        return None if holder is None else Taken(holder, NOW)


def test_a_node_is_alive_by_row_heartbeat_and_presence_lock() -> None:
    locks = Counting()
    for node in ("up", "stopped", "stale"):
        locks.acquire(presence_key(node))
    locks.unknown.add(presence_key("unknown"))
    servers = [server("up"), server("stopped", state="stopped"), server("stale", age=11),
               server("gone"), server("unknown")]
    probe = PresenceProbe.over(locks, ttl=0)
    # "gone": a fresh heartbeat, but its presence lock is free: dead at once. "unknown":
    # the lock service cannot tell, so the heartbeat decides.
    assert alive_nodes(servers, 10.0, probe) == {"up", "unknown"}
    assert alive_nodes(servers, 10.0, None) == {"up", "gone", "unknown"}


def test_answers_are_reused_for_the_ttl_only(monkeypatch: pytest.MonkeyPatch) -> None:
    locks = Counting()
    lease = locks.acquire(presence_key("a"))
    assert lease is not None
    now = [100.0]
    monkeypatch.setattr("jobserver.presence.time.monotonic", lambda: now[0])
    probe = PresenceProbe.over(locks, ttl=0.5)
    assert probe.is_held(presence_key("a")) is True
    lease.release()
    now[0] += 0.4
    assert probe.is_held(presence_key("a")) is True and locks.asked == 1  # cached
    now[0] += 0.1
    assert probe.is_held(presence_key("a")) is False and locks.asked == 2


def test_a_lock_service_out_of_reach_means_unknown_then_is_tried_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("jobserver.presence.time.monotonic", lambda: now[0])
    locks = Counting()
    attempts: list[float] = []

    def build() -> Any:
        attempts.append(now[0])
        if len(attempts) == 1:
            raise ConnectionError("refused")
        return locks

    probe = PresenceProbe(build, ttl=0)
    assert probe.is_held("k") is None
    now[0] += 1
    assert probe.is_held("k") is None and len(attempts) == 1  # not every request
    now[0] += 5
    assert probe.is_held("k") is False and len(attempts) == 2
    assert probe.is_held("k") is False and len(attempts) == 2  # built once


def test_the_memory_backend_is_never_asked_from_another_process(tmp_path) -> None:
    config = load_config(environ={"JOBSERVER_DATA_DIR": str(tmp_path),
                                  "JOBSERVER_LOCK__BACKEND": "memory"})
    probe = probe_for(config, store=None)  # type: ignore[arg-type]  # never used
    assert probe.is_held(presence_key("a")) is None


def test_the_seat_holder_is_the_newest_holder_while_alive_and_holding() -> None:
    locks = MemoryLockBackend()
    probe = PresenceProbe.over(locks, ttl=0)
    store: Any = Holders(**{"scheduler/global": "b"})
    assert seat_holder(store, None, {"a", "b"}, probe) is None  # no seat key
    assert seat_holder(store, "scheduler/global", {"a"}, probe) is None  # b is dead
    assert seat_holder(store, "scheduler/global", {"a", "b"}, probe) is None  # released
    locks.acquire("scheduler/global")
    assert seat_holder(store, "scheduler/global", {"a", "b"}, probe) == Taken("b", NOW)
    assert seat_holder(store, "scheduler/global", {"a", "b"}, None) == Taken("b", NOW)
