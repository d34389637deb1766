"""The product's type hints agree with its code: mypy over the packages it installs.

A hint that says ``list[int]`` where the code passes a ``Sequence`` misleads the next
reader as much as a wrong comment does; this keeps them honest. The packages and
mypy's settings are in ``pyproject.toml`` (``[tool.mypy]``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.conftest import missing_service

ROOT = Path(__file__).resolve().parents[2]


def test_type_hints_check_clean(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        missing_service("mypy is not installed (pip install -e '.[dev]')")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
