"""The reference in ``docs/`` builds as a site, and its links hold.

``mkdocs.yml`` makes every broken link between pages, and every link to a heading a
page does not have, a warning; ``--strict`` turns warnings into a failed build. So a
heading renamed or a section moved to another page without its links is caught here,
as is a page left out of the nav.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import missing_service

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        missing_service("mkdocs is not installed (pip install -e '.[dev]')")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "security" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav() -> None:
    """A page missing from the nav would not be on the site, and its shell examples
    would run out of the reader's order."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    in_nav = {next(iter(item.values())) for item in config["nav"]}
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == in_nav
