"""The import contracts of ``[tool.importlinter]`` in pyproject.toml hold.

The core (store, API, node, scheduler modes, lock backends) must not import a planner
by name; the imports it still makes are listed there and may only go away. A new one
fails here, naming the import chain, as does a listed one that is gone (so the list
cannot outlive the imports it excuses).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import missing_service

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold(tmp_path: Path) -> None:
    lint = shutil.which("lint-imports", path=str(Path(__import__("sys").executable).parent))
    if lint is None:
        missing_service("import-linter is not installed (pip install -e '.[dev]')")
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
