"""Retention's settings and the purge command's input, without a store."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from jobserver.cli.purge import parse_before, parse_states
from jobserver.config import load_config
from jobserver.exceptions import ConfigError
from jobserver.schedules.store import FEED
from jobserver.states import State
from jobserver.store.keep import JOB_EVENT_FEEDS
from jobserver.views.tracker import JOBS_FEED


@pytest.mark.parametrize("value, seconds", [
    ("30d", 30 * 86400.0), ("12h", 43200.0), ("90m", 5400.0), ("4w", 28 * 86400.0),
    ("3600", 3600.0), ("off", 0.0), ("0", 0.0)])
def test_finished_jobs_takes_a_duration_or_off(value: str, seconds: float) -> None:
    config = load_config(environ={"JOBSERVER_RETENTION__FINISHED_JOBS": value})
    assert config.retention.finished_jobs == seconds


def test_retention_defaults_and_file(tmp_path: Path) -> None:
    assert load_config(environ={}).retention.finished_jobs == 30 * 86400
    path = tmp_path / "jobserver.toml"
    path.write_text('[retention]\nfinished_jobs = "7d"\ninterval = 300\nbatch_size = 200\n')
    retention = load_config(path, environ={}).retention
    assert (retention.finished_jobs, retention.interval, retention.batch_size) == (
        7 * 86400, 300, 200)


@pytest.mark.parametrize("value, message", [
    ("30 days", "is not a duration"), ("10", "at least 60 s, or 0"), ("-1d", "not a duration")])
def test_bad_durations_name_the_key(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ={"JOBSERVER_RETENTION__FINISHED_JOBS": value})
    assert "retention.finished_jobs (from JOBSERVER_RETENTION__FINISHED_JOBS)" in str(raised.value)
    assert message in str(raised.value)


def test_the_change_history_is_kept_a_year_unless_configured() -> None:
    assert load_config(environ={}).retention.changes == 365 * 86400
    assert load_config(environ={"JOBSERVER_RETENTION__CHANGES": "off"}).retention.changes == 0
    with pytest.raises(ConfigError) as raised:
        load_config(environ={"JOBSERVER_RETENTION__CHANGES": "10"})
    assert "retention.changes (from JOBSERVER_RETENTION__CHANGES)" in str(raised.value)


def test_purge_dates_are_utc_unless_zoned() -> None:
    assert parse_before("2026-01-31") == datetime(2026, 1, 31, tzinfo=timezone.utc)
    assert parse_before("2026-01-31T12:00:00+02:00").astimezone(timezone.utc).hour == 10
    assert parse_states(["succeed", "ERROR,succeed"]) == (State.SUCCEED, State.ERROR)
    assert parse_states(None) == (State.SUCCEED, State.DISCARDED)


def test_the_job_event_feeds_retention_waits_for_are_the_readers() -> None:
    assert set(JOB_EVENT_FEEDS) == {FEED, JOBS_FEED}
