"""File locks for one host: ``flock`` on files under ``<data_dir>/locks``.

``flock`` (not POSIX ``fcntl`` record locks) because its locks belong to the open file,
so two leases in one process exclude each other and closing one never drops another.
The kernel frees the lock when the holder's process dies, which is how standbys notice
a dead node. The fence comes from an epoch counter in the store, bumped when a
lease's fence is first read.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from pathlib import Path

from locks.base import DrawFence, Lease, LockBackend, election_key

RETRY_INTERVAL = 0.05


class FileLease(Lease):
    """The fence is drawn from the store on first use, while the lock is held, so
    locks that never fence a write (presence, schema upgrade) cost no store write."""

    def __init__(self, key: str, fd: int, next_fence: DrawFence, holder: str) -> None:
        super().__init__(key)
        self._fd = fd
        self._next_fence = next_fence
        self._holder = holder

    def _draw_fence(self) -> int:
        return self._next_fence(self.key, self._holder)

    def _release(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)


class FileLockBackend(LockBackend):
    name = "file"

    def __init__(self, directory: str | os.PathLike[str], next_fence: DrawFence,
                 identity: str = "") -> None:
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
        return self._take(key, self.identity, blocking, timeout)

    def elect(self, name: str, identity: str, blocking: bool = True,
              timeout: float | None = None) -> Lease | None:
        """The leader's identity goes to a file beside the lock, which :meth:`leader`
        reads only while the lock is held: a leader gone names nobody."""
        lease = self._take(election_key(name), identity, blocking, timeout)
        if lease is not None:
            path = self._leader_path(name)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(identity)
            os.replace(tmp, path)
        return lease

    def _take(self, key: str, holder: str, blocking: bool,
              timeout: float | None) -> Lease | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fd = self._try_lock(key)
            if fd is not None:
                return FileLease(key, fd, self._next_fence, holder)
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

    def _leader_path(self, name: str) -> Path:
        return self._path(election_key(name)).with_suffix(".leader")

    def leader(self, name: str) -> str | None:
        if not self.is_held(election_key(name)):
            return None
        try:
            return self._leader_path(name).read_text() or None
        except FileNotFoundError:
            return None
