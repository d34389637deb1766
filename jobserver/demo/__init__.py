"""The demo of ``make run`` (``jobserver cluster --nodes 3 --demo``).

Here: the Python steps of its jobs, registered as entry points (``demo.count_words =
jobserver.demo:count_words``); its batches in :mod:`jobserver.demo.batches`, and the
worked example's databases they load in :mod:`jobserver.demo.warehouse`.
"""

from __future__ import annotations

from typing import Any

from jobserver.exceptions import StepFailed


def count_words(ctx: Any, text: str = "") -> dict[str, int]:
    """Count the words of ``text`` (or of the job's ``text`` param)."""
    text = text or str(ctx.params.get("text", ""))
    return {"words": len(text.split())}


def fail_once(ctx: Any) -> dict[str, int]:
    """Fail on the first attempt, succeed on the next: shows step retries."""
    if ctx.attempt == 1:
        raise StepFailed("first attempt fails on purpose")
    return {"attempts_needed": ctx.attempt}
