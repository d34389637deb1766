"""``jobserver logs`` on a terminal: a step's escape sequences are shown, never acted
on (``jobserver.cli.logs.TerminalText``), however the output was cut into pieces."""

from __future__ import annotations

import io
from typing import Any

import pytest

from jobserver.cli.logs import LogPrinter, TerminalText

#: Retitles the window (OSC 0), writes the clipboard (OSC 52), colours, clears the
#: line and moves the cursor up to hide what came before, and a C1 CSI.
HOSTILE = (b"\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x1b[31mred\x1b[0m\r\x1b[2K\x1b[1A"
           b"tab\there\n\xc2\x9b31m\x9b end\n")
SHOWN = (b"\\x1b]0;pwned\\x07\\x1b]52;c;ZWNobyBoaQ==\\x07\\x1b[31mred\\x1b[0m\\r\\x1b[2K"
         b"\\x1b[1Atab\there\n\\x9b31m\\x9b end\n")


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(HOSTILE)])
def test_control_characters_are_escaped_wherever_the_pieces_are_cut(size: int) -> None:
    text = TerminalText()
    shown = b"".join(text(HOSTILE[i:i + size]) for i in range(0, len(HOSTILE), size))
    assert shown + text.end() == SHOWN


def test_utf8_split_between_pieces_stays_whole_and_a_cut_one_is_shown_as_bytes() -> None:
    text = TerminalText()
    assert text("é€".encode()[:3]) == "é".encode()
    assert text("é€".encode()[3:]) == "€".encode()
    assert text("€".encode()[:2]) == b""
    assert text.end() == b"\\xe2\\x82"
    assert text(b"next\n") == b"next\n"  # the decoder starts afresh


class Stream:
    """A complete log in two pieces, as ``Client.step_log`` streams it."""

    attempt, complete = 1, True

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __iter__(self) -> Any:
        return iter([HOSTILE[:5], HOSTILE[5:]])


class OneLog:
    """A client with one finished step."""

    def job(self, job_id: int) -> dict[str, Any]:
        return {"state": "SUCCEED", "steps": [{"name": "s", "attempt": 1, "state": "SUCCEED"}]}

    def step_log(self, *args: Any) -> Stream:
        return Stream()


@pytest.mark.parametrize("escape,expected", [(True, SHOWN), (False, HOSTILE)])
def test_the_printer_escapes_only_when_asked(escape: bool, expected: bytes) -> None:
    out = io.BytesIO()
    LogPrinter(OneLog(), out, follow=False, escape=escape).job(7)  # type: ignore[arg-type]
    assert out.getvalue() == b"==> step s (attempt 1, SUCCEED) <==\n" + expected
