"""Retrying a call while a backend is briefly unreachable.

A PostgreSQL restart, a failover or terminated sessions make store and lock calls fail
for a second or two. Writes that must not be lost (a job's outcome, a lock taken at
start-up) are retried with a growing pause for a bounded time; after that the last
error reaches the caller, which decides what giving up means.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def retry(call: Callable[[], T], *, on: type[BaseException] | tuple[type[BaseException], ...],
          for_seconds: float, what: str, first_pause: float = 0.1, max_pause: float = 2.0,
          log_extra: dict[str, Any] | None = None) -> T:
    """Return ``call()``, calling it again after each error of type ``on``.

    Pauses start at ``first_pause`` seconds and double up to ``max_pause``. When the
    next pause would end past ``for_seconds`` from the first call, the error is
    raised instead. Each retry logs a warning naming ``what`` failed.
    """
    deadline, pause = time.monotonic() + for_seconds, first_pause
    while True:
        try:
            return call()
        except on as exc:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("%s failed (%s: %s); retrying in %.1f s", what, type(exc).__name__,
                        exc, pause, extra=log_extra)
            time.sleep(pause)
            pause = min(pause * 2, max_pause)
