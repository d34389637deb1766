"""The launcher's pure parts: when a signal asks it to stop or to hurry, and each
node's own address."""

from __future__ import annotations

import signal

import pytest

from jobserver.cluster import node_binds
from jobserver.cluster_stop import StopSignals
from jobserver.exceptions import ConfigError


def test_the_signal_after_the_one_that_began_the_stop_hurries_it() -> None:
    signals = StopSignals()
    signals._on_signal(signal.SIGINT, None)
    assert signals.stop_asked and not signals.hurry_asked
    signals.stopping()
    assert not signals.hurry_asked
    signals._on_signal(signal.SIGINT, None)
    assert signals.hurry_asked


def test_two_signals_before_the_stop_began_hurry_it_at_once() -> None:
    signals = StopSignals()
    signals._on_signal(signal.SIGINT, None)
    signals._on_signal(signal.SIGTERM, None)
    signals.stopping()
    assert signals.hurry_asked


def test_a_stop_without_a_signal_hurries_at_the_first() -> None:
    signals = StopSignals()  # every node exited by itself: the launcher stops
    signals.stopping()
    assert not signals.stop_asked and not signals.hurry_asked
    signals._on_signal(signal.SIGHUP, None)
    assert signals.hurry_asked


def test_node_binds_follow_the_shared_port_or_the_given_ones() -> None:
    assert node_binds("127.0.0.1:8080", 3) == ["127.0.0.1:8081", "127.0.0.1:8082",
                                               "127.0.0.1:8083"]
    assert node_binds("0.0.0.0:80", 2, [9001, 9005]) == ["0.0.0.0:9001", "0.0.0.0:9005"]
    assert node_binds("unix:/run/jobserver.sock", 3) == []
    with pytest.raises(ConfigError, match="--node-ports: 1 port"):
        node_binds("127.0.0.1:8080", 3, [9001])
