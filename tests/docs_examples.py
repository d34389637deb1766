"""The shell examples of the README, ``docs/`` and ``examples/``, read as a user reads them.

A fenced block in ``sh`` (or ``bash``, ``shell``) is an example a user may paste into a
shell, so every one of them is run by ``tests/integration/test_doc_examples.py``, in
the order the page gives them, against ``make run``'s cluster. An HTML comment on the
line before a fence (invisible on the rendered page) tells the runner more:

``<!-- example: not run: REASON -->``
    the block cannot run here (it needs docker, or it is a script for another host);
    it is still checked for shell syntax, and the reason must say why.
``<!-- example: needs postgres -->``
    the block needs the PostgreSQL server of the test suite (``createdb`` and a
    server at 127.0.0.1:5432); without one it is skipped loudly, and fails in CI.
``<!-- example: file NAME -->``
    before a block in any language: its text is the file ``NAME`` that the following
    examples use (``jobserver apply NAME``), written before they run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGUAGES = {"sh", "bash", "shell"}
FENCE = re.compile(r"^(```+)\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")


class Kind(Enum):
    """What the runner does with a block."""

    RUN = "run"            # run against the demo cluster
    NOT_RUN = "not run"    # syntax only; ``reason`` says why
    POSTGRES = "needs postgres"
    FILE = "file"          # written as ``name`` for the examples after it


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts (1-based line of the fence), its
    language, its text and what the marker before it says."""

    page: Path
    line: int
    language: str
    text: str
    kind: Kind
    argument: str = ""   # the reason (NOT_RUN) or the file name (FILE)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """Every page whose examples are run, in a reader's order: the README, the
    ``docs/`` pages in ``mkdocs.yml``'s nav order (a later page may use what an
    earlier one created) and the examples' own READMEs."""
    return [ROOT / "README.md", *docs_pages(),
            *sorted((ROOT / "examples").rglob("README.md"))]


def docs_pages() -> list[Path]:
    """The docs site's pages as its nav lists them (``tests/unit/test_docs_site.py``
    checks that the nav lists every page)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return [ROOT / config.get("docs_dir", "docs") / next(iter(item.values()))
            for item in config["nav"]]


def blocks(page: Path) -> list[Block]:
    """The page's shell examples and marked files, in page order."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = next((j for j in range(index + 1, len(lines))
                    if lines[j].startswith(fence.group(1))
                    and not lines[j].strip("`").strip()), len(lines))
        block = _block(page, lines, index, fence.group(2), "\n".join(lines[index + 1:end]))
        if block is not None:
            found.append(block)
        index = end + 1
    return found


def _block(page: Path, lines: list[str], fence: int, language: str,
           text: str) -> Block | None:
    marker = MARKER.match(lines[fence - 1]) if fence else None
    said = marker.group(1) if marker else ""
    where = f"{page.relative_to(ROOT)}:{fence + 1}"
    if said.startswith("file "):
        return Block(page, fence + 1, language, text + "\n", Kind.FILE, said[5:].strip())
    if language not in SHELL_LANGUAGES:
        if said:
            raise ValueError(f"{where}: a marker ({said!r}) on a {language or 'plain'} block")
        return None
    if not said:
        return Block(page, fence + 1, language, text, Kind.RUN)
    if said == Kind.POSTGRES.value:
        return Block(page, fence + 1, language, text, Kind.POSTGRES)
    reason = re.fullmatch(r"not run:\s*(\S.*)", said)
    if reason is None:
        raise ValueError(f"{where}: unknown example marker {said!r}")
    return Block(page, fence + 1, language, text, Kind.NOT_RUN, reason.group(1))
