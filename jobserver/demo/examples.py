"""Applying the files of ``examples/`` as ``jobserver apply`` does, for the demo."""

from __future__ import annotations

import io
from pathlib import Path

from jobserver.apply import apply_documents, load
from jobserver.client import Client
from jobserver.exceptions import JobServerError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def apply_example(client: Client, name: str) -> None:
    """``jobserver apply examples/<name>``; a refusal stops the demo with the reason
    (the examples are the server's own: a refusal is a bug to see at once)."""
    documents = load((EXAMPLES / name).read_text(encoding="utf-8"))
    out, err = io.StringIO(), io.StringIO()
    if apply_documents(client, documents, out=out, err=err) != 0:
        raise JobServerError(f"examples/{name} refused: {err.getvalue()}")
