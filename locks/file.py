"""File locks for one host: ``flock`` on files under ``<data_dir>/locks``.

``flock`` (not POSIX ``fcntl`` record locks) because its locks belong to the open file,
so two leases in one process exclude each other and closing one never drops another.
The kernel frees the lock when the holder's process dies, which is how standbys notice
a dead node. The fence comes from an epoch counter in the store, bumped on every
acquisition.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from locks.base import Lease, LockBackend

RETRY_INTERVAL = 0.05


class FileLease(Lease):
    """The fence is drawn from the store on first use, while the lock is held, so
    locks that never fence a write (presence, schema upgrade) cost no store write."""

    def __init__(self, key: str, fd: int, next_fence: Callable[[str, str], int],
                 holder: str) -> None:
        super().__init__(key, lambda: next_fence(key, holder))
        self._fd = fd

    def _release(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)


class FileLockBackend(LockBackend):
    name = "file"
    fences_from_store = True

    def __init__(self, directory: str | os.PathLike[str],
                 next_fence: Callable[[str, str], int], identity: str = "") -> None:
        """``next_fence(key, holder)`` returns a strictly larger integer on every call."""
        self.identity = identity
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._next_fence = next_fence

    def _path(self, key: str) -> Path:
        readable = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:80]
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return self.directory / f"{readable}.{digest}.lock"

    def _try_lock(self, key: str) -> int | None:
        fd = os.open(self._path(key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
            return None

    def acquire(self, key: str, blocking: bool = True,
                timeout: float | None = None) -> Lease | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fd = self._try_lock(key)
            if fd is not None:
                return FileLease(key, fd, self._next_fence, self.identity)
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                return None
            time.sleep(RETRY_INTERVAL)

    def is_held(self, key: str) -> bool | None:
        if not self._path(key).exists():
            return False
        fd = self._try_lock(key)
        if fd is None:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return False

    def _publish_leader(self, name: str, identity: str, lease: Lease) -> None:
        path = self._path(f"election/{name}").with_suffix(".leader")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(identity)
        os.replace(tmp, path)

    def leader(self, name: str) -> str | None:
        if not self.is_held(f"election/{name}"):
            return None
        try:
            return self._path(f"election/{name}").with_suffix(".leader").read_text() or None
        except FileNotFoundError:
            return None
