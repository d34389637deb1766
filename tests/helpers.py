"""Test helpers: waiting on conditions with a deadline, building job specs."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
             what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def job_spec(name: str = "job", steps: list[dict[str, Any]] | None = None,
             **fields: Any) -> dict[str, Any]:
    return {"name": name, "steps": steps or [{"name": "s1", "type": "noop"}], **fields}


def spec_bytes(**kwargs: Any) -> bytes:
    return json.dumps(job_spec(**kwargs)).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeLease:
    """A lease stand-in for store tests: a key and a fence recorded as the newest."""

    def __init__(self, store: Any, key: str = "scheduler/global") -> None:
        self.key = key
        self.fence = store.epochs.bump(key)
