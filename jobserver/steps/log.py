"""The full log of one step attempt, written to the store while the step runs.

A step's output arrives through :meth:`StepLog.write` (a shell step's output thread)
and goes to the store in chunks (:mod:`jobserver.store.logs`) when
:meth:`StepLog.flush_if_due` finds ``FLUSH_BYTES`` buffered or the oldest buffered
byte ``FLUSH_SECONDS`` old, so that a reader on any node follows a running step a
second behind. :meth:`StepLog.close` writes the rest, then the line saying how much
was dropped past ``steps.log_limit_bytes``. A step that prints nothing writes nothing:
no row, no statement.

The log is kept as the step wrote it, byte for byte. Losing it must not fail the
step: a chunk the store refuses stays buffered for the next flush, and what the last
flush cannot write is reported in the node's log and lost.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from jobserver.exceptions import StoreError
from jobserver.logs import job_fields
from jobserver.store.logs import LogKey

log = logging.getLogger(__name__)

#: A chunk is written once this much output waits...
FLUSH_BYTES = 256 * 1024
#: ... or once the oldest byte waiting is this old.
FLUSH_SECONDS = 1.0


class ChunkWriter(Protocol):
    """Where chunks go: the store's ``step_logs`` repository."""

    def append(self, key: LogKey, seq: int, start: int, data: bytes) -> None: ...


def cut_marker(dropped: int, limit: int) -> bytes:
    """The line that ends a log cut at ``limit`` bytes, ``dropped`` bytes later."""
    return (f"[... {dropped} more bytes dropped: the log keeps the first {limit} bytes "
            "(steps.log_limit_bytes) ...]\n").encode()


class StepLog:
    """The log of ``key``, kept up to ``limit`` bytes; safe to write from one thread
    while another flushes."""

    def __init__(self, writer: ChunkWriter, key: LogKey, limit: int) -> None:
        self._writer, self.key, self._limit = writer, key, limit
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._oldest = 0.0     # monotonic time of the oldest pending byte
        self._kept = 0         # bytes taken into the log (written or pending)
        self._written = 0      # bytes in the store: the next chunk's start
        self._seq = 0
        self._retry_at = 0.0   # after a refused chunk: no new try before then
        self.dropped = 0       # bytes past the limit
        self.closed = False

    def write(self, data: bytes) -> None:
        """Add output; what goes past the limit is only counted."""
        with self._lock:
            room = self._limit - self._kept
            if len(data) > room:
                self.dropped += len(data) - max(room, 0)
                data = data[:max(room, 0)]
            if not data:
                return
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.append(data)
            self._pending_size += len(data)
            self._kept += len(data)

    def flush_if_due(self) -> None:
        """Write a chunk when enough output waits, or when it has waited long enough."""
        if not self._pending_size:
            return
        now = time.monotonic()
        if now >= self._retry_at and (self._pending_size >= FLUSH_BYTES
                                      or now - self._oldest >= FLUSH_SECONDS):
            self._flush()

    def finish(self, output: str | None) -> None:
        """End the attempt's log: a step that did not write its log (python and sql
        steps) leaves its ``output``, if any, as the whole log."""
        if self.closed:
            return
        if output and not self._kept and not self.dropped:
            self.write(output.encode("utf-8", errors="replace"))
        self.close()

    def close(self) -> None:
        """Write what is pending and the cut marker, if any; idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.dropped:
            with self._lock:
                self._pending.append(cut_marker(self.dropped, self._limit))
                self._pending_size += len(self._pending[-1])
        if self._pending_size and not self._flush():
            log.warning("step log: %d bytes could not be stored and are lost",
                        self._pending_size, extra=self._fields())

    def _flush(self) -> bool:
        with self._lock:
            data = b"".join(self._pending)
            if not data:
                return True
            try:
                self._writer.append(self.key, self._seq, self._written, data)
            except StoreError as exc:
                # Kept for the next flush: a chunk is only numbered once it is stored.
                self._pending = [data]
                self._retry_at = time.monotonic() + FLUSH_SECONDS
                log.warning("step log: a chunk was not stored (kept for the next "
                            "try): %s", exc, extra=self._fields())
                return False
            self._seq += 1
            self._written += len(data)
            self._pending, self._pending_size = [], 0
            return True

    def _fields(self) -> dict[str, object]:
        return job_fields(self.key.job_id, self.key.step, self.key.attempt)
