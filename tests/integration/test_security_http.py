"""The API's front door under slow and malformed clients (issue 33, items 4 and 14),
against a real ``jobserver serve``: no store is involved, so SQLite is enough.

* 64 slow connections (connected and silent, or sending a request line or headers a
  byte a second) delay neither ``/healthz``, an authenticated request nor the
  dashboard by a second: the workers' loops read requests, their threads never wait
  on a client (``jobserver.api.worker``). The connections are closed once
  ``api.read_timeout`` has passed, those that sent something with a JSON 408. Nor do
  clients that never close a connection the node closes after its answer.
* A chunked body over ``api.max_body_bytes`` is a JSON 413 naming the body (it was a
  400 "not valid JSON"), and nothing is created; one under the limit is accepted.
* gunicorn's own refusals (a malformed request line, a header or a request line too
  large, a head over 64 KiB) are the API's JSON errors with the right status.

The first tests are of :class:`~jobserver.api.framing.RequestBuffer` alone.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from jobserver.api.framing import MAX_HEAD_BYTES, Progress, RequestBuffer
from tests.helpers import wait_for
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401

READ_TIMEOUT = 4.0
SLOW_CLIENTS = 64
#: What each kind of slow client sends first; all but the first then add a byte a second.
SLOW_STARTS = [b"", b"G", b"GET /api/v1/jo", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "]
#: The delay a slow client may add to anyone else's request.
MAX_DELAY = 1.0
LIMIT = 1 << 20  # api.max_body_bytes' default
#: One node is enough: no store is involved.
SQLITE = pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_API__READ_TIMEOUT": str(READ_TIMEOUT)}


# -- the buffer alone -----------------------------------------------------------------

def fed(data: bytes, step: int = 1, body_limit: int = 1024) -> list[Progress]:
    buffer = RequestBuffer(body_limit)
    return [buffer.feed(data[i:i + step]) for i in range(0, len(data), step)]


def test_a_request_is_whole_at_its_last_byte_and_not_before() -> None:
    cases = [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
             b"\r\nGET / HTTP/1.0\r\n\r\n",
             b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
             b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"
             b"5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\nTrailer: t\r\n\r\n"]
    for data in cases:
        assert fed(data) == [Progress.MORE] * (len(data) - 1) + [Progress.WHOLE], data
        assert fed(data, step=len(data)) == [Progress.WHOLE]


def test_a_body_too_large_to_buffer_goes_on_with_its_head_and_a_head_too_large_is_refused(
        ) -> None:
    head = b"POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n"
    assert fed(head)[-1] is Progress.HEAD
    chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"200\r\n" + b"x" * 600
    assert fed(chunked, step=100)[-1] is Progress.MORE
    assert fed(chunked + b"\r\n200\r\n" + b"x" * 600, step=100)[-1] is Progress.HEAD
    assert fed(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES, step=4096)[-1] \
        is Progress.TOO_LARGE
    # Malformed framing is the parser's to refuse: the buffer hands it on.
    for bad in (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"):
        assert fed(bad, step=len(bad)) == [Progress.WHOLE]


# -- raw HTTP -------------------------------------------------------------------------

def address(node: AttackNode) -> tuple[str, int]:
    url = urllib.parse.urlsplit(node.url)
    assert url.hostname and url.port
    return url.hostname, url.port


def read_answer(sock: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, str], Any]:
    """One HTTP answer from ``sock``: status, headers (lower-case names), JSON body."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\r\n\r\n" not in data or len(data) < _answer_length(data):
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        more = sock.recv(65536)
        assert more, f"connection closed after {data!r}"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def _answer_length(data: bytes) -> int:
    head, found, _ = data.partition(b"\r\n\r\n")
    if not found:
        return len(data) + 1
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(data)


def exchange(node: AttackNode, raw: bytes) -> tuple[int, dict[str, str], Any]:
    with socket.create_connection(address(node), timeout=10) as sock:
        sock.sendall(raw)
        return read_answer(sock)


def post_chunked(node: AttackNode, body: bytes, token: str = "submit") -> tuple[int, Any]:
    head = (f"POST /api/v1/jobs HTTP/1.1\r\nHost: attack\r\n"
            f"Authorization: Bearer {node.tokens[token]}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    step = 16384
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + step]), body[i:i + step])
                      for i in range(0, len(body), step))
    status, _, reply = exchange(node, head + chunks + b"0\r\n\r\n")
    return status, reply


# -- slow clients ---------------------------------------------------------------------

@pytest.fixture
def slow_clients(attack_node: AttackNode  # noqa: F811
                 ) -> Iterator[tuple[list[socket.socket], float]]:
    """:data:`SLOW_CLIENTS` connections, a quarter of each of :data:`SLOW_STARTS`, and
    the time just before the first connected; all but the silent ones send one byte
    more every second while the test runs."""
    opened = time.monotonic()
    socks = []
    for index in range(SLOW_CLIENTS):
        sock = socket.create_connection(address(attack_node), timeout=5)
        sock.sendall(SLOW_STARTS[index % len(SLOW_STARTS)])
        socks.append(sock)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(1.0):
            for index, sock in enumerate(socks):
                if index % len(SLOW_STARTS):
                    try:
                        sock.send(b"a")
                    except OSError:
                        pass  # closed by the node: the read timeout
    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield socks, opened
    finally:
        stop.set()
        thread.join()
        for sock in socks:
            sock.close()


def open_and_waiting(sock: socket.socket) -> bool:
    """Whether the node keeps ``sock`` open without having answered anything (no
    answer and no end of stream to read)."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def page_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=MAX_DELAY) as response:
        response.read()
        return int(response.status)


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@SQLITE
def test_slow_clients_delay_nobody_and_are_cut_off_after_the_read_timeout(
        attack_node: AttackNode,  # noqa: F811
        slow_clients: tuple[list[socket.socket], float]) -> None:
    socks, opened = slow_clients
    for _ in range(3):
        (status, _), took = timed(lambda: attack_node.call("GET", "/healthz",
                                                           timeout=MAX_DELAY))
        assert status == 200 and took < MAX_DELAY, (status, took)
        (status, reply), took = timed(lambda: attack_node.call(
            "GET", "/api/v1/jobs?limit=1", token="read", timeout=MAX_DELAY))
        assert status == 200 and took < MAX_DELAY, (status, reply, took)
        status, took = timed(lambda: page_status(attack_node.url + "/ui/sign-in"))
        assert status == 200 and took < MAX_DELAY, (status, took)
    # They were all still there while the requests above were answered.
    assert time.monotonic() - opened < READ_TIMEOUT
    assert all(open_and_waiting(sock) for sock in socks)
    wait_for(lambda: not any(open_and_waiting(sock) for sock in socks),
             READ_TIMEOUT + 3, 0.1, "the node to close the slow connections")
    assert time.monotonic() - opened >= READ_TIMEOUT  # not before their time
    for index, sock in enumerate(socks):
        if index % len(SLOW_STARTS) == 0:
            assert sock.recv(1024) == b""  # silent: closed without a word
        else:
            status, headers, reply = read_answer(sock)
            assert (status, reply["error"]["code"]) == (408, "request_timeout"), reply
            assert "api.read_timeout" in reply["error"]["message"]
            assert headers["content-type"] == "application/json"


@SQLITE
def test_clients_that_never_close_delay_nobody(attack_node: AttackNode) -> None:  # noqa: F811
    """An answer that closes the connection waits for the client's end of it for up to
    2 s (RFC 9112's graceful close); gunicorn waited in its event loop, so each client
    that never closed froze every connection of its worker for 2 s."""
    socks = [socket.create_connection(address(attack_node), timeout=5) for _ in range(16)]
    try:
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")  # answered, then closed
        for _ in range(3):
            (status, _), took = timed(lambda: attack_node.call("GET", "/healthz",
                                                               timeout=MAX_DELAY))
            assert status == 200 and took < MAX_DELAY, (status, took)
        for sock in socks:
            assert read_answer(sock)[0] == 200
    finally:
        for sock in socks:
            sock.close()


# -- bodies and malformed requests ----------------------------------------------------

@SQLITE
def test_a_chunked_body_over_the_limit_is_a_json_413_naming_the_body(
        attack_node: AttackNode) -> None:  # noqa: F811
    name = unique("chunked")
    spec = {"name": name, "steps": [{"name": "s", "type": "noop"}]}
    big = json.dumps({**spec, "params": {"blob": "x" * LIMIT}}).encode()
    status, reply = post_chunked(attack_node, big)
    assert status == 413, reply
    assert reply["error"]["details"] == {"field": "body"}
    assert f"larger than {LIMIT} bytes (api.max_body_bytes)" in reply["error"]["message"]
    status, reply = attack_node.call("GET", f"/api/v1/jobs?name={name}", token="read")
    assert (status, reply["jobs"]) == (200, [])  # nothing was created
    # Within the limit, chunked is as good as a length (read whole before a thread).
    status, reply = post_chunked(attack_node, json.dumps(spec).encode() + b" " * 100_000)
    assert status == 201, reply
    assert reply["name"] == name


BIG_HEADER = b"X-Big: " + b"a" * 9000 + b"\r\n"  # gunicorn: 8,190 bytes a field at most


@SQLITE
@pytest.mark.parametrize("raw, status, field", [
    (b"GARBAGE\r\n\r\n", 400, "request line"),
    (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 400, "request line"),
    (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request line"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + BIG_HEADER + b"\r\n", 431, "headers"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: abcdefgh\r\n" * 5000 + b"\r\n",
     431, "headers"),  # over 64 KiB: refused as it arrives
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: x\r\n\r\n", 400, "headers"),
], ids=["garbage", "version", "long line", "big header", "huge head", "header name"])
def test_the_servers_own_refusals_are_json(attack_node: AttackNode, raw: bytes,  # noqa: F811
                                           status: int, field: str) -> None:
    got, headers, reply = exchange(attack_node, raw)
    assert got == status, reply
    assert headers["content-type"] == "application/json"
    assert set(reply["error"]) == {"code", "message", "details"}
    assert reply["error"]["details"][0]["field"] == field, reply


@SQLITE
def test_a_malformed_chunk_is_a_json_400_naming_the_body(attack_node: AttackNode) -> None:  # noqa: F811
    head = (f"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {attack_node.tokens['submit']}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    status, _, reply = exchange(attack_node, head + b"zz\r\n{}\r\n0\r\n\r\n")
    assert status == 400, reply
    assert reply["error"]["details"][0]["field"] == "body"
