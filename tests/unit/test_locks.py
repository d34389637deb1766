"""The lock-backend contract, run against every backend available here.

Cross-process exclusion and liveness use real processes for the ``file`` backend.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.exceptions import ConfigError
from jobserver.store import Store
from locks import create_lock_backend
from locks.base import LockBackend
from tests.helpers import wait_for


@pytest.fixture(params=["file", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LockBackend]:
    if request.param == "memory":
        yield create_lock_backend("memory")
        return
    store = Store(f"sqlite:///{tmp_path / 'locks.db'}")
    store.upgrade()
    yield create_lock_backend("file", directory=tmp_path / "locks", next_fence=store.epochs.bump)
    store.dispose()


def test_acquire_is_exclusive_and_release_frees(backend: LockBackend) -> None:
    lease = backend.acquire("a", blocking=False)
    assert lease is not None and lease.is_valid()
    assert backend.is_held("a") is True
    assert backend.acquire("a", blocking=False) is None
    assert backend.acquire("b", blocking=False) is not None
    lease.release()
    assert not lease.is_valid()
    assert backend.is_held("a") is False
    again = backend.acquire("a", blocking=False)
    assert again is not None
    again.release()


def test_fence_grows_with_every_acquisition(backend: LockBackend) -> None:
    fences = []
    for _ in range(3):
        with backend.acquire("k") as lease:
            fences.append(lease.fence)
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_blocking_timeout_and_handover(backend: LockBackend) -> None:
    holder = backend.acquire("k")
    holder_fence = holder.fence
    started = time.monotonic()
    assert backend.acquire("k", blocking=True, timeout=0.3) is None
    assert time.monotonic() - started >= 0.29
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(backend.acquire("k", timeout=5)))
    waiter.start()
    time.sleep(0.1)  # let the waiter block on the held lock
    holder.release()
    waiter.join(5)
    assert got and got[0] is not None and got[0].fence > holder_fence
    got[0].release()


def test_release_is_idempotent(backend: LockBackend) -> None:
    lease = backend.acquire("k")
    lease.release()
    lease.release()
    assert backend.is_held("k") is False


def test_election_hand_over(backend: LockBackend) -> None:
    assert backend.leader("scheduler") is None
    first = backend.elect("scheduler", "node-1")
    first_fence = first.fence
    assert backend.leader("scheduler") == "node-1"
    assert backend.elect("scheduler", "node-2", blocking=False) is None
    first.release()
    assert backend.leader("scheduler") is None
    second = backend.elect("scheduler", "node-2", timeout=1)
    assert second is not None and second.fence > first_fence
    assert backend.leader("scheduler") == "node-2"
    second.release()


def test_memory_loss_is_exposed() -> None:
    backend = create_lock_backend("memory")
    lease = backend.acquire("k")
    lost = threading.Event()
    lease.on_lost(lambda _lease: lost.set())
    backend.expire("k")
    assert lost.is_set() and not lease.is_valid()
    late = threading.Event()
    lease.on_lost(lambda _lease: late.set())  # registering after the loss still reports it
    assert late.is_set()


HOLDER = """
import sys, time
from locks.file import FileLockBackend
counter = iter(range(1, 10**6))
backend = FileLockBackend(sys.argv[1], lambda key: next(counter))
lease = backend.acquire("shared")
print("held", flush=True)
time.sleep(600)
"""


def test_file_lock_excludes_other_processes_and_dies_with_them(tmp_path: Path) -> None:
    directory = tmp_path / "locks"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        backend = create_lock_backend("file", directory=directory, next_fence=lambda key: 1)
        assert backend.acquire("shared", blocking=False) is None
        assert backend.is_held("shared") is True
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        lease = wait_for(lambda: backend.acquire("shared", blocking=False), timeout=2,
                         what="the kernel to free a dead holder's lock")
        lease.release()
    finally:
        holder.kill()
        holder.wait()


def test_unknown_and_missing_backends() -> None:
    with pytest.raises(ConfigError, match="unknown backend 'etcd'"):
        create_lock_backend("etcd")
