"""``jobserver serve``'s checks of its API: the bind check before any lock (real
sockets), and the bounded restarts of a child that keeps exiting."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from jobserver.api_process import RestartBudget, check_bind
from jobserver.exceptions import ConfigError


def listener(reuse_port: bool) -> socket.socket:
    sock = socket.socket()
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_free_port_passes_and_is_left_free() -> None:
    with listener(False) as sock:
        port = sock.getsockname()[1]
    for reuse_port in (False, True):
        check_bind(f"127.0.0.1:{port}", reuse_port)
    with socket.create_server(("127.0.0.1", port)):  # the probe did not keep it
        pass


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_held_without_reuse_port_is_in_use(reuse_port: bool) -> None:
    with listener(False) as sock:
        bind = f"127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(ConfigError) as refused:
            check_bind(bind, reuse_port)
    assert refused.value.message == f"api.bind: {bind}: address in use"


def test_nodes_sharing_a_port_on_purpose_pass_with_reuse_port() -> None:
    with listener(True) as sock:
        bind = f"127.0.0.1:{sock.getsockname()[1]}"
        check_bind(bind, True)
        with pytest.raises(ConfigError, match="address in use"):
            check_bind(bind, False)  # this node's gunicorn could not join it


def test_an_unknown_host_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^api.bind: no-such-host.invalid:8080: unknown"):
        check_bind("no-such-host.invalid:8080", False)


def test_unix_sockets(tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    check_bind(f"unix:{path}", False)  # nothing there
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        with pytest.raises(ConfigError, match="address in use"):
            check_bind(f"unix:{path}", False)
    check_bind(f"unix:{path}", False)  # a stale socket file: gunicorn replaces it
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(ConfigError, match="exists and is not a socket"):
        check_bind(f"unix:{path}", False)


def test_restarts_are_bounded_within_the_window_and_back_off() -> None:
    now = [0.0]
    budget = RestartBudget(limit=3, window=60, first_pause=0.5, clock=lambda: now[0])
    pauses = []
    for _ in range(3):
        pauses.append(budget.next_pause())
        now[0] += 1
    assert pauses == [0.5, 1.0, 2.0]
    assert budget.next_pause() is None  # the fourth exit within a minute: give up


def test_exits_far_apart_are_restarted_for_ever() -> None:
    now = [0.0]
    budget = RestartBudget(limit=3, window=60, first_pause=0.5, clock=lambda: now[0])
    for _ in range(10):
        assert budget.next_pause() == 0.5
        now[0] += 61
