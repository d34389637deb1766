"""The submit rate limit (``api.submit_rate``, ``api.submit_burst``): a token bucket per
caller, shared by all of a node's API workers.

Gunicorn runs a node's API in ``api.workers`` processes. Were the buckets in each
worker, a node would admit ``api.workers`` times the rate, and a cluster of such nodes
``nodes × workers`` times. So ``jobserver serve`` gives its workers a directory of
their own (:data:`BUCKETS_ENV`, emptied at start) where each caller's bucket is a
16-byte file, taken from under an ``flock`` (:class:`FileBuckets`): about 20 µs a
submit more than buckets in the process (single digits of µs), and two workers
submitting at once still pass about 30,000 checks a second together, on two loaded
cores. Each node has its own buckets: a cluster admits ``nodes × api.submit_rate``.

Without that variable (an app made in a test, or by hand) the buckets live in the
process. If the files cannot be used (a full disk), a worker falls back to buckets of
its own rather than refuse submits, and says so in its log once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import math
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jobserver.exceptions import RateLimited

if TYPE_CHECKING:
    from jobserver.api.auth import Principal

log = logging.getLogger(__name__)

#: The directory of the node's shared buckets, set by ``jobserver serve`` for its workers.
BUCKETS_ENV = "JOBSERVER_SUBMIT_BUCKETS"

Bucket = tuple[float, float]  # (tokens, monotonic time of the last take)
_BUCKET = struct.Struct("=dd")


def take(bucket: Bucket | None, now: float, rate: float, burst: int,
         cost: int = 1) -> tuple[Bucket, float]:
    """Take ``cost`` submits (a batch's jobs) from ``bucket`` (None: a new, full one)
    at ``now``, all or none.

    Returns the bucket after it and 0, or the bucket unchanged but refilled and the
    seconds until that many are available (a ``cost`` above the burst never is: it
    gets the time an unbounded bucket would take). The time since the last take counts
    from 0 at least: a bucket written before a reboot may be ahead of the clock.
    """
    tokens, last = bucket if bucket is not None else (float(burst), now)
    tokens = min(float(burst), tokens + max(0.0, now - last) * rate)
    if tokens >= cost:
        return (tokens - cost, now), 0.0
    return (tokens, now), (cost - tokens) / rate


def prepare_buckets(data_dir: Path, node_id: str) -> Path:
    """This node's buckets directory, emptied, and named in the environment the API
    workers inherit. Run by ``jobserver serve`` before its API starts."""
    safe = node_id.replace(":", "_").replace("/", "_")
    path = (data_dir / "submit-limits" / safe).resolve()
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ[BUCKETS_ENV] = str(path)
    return path


class FileBuckets:
    """Buckets in files shared by the processes that open them: one small file per
    caller (named by a hash of its key) holding the bucket as two doubles, read and
    written under an exclusive ``flock``. The kernel queues the waiters and frees the
    lock of a process that dies holding it.

    Each process keeps its files open (one per caller it has seen). A forked child
    opens them again: an ``flock`` belongs to the open file, which a child shares
    with its parent, so the two would not exclude each other.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory
        self._files: dict[str, int] = {}
        self._pid = os.getpid()

    def _file(self, key: str) -> int:
        if self._pid != os.getpid():
            for inherited in self._files.values():
                os.close(inherited)
            self._files, self._pid = {}, os.getpid()
        fd = self._files.get(key)
        if fd is None:
            name = hashlib.sha256(key.encode()).hexdigest()[:32]
            fd = os.open(self.path / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._files[key] = fd
        return fd

    def take(self, key: str, now: float, rate: float, burst: int, cost: int = 1) -> float:
        """:func:`take` on ``key``'s bucket, under the file's lock."""
        fd = self._file(key)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(fd, _BUCKET.size, 0)
            bucket, wait = take(_BUCKET.unpack(raw) if len(raw) == _BUCKET.size else None,
                                now, rate, burst, cost)
            os.pwrite(fd, _BUCKET.pack(*bucket), 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return wait


class SubmitLimiter:
    """A token bucket per caller: ``rate`` submits a second, bursts up to ``burst``;
    in the directory ``path`` when given (shared by every process using it), else in
    this process."""

    def __init__(self, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic, path: Path | None = None) -> None:
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._buckets: dict[str, Bucket] = {}
        self._file = FileBuckets(path) if path is not None else None
        self._lock = threading.Lock()

    @classmethod
    def for_node(cls, rate: float, burst: int) -> SubmitLimiter:
        """The limiter of an API worker: the node's shared buckets when ``jobserver
        serve`` named their directory, else buckets of this process."""
        path = os.environ.get(BUCKETS_ENV)
        return cls(rate, burst, path=Path(path) if path else None)

    def wait_time(self, key: str, cost: int = 1) -> float:
        """Take ``cost`` submits from ``key``'s bucket: 0 when allowed, else the seconds
        until that many are available (nothing is taken then)."""
        with self._lock:
            now = self._clock()
            if self._file is not None:
                try:
                    return self._file.take(key, now, self.rate, self.burst, cost)
                except OSError as exc:
                    log.warning("the shared submit limits in %s cannot be used (%s): this "
                                "worker limits its own submits from now on",
                                self._file.path, exc)
                    self._file = None
            self._buckets[key], wait = take(self._buckets.get(key), now, self.rate,
                                            self.burst, cost)
            return wait

    def check(self, principal: Principal, cost: int = 1) -> None:
        """Take ``cost`` submits (a batch's jobs) from the caller's bucket, all or none;
        :class:`RateLimited` (429, ``Retry-After``) when it lacks them. A batch larger
        than the burst can never pass, and the error says so."""
        wait = self.wait_time(principal.key, cost)
        if wait <= 0:
            return
        retry_after = max(1, math.ceil(wait))
        details = {**principal.describe(), "retry_after": retry_after}
        if cost > self.burst:
            raise RateLimited(
                f"a request creating {cost} jobs exceeds api.submit_burst ({self.burst}) of "
                f"token {principal.name!r}: ask for at most {self.burst} jobs a request",
                retry_after, {**details, "burst": self.burst, "requested": cost})
        raise RateLimited(
            f"token {principal.name!r} submits faster than api.submit_rate "
            f"({self.rate:g}/s, burst {self.burst}); retry after {retry_after} s",
            retry_after, details)
