"""The step log's buffering, limit and failure handling (pure logic: the store is a
list here; the integration tests write to real stores)."""

from __future__ import annotations

import pytest

from jobserver.exceptions import StoreUnavailable
from jobserver.steps import log as step_log
from jobserver.steps.log import FLUSH_BYTES, StepLog, cut_marker
from jobserver.store.logs import LogKey

KEY = LogKey(7, "load", 2)


class Chunks:
    """Stands in for the store's ``step_logs``; refuses the next ``refuse`` chunks."""

    def __init__(self, refuse: int = 0) -> None:
        self.rows: list[tuple[int, int, bytes]] = []
        self.refuse = refuse

    def append(self, key: LogKey, seq: int, start: int, data: bytes) -> None:
        assert key == KEY
        if self.refuse:
            self.refuse -= 1
            raise StoreUnavailable("the store is out")
        self.rows.append((seq, start, data))

    def log(self) -> bytes:
        return b"".join(data for _, _, data in self.rows)


def test_a_step_that_prints_nothing_writes_nothing() -> None:
    chunks = Chunks()
    log = StepLog(chunks, KEY, 1024)
    log.flush_if_due()
    log.finish(None)
    log.finish("")
    assert chunks.rows == [] and log.closed


def test_output_waits_for_a_full_chunk_or_a_second_then_goes_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(step_log.time, "monotonic", lambda: now[0])
    chunks = Chunks()
    log = StepLog(chunks, KEY, 10 << 20)
    log.write(b"a" * 10)
    log.flush_if_due()
    assert chunks.rows == []  # neither big nor old enough
    now[0] += step_log.FLUSH_SECONDS
    log.flush_if_due()
    log.write(b"b" * FLUSH_BYTES)
    log.flush_if_due()  # a full chunk goes at once
    log.write(b"c")
    log.close()
    assert [(seq, start, len(data)) for seq, start, data in chunks.rows] == [
        (0, 0, 10), (1, 10, FLUSH_BYTES), (2, 10 + FLUSH_BYTES, 1)]


def test_output_past_the_limit_is_dropped_and_counted_in_a_last_line() -> None:
    chunks = Chunks()
    log = StepLog(chunks, KEY, 10)
    for piece in (b"12345", b"67890ab", b"cdef"):
        log.write(piece)
    log.close()
    assert chunks.log() == b"1234567890" + cut_marker(6, 10)
    assert b"[... 6 more bytes dropped" in cut_marker(6, 10)


def test_a_chunk_refused_while_running_goes_with_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(step_log.time, "monotonic", lambda: now[0])
    chunks = Chunks(refuse=1)
    log = StepLog(chunks, KEY, 1024)
    log.write(b"first ")
    now[0] += step_log.FLUSH_SECONDS
    log.flush_if_due()  # refused: kept
    assert chunks.rows == []
    log.write(b"second")
    log.flush_if_due()  # not retried at once
    assert chunks.rows == []
    now[0] += step_log.FLUSH_SECONDS
    log.flush_if_due()
    assert chunks.rows == [(0, 0, b"first second")]


def test_what_the_last_flush_cannot_store_is_lost_without_failing_the_step() -> None:
    chunks = Chunks(refuse=5)
    log = StepLog(chunks, KEY, 1024)
    log.write(b"gone")
    log.close()  # logs a warning; raises nothing
    assert chunks.rows == [] and log.closed


def test_a_step_that_wrote_no_log_leaves_its_output_as_the_log() -> None:
    chunks = Chunks()
    log = StepLog(chunks, KEY, 1024)
    log.finish("Traceback ...\nZeroDivisionError: division by zero\n")
    log.finish("again")  # closed: nothing more
    assert chunks.log() == b"Traceback ...\nZeroDivisionError: division by zero\n"
    shell = Chunks()
    streamed = StepLog(shell, KEY, 1024)
    streamed.write(b"streamed")
    streamed.close()
    streamed.finish("head and tail")  # a shell step closed its own log
    assert shell.log() == b"streamed"
