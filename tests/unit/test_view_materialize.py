"""A request's planning runs with the cyclic garbage collector paused, and always
resumes it; a collector paused by someone else stays paused."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from jobserver.exceptions import InvalidRequest
from jobserver.spec import Policy
from jobserver.views.materialize import Materializer, collector_paused
from jobserver.views.model import Mode, ViewAddress


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_the_collector_is_paused_in_the_block_and_resumed_after_an_error() -> None:
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("planning failed")
    assert gc.isenabled()


def test_a_collector_paused_before_the_block_stays_paused() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_request_plans_with_the_collector_paused_and_resumes_it_when_refused() -> None:
    seen: list[bool] = []

    def definitions() -> list[Any]:
        seen.append(gc.isenabled())
        return []

    store: Any = SimpleNamespace(views=SimpleNamespace(definitions=definitions))
    materializer = Materializer(store, Policy(lambda name: False, None))
    with pytest.raises(InvalidRequest, match="no view named t.v/Nope"):
        materializer.run([ViewAddress("t.v", "Nope", ("1",))], Mode.DEFAULT, plan_only=True)
    assert seen == [False] and gc.isenabled()
