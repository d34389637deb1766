"""The CLI's views, rendered from API-shaped dicts (no server), and their parsing."""

from __future__ import annotations

import io
import re
import unicodedata
from datetime import datetime, timezone

import pytest

from jobserver.cli import _parser
from jobserver.cli.views import ago, age, clip, cluster_view, jobs_view, table, watch
from jobserver.client import ApiError
from jobserver.exceptions import JobServerError

CLUSTER = {
    "mode": "leader", "lock_backend": "zookeeper", "active": "node-2",
    "jobs": {"READY": 4, "RUNNING": 2, "SUCCEED": 17},
    "nodes": [
        {"id": "node-1", "host": "h1", "pid": 11, "role": "standby", "state": "alive",
         "alive": True, "capacity": 10, "running": 1, "started_at": "2026-11-29T10:00:00Z",
         "heartbeat_age_seconds": 0.42},
        {"id": "node-2", "host": "h2", "pid": 12, "role": "active", "state": "alive",
         "alive": True, "capacity": 10, "running": 1, "started_at": "2026-11-29T10:00:01Z",
         "heartbeat_age_seconds": 1.5},
        {"id": "node-3", "host": "h3", "pid": 13, "role": "none", "state": "alive",
         "alive": False, "capacity": 10, "running": 0, "started_at": "2026-11-29T09:00:00Z",
         "heartbeat_age_seconds": 4000.0},
        {"id": "node-4", "host": "h4", "pid": 14, "role": "none", "state": "stopped",
         "alive": False, "capacity": 10, "running": 0, "started_at": "2026-11-28T09:00:00Z",
         "heartbeat_age_seconds": 90000.0},
    ],
}


def test_cluster_view() -> None:
    lines = cluster_view(CLUSTER).splitlines()
    assert lines[0] == ("mode: leader   lock backend: zookeeper   active: node-2   "
                        "nodes alive: 2/4")
    assert lines[1] == ("jobs:  READY 4  RUNNING 2  SUCCEED 17  ERROR 0  STOPPED 0  "
                        "DISCARDED 0")
    assert lines[3].split() == ["NODE", "ROLE", "STATE", "HEARTBEAT", "RUNNING", "CAPACITY",
                                "HOST", "PID", "STARTED"]
    rows = [line.split() for line in lines[4:]]
    assert rows[0][:5] == ["node-1", "standby", "alive", "0.4s", "1"]
    assert rows[1][:5] == ["node-2", "active", "alive", "1.5s", "1"]
    assert rows[2][:4] == ["node-3", "none", "dead", "1h06m"]  # crashed: row says alive
    assert rows[3][:4] == ["node-4", "none", "stopped", "25h00m"]


def test_cluster_view_without_nodes() -> None:
    view = cluster_view({"mode": "single", "lock_backend": "file", "active": None,
                         "nodes": [], "jobs": {}})
    assert "active: -" in view and "(no node has registered yet)" in view


def test_ages() -> None:
    assert [age(s) for s in (None, 0.04, 59.9, 61, 3600, 3 * 86400)] == [
        "-", "0.0s", "59.9s", "1m01s", "1h00m", "3d"]


def test_watch_redraws_and_survives_an_unreachable_api() -> None:
    calls = iter([JobServerError("cannot reach the API at x"), "frame 2", "frame 3"])

    def render() -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    out = io.StringIO()
    assert watch(render, "jobserver jobs", interval=0, count=3, out=out) == 0
    text = out.getvalue()
    assert text.count("Every 0s: jobserver jobs") == 3
    assert "(refresh failed: cannot reach the API at x)" in text
    assert "frame 2" in text and "frame 3" in text and "\x1b[" not in text  # not a tty


def test_watch_stops_on_an_api_refusal() -> None:
    def render() -> str:
        raise ApiError(401, {"error": {"message": "invalid token"}})

    with pytest.raises(ApiError):
        watch(render, "x", interval=0, count=3, out=io.StringIO())


def test_jobs_view() -> None:
    now = datetime(2026, 11, 29, 10, 3, 30, tzinfo=timezone.utc)
    page = {"jobs": [{"id": 3, "name": "etl", "state": "RUNNING",
                      "progress": {"done": 1, "total": 4}, "attempt": 2, "node": "node-1",
                      "created_at": "2026-11-29T10:00:00Z",
                      "started_at": "2026-11-29T10:01:00Z", "finished_at": None},
                     {"id": 2, "name": "old", "state": "SUCCEED",
                      "progress": {"done": 1, "total": 1}, "attempt": 1, "node": "node-2",
                      "created_at": "2026-11-26T09:00:00Z",
                      "started_at": "2026-11-26T09:00:00Z",
                      "finished_at": "2026-11-26T09:00:12.5Z"},
                     {"id": 1, "name": "wait", "state": "READY",
                      "progress": {"done": 0, "total": 1}, "attempt": 0, "node": None,
                      "created_at": "2026-11-29T10:03:18Z", "started_at": None,
                      "finished_at": None}]}
    rows = [re.split(r"\s{2,}", line) for line in jobs_view(page, now).splitlines()]
    assert rows[1] == ["3", "etl", "RUNNING", "1/4", "2", "node-1", "2m30s", "3 min ago"]
    assert rows[2][-2:] == ["12.5s", "3 days ago"]
    assert rows[3][-2:] == ["-", "12 s ago"]


def test_relative_times() -> None:
    now = datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc)
    assert [ago(text, now) for text in (None, "2026-11-29T10:00:00Z",
                                        "2026-11-29T09:59:15Z", "2026-11-29T07:00:00Z",
                                        "2026-11-29T10:05:00Z")] == [
        "-", "just now", "45 s ago", "3 h ago", "in 5 min"]


def test_parsing() -> None:
    parser = _parser()
    status = parser.parse_args(["cluster"])
    assert status.nodes is None and not status.watch
    local = parser.parse_args(["cluster", "--nodes", "3", "--demo"])
    assert (local.nodes, local.demo) == (3, True)
    watching = parser.parse_args(["jobs", "--watch", "--interval", "0.5", "--state", "READY"])
    assert (watching.watch, watching.interval, watching.state) == (True, 0.5, "READY")
    assert parser.parse_args(["--log-format", "json", "serve"]).log_format == "json"
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "xml", "serve"])


def columns(text: str) -> int:
    """The terminal columns of ``text``, counted here independently of the CLI."""
    return sum(0 if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Cf")
               else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_wide_characters_keep_columns_aligned() -> None:
    assert table([("NAME", "STATE"), ("日本", "READY"), ("🚀x", "RUNNING"),
                  ("e\u0301", "ERROR")]).splitlines() == [
        "NAME  STATE", "日本  READY", "🚀x   RUNNING", "e\u0301     ERROR"]


def test_the_jobs_table_lines_up_whatever_the_names() -> None:
    names = ["etl", "日次バッチ処理", "nightly 🚀 load", "café\u0301", "a\nb\x1b[31m",
             "長い名前" * 10]
    page = {"jobs": [{"id": i, "name": name, "state": "READY",
                      "progress": {"done": 0, "total": 1}, "attempt": 1, "node": None,
                      "created_at": "2026-11-29T10:00:00Z"} for i, name in enumerate(names)]}
    lines = jobs_view(page).splitlines()
    assert len(lines) == len(names) + 1  # a newline in a name does not make a row
    state_at = columns(lines[0][:lines[0].index("STATE")])
    for line in lines[1:]:
        assert columns(line[:line.index("READY")]) == state_at, line
        assert "\x1b" not in line
    assert "\\n" in lines[5] and "\\x1b" in lines[5]


def test_clipping_counts_columns() -> None:
    assert clip("長い名前", 5) == "長い…" and columns(clip("長い名前", 5)) == 5
    assert clip("abc", 3) == "abc" and clip("abcd", 3) == "ab…"


def test_cluster_view_names_the_planner() -> None:
    view = {"mode": "distributed", "lock_backend": "postgres", "active": None,
            "nodes": [], "jobs": {}}
    held = cluster_view({**view, "planner": {"node": "node-3",
                                             "since": "2026-11-29T10:00:01.318000Z"}})
    assert held.splitlines()[0].endswith(
        "nodes alive: 0/0   planner: node-3 (since 2026-11-29T10:00:01Z)"), held
    assert cluster_view({**view, "planner": None}).splitlines()[0].endswith(
        "planner: -")
