"""The submit limiter's buckets shared through files (``jobserver.api.limits``): two
limiters on one directory behave as one, as a node's gunicorn workers must."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobserver.api.limits import BUCKETS_ENV, SubmitLimiter, prepare_buckets, take


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_take_refills_by_the_elapsed_time_never_backwards() -> None:
    bucket, wait = take(None, 10.0, rate=2.0, burst=3)
    assert (bucket, wait) == ((2.0, 10.0), 0.0)
    bucket, wait = take((0.0, 10.0), 10.25, rate=2.0, burst=3)
    assert bucket == (0.5, 10.25) and wait == pytest.approx(0.25)
    # A bucket written before a reboot may be ahead of the clock: no negative refill.
    bucket, wait = take((2.0, 5000.0), 10.0, rate=2.0, burst=3)
    assert (bucket, wait) == ((1.0, 10.0), 0.0)


def test_two_limiters_on_one_directory_share_each_bucket(tmp_path: Path) -> None:
    clock, path = Clock(), tmp_path
    first, second = (SubmitLimiter(2.0, 4, clock=clock, path=path) for _ in range(2))
    waits = [limiter.wait_time("token:1") for limiter in (first, second, first, second)]
    assert waits == [0.0] * 4
    assert second.wait_time("token:1") == pytest.approx(0.5)  # the burst is spent: 4, not 8
    assert first.wait_time("token:2") == 0.0  # every caller has a bucket of its own
    clock.now += 0.5
    assert first.wait_time("token:1") == 0.0
    assert second.wait_time("token:1") == pytest.approx(0.5)


def test_unusable_files_fall_back_to_the_process_buckets(tmp_path: Path) -> None:
    limiter = SubmitLimiter(1.0, 2, clock=Clock(), path=tmp_path / "missing")
    assert [limiter.wait_time("a") for _ in range(3)] == [0.0, 0.0, pytest.approx(1.0)]


def test_serve_prepares_an_empty_directory_per_node(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUCKETS_ENV, "")  # restored after the test, as it was
    path = prepare_buckets(tmp_path, "host:123")
    assert os.environ[BUCKETS_ENV] == str(path) and path.name == "host_123"
    spent = SubmitLimiter.for_node(1.0, 1)
    assert spent.wait_time("a") == 0.0 and spent.wait_time("a") > 0
    assert prepare_buckets(tmp_path, "host:123") == path  # a restart: buckets full
    assert SubmitLimiter.for_node(1.0, 1).wait_time("a") == 0.0
    assert prepare_buckets(tmp_path, "other") != path  # a node of its own
