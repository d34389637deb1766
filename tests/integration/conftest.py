"""Fixtures shared by the integration tests that start real server processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.nodes import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    """Starts real nodes and launchers under ``tmp_path``; every process it started
    is stopped afterwards, whatever the test did."""
    harness = Harness(tmp_path)
    yield harness
    harness.cleanup()
