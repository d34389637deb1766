"""A step's exit code as a person reads it: a negative code is the signal that ended
the process (``-15 (SIGTERM)``), as ``subprocess`` reports it, named by the signal."""

from __future__ import annotations

import signal


def exit_code_text(code: int | None) -> str:
    """``0``, ``3``, ``-15 (SIGTERM)``; ``-`` for no code (the step did not end). A
    negative number no signal has stays a bare number."""
    if code is None:
        return "-"
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return str(code)
