"""The API's gunicorn worker: gthread, with every request read before a thread sees it.

gunicorn's gthread worker hands a connection to a thread of its pool as soon as the
connection is readable, and the thread then reads the request line and headers with
blocking reads: a client that sends one byte and stops holds a thread, and
``api.workers`` × 4 such clients froze the API and the dashboard. Its graceful close
(FIN, then up to 2 s of discarding what the client still sends) runs in the worker's
event loop with blocking reads, so each client that never closes froze the whole
worker for 2 s. This worker keeps gthread's threads, keep-alive and limits, and moves
what waits on a client into the event loop, where it waits without blocking:

* the loop reads each request (its head, and its body when that is at most
  :data:`~jobserver.api.framing.BUFFERED_BODY_BYTES`) and hands the connection to the
  pool only when it is all there (:class:`~jobserver.api.framing.RequestBuffer`);
* a request not all there ``api.read_timeout`` seconds after the connection was
  accepted (or, between requests, after its first byte) is answered 408 and closed; a
  connection that sent nothing is closed silently; a head over
  :data:`~jobserver.api.framing.MAX_HEAD_BYTES` is answered 431;
* a larger body (or any body while the worker holds :data:`BODY_BUDGET` bytes of
  them) is read by the thread, as gunicorn does, and the connection closes after the
  answer rather than a thread draining what the route did not read;
* a graceful close lingers in the loop, registered like any other socket.

Invariant: no thread of the pool waits on a client for a request's head, nor for a
body up to ``BUFFERED_BODY_BYTES`` while the budget lasts. The connections a worker
holds are capped by gunicorn's ``worker_connections`` (1,000): past it, new ones wait
in the kernel's backlog. TLS and HTTP/2 are left to gunicorn's threads (the loop
steps aside) and to a proxy in front.

gunicorn's own error answers (a malformed request line, a header too large, a bad
chunk) are the API's JSON error, ``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.workers.gthread import ThreadWorker, TConn

from jobserver.api.framing import (BUFFERED_BODY_BYTES, MAX_HEAD_BYTES, Progress,
                                   RequestBuffer, clipped, error_answer)

#: What one read of a socket by the loop asks for.
READ_CHUNK = 64 * 1024
#: The bytes of bodies a worker's loop holds at once, all connections together; past
#: it, a request goes to a thread with its head, its body read there. With the heads
#: (at most ``worker_connections`` × ``MAX_HEAD_BYTES``) this bounds a worker's buffers.
BODY_BUDGET = 16 * 1024 * 1024
#: A graceful close discards what the client still sends for this long, this much.
LINGER_SECONDS, LINGER_BYTES = 2.0, 64 * 1024

#: Which part of a request each of gunicorn's parse errors is about.
_ERROR_FIELDS: list[tuple[tuple[type[Exception], ...], str]] = [
    ((http_errors.InvalidRequestLine, http_errors.InvalidRequestMethod,
      http_errors.InvalidHTTPVersion, http_errors.LimitRequestLine), "request line"),
    ((http_errors.InvalidChunkSize, http_errors.ChunkMissingTerminator,
      http_errors.InvalidChunkExtension), "body"),
    ((http_errors.InvalidHeader, http_errors.InvalidHeaderName,
      http_errors.LimitRequestHeaders, http_errors.ObsoleteFolding,
      http_errors.InvalidSchemeHeaders, http_errors.UnsupportedTransferCoding,
      http_errors.ExpectationFailed), "headers"),
]


@dataclass
class Reading:
    """A connection whose request the loop is reading, and by when it must be in."""

    conn: TConn
    buffer: RequestBuffer
    deadline: float
    continued: bool = False  # "100 Continue" sent: the client may send its body


@dataclass
class Linger:
    deadline: float
    left: int = LINGER_BYTES


class Conn(TConn):
    """gunicorn's connection, whose graceful close is handed to the worker's loop."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any,
                 linger: Callable[[socket.socket], None]) -> None:
        super().__init__(cfg, sock, client, server)
        self.linger = linger
        self.request_ready = False  # set when the loop has read the next request
        self.body_partial = False  # that request's body was too large to read first
        self.continued = False  # the loop said "100 Continue" to that request

    def close(self, graceful: bool = False) -> None:
        if graceful:
            self.linger(self.sock)
        else:
            super().close()


class BufferingWorker(ThreadWorker):
    """gunicorn's gthread worker whose loop reads requests whole (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading: dict[TConn, Reading] = {}  # in order of their deadlines
        self.lingering: dict[socket.socket, Linger] = {}
        self.buffered = 0  # bytes held by self.reading's buffers
        self.read_timeout, self.body_limit, self.node = 10.0, BUFFERED_BODY_BYTES, ""
        self.buffering = True
        self.loop_thread = threading.get_ident()

    def init_process(self) -> None:
        from jobserver.config import load_config

        config = load_config()  # what create_app() reads too, in this same process
        self.read_timeout = config.api.read_timeout
        self.body_limit = min(BUFFERED_BODY_BYTES, config.api.max_body_bytes)
        self.node = config.server.id
        self.loop_thread = threading.get_ident()
        # TLS and HTTP/2 read the connection in the thread; the loop stays out of them.
        self.buffering = not self.cfg.is_ssl and self.cfg.http2_cleartext == "off"
        if not self.buffering:
            self.log.warning("TLS or HTTP/2 in gunicorn: requests are read by threads; "
                             "put a proxy that buffers requests in front")
        super().init_process()

    # -- reading requests in the loop ------------------------------------------------

    def accept(self, listener: socket.socket) -> None:
        if not self.buffering:
            return super().accept(listener)
        try:
            sock, client = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                return None
            raise
        self.nr_conns += 1
        conn = Conn(self.cfg, sock, client, listener.getsockname(), self._linger)
        self._read(conn)
        return None

    def enqueue_req(self, conn: TConn) -> None:
        """Every way to the pool passes here: a new or kept-alive connection, or one
        holding the next request already; only a request read whole goes on."""
        if not self.buffering or getattr(conn, "request_ready", True):
            if isinstance(conn, Conn):
                conn.request_ready = False
            super().enqueue_req(conn)
            return
        self._read(conn)

    def _read(self, conn: TConn) -> None:
        reading = Reading(conn, RequestBuffer(self.body_limit, MAX_HEAD_BYTES),
                          time.monotonic() + self.read_timeout)
        self.reading[conn] = reading
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ,
                             partial(self._on_readable, reading))
        held = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        if held:  # read ahead with the request before: it may be all there is
            self.buffered += len(held)
            self._settle(reading, reading.buffer.feed(held))
        else:
            self._on_readable(reading)

    def _on_readable(self, reading: Reading, _fileobj: Any = None) -> None:
        try:
            data = reading.conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._forget(reading)
            self.nr_conns -= 1
            reading.conn.close()
            return
        self.buffered += len(data)
        self._settle(reading, reading.buffer.feed(data))

    def _settle(self, reading: Reading, progress: Progress) -> None:
        if (progress is Progress.MORE and reading.buffer.head_end is not None
                and self.buffered > BODY_BUDGET):
            progress = Progress.HEAD  # too much held: this body is read by the thread
        if progress is Progress.MORE:
            if reading.buffer.expects_continue and not reading.continued:
                reading.continued = True  # the body comes after this, as gunicorn does
                self._send(reading.conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        self._forget(reading)
        conn = reading.conn
        if progress is Progress.TOO_LARGE:
            self._refuse(conn, 431, f"the request line and headers are larger than "
                                    f"{MAX_HEAD_BYTES} bytes", "headers")
            return
        conn.init()  # plain HTTP/1: makes the parser, reads nothing
        conn.parser.unreader.unread(bytes(reading.buffer.data))
        conn.data_ready = True  # gunicorn's thread must not wait for readability
        conn.request_ready = True
        conn.body_partial = progress is Progress.HEAD
        conn.continued = reading.continued
        self.enqueue_req(conn)

    def _forget(self, reading: Reading) -> None:
        if self.reading.pop(reading.conn, None) is not None:
            self.buffered -= len(reading.buffer.data)
        try:
            self.poller.unregister(reading.conn.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _refuse(self, conn: TConn, status: int, message: str, field: str) -> None:
        """Answer an error from the loop (a few hundred bytes: the socket's buffer
        takes them at once) and close."""
        self._send(conn.sock, error_answer(status, message,
                                           [{"field": field, "message": message}], self.node))
        self.nr_conns -= 1
        self._linger(conn.sock)

    @staticmethod
    def _send(sock: socket.socket, data: bytes) -> None:
        """Best effort, never blocking: what the loop sends is small enough for an
        empty socket buffer, and a client gone or not reading loses it."""
        try:
            sock.send(data)
        except OSError:
            pass

    def murder_pending(self) -> None:
        """Each turn of the loop: what gunicorn expires, then requests that did not
        arrive in time and lingering closes that are over."""
        super().murder_pending()
        now = time.monotonic()
        while self.reading:
            reading = next(iter(self.reading.values()))
            if reading.deadline > now:
                break
            self._forget(reading)
            if reading.buffer.data:
                self._refuse(reading.conn, 408, "the request was not received within "
                             f"{self.read_timeout:g} s (api.read_timeout)", "request")
            else:  # nothing sent: an idle or speculative connection
                self.nr_conns -= 1
                reading.conn.close()
        for sock in [s for s, linger in self.lingering.items() if linger.deadline <= now]:
            self._end_linger(sock)

    # -- closing in the loop ---------------------------------------------------------

    def _linger(self, sock: socket.socket) -> None:
        """Close as RFC 9112 section 9.6 asks (FIN, then discard what the client still
        sends until it closes), with the discarding in the loop."""
        if threading.get_ident() != self.loop_thread:
            util.close_graceful(sock)  # never the case in gthread; gunicorn's own way
            return
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock, selectors.EVENT_READ, self._on_linger_readable)
        except (OSError, KeyError, ValueError):
            util.close(sock)
            return
        self.lingering[sock] = Linger(time.monotonic() + LINGER_SECONDS)

    def _on_linger_readable(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        linger = self.lingering[sock]
        linger.left -= len(data)
        if not data or linger.left <= 0:
            self._end_linger(sock)

    def _end_linger(self, sock: socket.socket) -> None:
        self.lingering.pop(sock, None)
        try:
            self.poller.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass
        util.close(sock)

    # -- answers ---------------------------------------------------------------------

    def handle_request(self, req: Any, conn: TConn) -> bool:
        """A body the loop did not read whole: close after the answer, so that no
        thread drains what the route left unread from a client that may trickle. A
        request the loop said "100 Continue" to is not told so again."""
        if getattr(conn, "body_partial", False):
            req.force_close()
        if getattr(conn, "continued", False):
            req._expected_100_continue = False  # said once already, by the loop
        return bool(super().handle_request(req, conn))

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn decides the status and logs as it does; the page is the API's."""
        page = _Page(client)
        super().handle_error(req, page, addr, exc)
        if page.status is None:
            return
        if page.status >= 500:
            message, details = "internal server error; see the node's log", None
        else:
            message = clipped(str(exc))
            details = [{"field": field_of(exc), "message": message}]
        try:
            util.write_nonblock(client, error_answer(page.status, message, details,
                                                     self.node))
        except Exception:  # noqa: BLE001 - as gunicorn: the client may be gone
            self.log.debug("Failed to send error message.")


def field_of(exc: BaseException) -> str:
    """The part of the request a gunicorn parse error is about."""
    for kinds, field in _ERROR_FIELDS:
        if isinstance(exc, kinds):
            return field
    return "request"


class _Page:
    """Stands in for the client while gunicorn writes its HTML error page: keeps the
    page's status and writes nothing; everything else reaches the real socket."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.status: int | None = None

    def gettimeout(self) -> float:
        return 0.0

    def sendall(self, data: bytes) -> None:
        self.status = int(data.split(b" ", 2)[1])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)
