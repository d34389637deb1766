"""The one retry loop that store and lock writes share."""

from __future__ import annotations

import pytest

from jobserver.retrying import retry


class Flaky:
    """Fails with ``error`` ``failures`` times, then returns ``"done"``."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "done"


def test_a_call_that_recovers_within_the_window_returns_its_result(caplog) -> None:
    call = Flaky(failures=3)
    assert retry(call, on=ConnectionError, for_seconds=5, what="the write",
                 first_pause=0.001, max_pause=0.002) == "done"
    assert call.calls == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3 and all(w.startswith("the write failed (ConnectionError")
                                      for w in warnings)


def test_the_last_error_is_raised_once_the_window_is_over() -> None:
    call = Flaky(failures=10**6)
    with pytest.raises(ConnectionError):
        retry(call, on=ConnectionError, for_seconds=0.05, what="the write",
              first_pause=0.01, max_pause=0.01)
    assert 2 <= call.calls <= 6  # a pause that would end past the window is not taken


def test_other_errors_are_not_retried() -> None:
    call = Flaky(failures=1, error=ValueError)
    with pytest.raises(ValueError):
        retry(call, on=ConnectionError, for_seconds=5, what="the write", first_pause=0.001)
    assert call.calls == 1
