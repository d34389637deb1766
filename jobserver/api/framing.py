"""Where an HTTP/1.1 request ends, found without blocking, and the API's errors as raw
HTTP answers for what is refused before Flask sees a request.

:class:`RequestBuffer` is fed the bytes of one request as they arrive and says when a
thread may take it (``jobserver.api.worker``): once the head (request line and
headers) is in, and the body too when it is at most ``body_limit`` bytes, by
``Content-Length`` or by chunks. It is no parser: anything it does not understand
(an odd framing header, a malformed chunk size) counts as complete, so that
gunicorn's parser, which reads only what is buffered by then, refuses it with its
own words. Every byte is scanned a bounded number of times, so a client sending one
byte at a time costs linear work, not quadratic.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

from werkzeug.http import HTTP_STATUS_CODES

#: The largest request head (request line and headers) read; a larger one is a 431.
#: nginx's default allows as much (four buffers of 8 KiB); gunicorn's 8,190 bytes a
#: header line still holds within it.
MAX_HEAD_BYTES = 32 * 1024
#: The largest body read before a thread takes the request: a job, a schedule, a
#: view is far smaller. A larger body (a bulk submit) is read by the thread.
BUFFERED_BODY_BYTES = 64 * 1024
#: How long a chunk-size line may be (with its extensions) before it is malformed.
MAX_CHUNK_LINE = 4096

_NOT_CRLF = re.compile(rb"[^\r\n]")
_BLANK_LINE = re.compile(rb"\n\r?\n")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class Progress(enum.Enum):
    MORE = "more"  # wait for more bytes
    WHOLE = "whole"  # all of it is here, or it is malformed (the parser says how)
    HEAD = "head"  # the head is here; the body is larger than what is buffered
    TOO_LARGE = "too large"  # the head is larger than MAX_HEAD_BYTES


class RequestBuffer:
    """The bytes received of one request and how far they go. ``data`` may run past
    the request (a pipelined next one): the parser keeps the rest for later."""

    def __init__(self, body_limit: int = BUFFERED_BODY_BYTES,
                 head_limit: int = MAX_HEAD_BYTES) -> None:
        self.data = bytearray()
        self.body_limit, self.head_limit = body_limit, head_limit
        self.head_end: int | None = None
        self._start: int | None = None  # the first byte after any leading blank lines
        self._body_end: int | None = None  # by Content-Length
        self._chunk_at: int | None = None  # chunked: where the next size line starts
        self._trailers_at: int | None = None  # chunked: the last chunk's size line's end
        #: An HTTP/1.1 client waits for "100 Continue" before it sends its body.
        self.expects_continue = False

    def feed(self, data: bytes) -> Progress:
        searched = len(self.data)  # every byte before it was searched by earlier feeds
        self.data += data
        if self.head_end is None:
            progress = self._head(searched)
            if progress is not None:
                return progress
        if self._body_end is not None:
            return Progress.WHOLE if len(self.data) >= self._body_end else Progress.MORE
        if self._chunk_at is not None:
            return self._chunks(searched)
        return Progress.WHOLE

    def _head(self, searched: int) -> Progress | None:
        """Find the blank line ending the head; None once found and framed."""
        if self._start is None:
            first = _NOT_CRLF.search(self.data, searched)
            if first is None:
                return self._too_large_or_more()
            self._start = first.start()
        end = _BLANK_LINE.search(self.data, max(self._start, searched - 2))
        if end is None:
            return self._too_large_or_more()
        self.head_end = end.end()
        if self.head_end > self.head_limit:
            return Progress.TOO_LARGE
        return self._frame(bytes(self.data[self._start:self.head_end]))

    def _too_large_or_more(self) -> Progress:
        return Progress.TOO_LARGE if len(self.data) > self.head_limit else Progress.MORE

    def _frame(self, head: bytes) -> Progress | None:
        """How the body is delimited: None to go on reading it, else a verdict."""
        lengths, codings = set(), []
        for line in head.split(b"\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                lengths.add(value.strip())
            elif name == b"transfer-encoding":
                codings += [c.strip().lower() for c in value.split(b",")]
            elif name == b"expect" and value.strip().lower() == b"100-continue":
                self.expects_continue = head.split(b"\n", 1)[0].rstrip().endswith(b"/1.1")
        assert self.head_end is not None
        if codings:
            if lengths or codings[-1] != b"chunked":
                return Progress.WHOLE  # gunicorn refuses (or handles) these framings
            self._chunk_at = self.head_end
            return None
        if not lengths:
            return Progress.WHOLE  # no body
        length = lengths.pop()
        if lengths or not length.isdigit():
            return Progress.WHOLE  # malformed: gunicorn's 400
        if int(length) > self.body_limit:
            return Progress.HEAD
        self._body_end = self.head_end + int(length)
        return None

    def _chunks(self, searched: int) -> Progress:
        """Walk the chunk-size lines received so far, to the last chunk's blank line."""
        assert self.head_end is not None and self._chunk_at is not None
        while self._trailers_at is None:
            if self._chunk_at - self.head_end > self.body_limit:
                return Progress.HEAD
            eol = self.data.find(b"\n", max(self._chunk_at, searched))
            if eol < 0:
                if len(self.data) - self._chunk_at > MAX_CHUNK_LINE:
                    return Progress.WHOLE  # malformed: gunicorn's 400
                return self._body_over_or(Progress.MORE)
            size = bytes(self.data[self._chunk_at:eol]).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size):
                return Progress.WHOLE  # malformed: gunicorn's 400
            if int(size, 16) == 0:  # the last chunk: trailers, then a blank line
                self._trailers_at = eol
            else:
                self._chunk_at = eol + 1 + int(size, 16) + 2  # the data and its CRLF
        done = _BLANK_LINE.search(self.data, max(self._trailers_at, searched - 2))
        return Progress.WHOLE if done else self._body_over_or(Progress.MORE)

    def _body_over_or(self, progress: Progress) -> Progress:
        assert self.head_end is not None
        over = len(self.data) - self.head_end > self.body_limit
        return Progress.HEAD if over else progress


def status_reason(status: int) -> str:
    return HTTP_STATUS_CODES.get(status, "Error")


def error_answer(status: int, message: str, details: Any = None,
                 node: str | None = None) -> bytes:
    """A whole HTTP answer carrying the API's JSON error, the connection closing after
    it: the body is what ``jobserver.api.error_response`` makes of the same error."""
    reason = status_reason(status)
    code = reason.lower().replace(" ", "_").replace("-", "_")
    body = json.dumps({"error": {"code": code, "message": message, "details": details}},
                      ensure_ascii=True).encode()
    head = [f"HTTP/1.1 {status} {reason}", "Connection: close",
            "Content-Type: application/json", f"Content-Length: {len(body)}",
            "X-Content-Type-Options: nosniff", "Cache-Control: no-store"]
    if node:
        head.append(f"X-Jobserver-Node: {node}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + body


def clipped(text: str, width: int = 200) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"
