"""Log formats: plain text with the job's fields, and one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from jobserver import logs
from jobserver.logs import JsonFormatter, PlainFormatter, gunicorn_logconfig, job_fields


def record(message: str = "job %s claimed", *args: object, exc: bool = False,
           **extra: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("broken")
        except ValueError:
            exc_info = sys.exc_info()
    rec = logging.LogRecord("jobserver.test", logging.INFO, __file__, 1, message,
                            args or (12,), exc_info)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


@pytest.fixture(autouse=True)
def no_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_defaults", {})


def test_json_line_carries_the_job_fields() -> None:
    line = JsonFormatter().format(record(**job_fields(12, "load", 2, "n1", 7)))
    assert "\n" not in line
    body = json.loads(line)
    assert body["message"] == "job 12 claimed" and body["level"] == "INFO"
    assert body["logger"] == "jobserver.test" and body["time"].endswith("Z")
    assert (body["job_id"], body["step"], body["attempt"], body["node"], body["fence"]) == (
        12, "load", 2, "n1", 7)


def test_json_leaves_out_missing_fields_and_keeps_tracebacks_on_one_line() -> None:
    line = JsonFormatter().format(record("plain %s", "line", exc=True, **job_fields(3)))
    assert "\n" not in line
    body = json.loads(line)
    assert body["job_id"] == 3 and "step" not in body and "fence" not in body
    assert "ValueError: broken" in body["exc_info"]


def test_json_defaults_fill_in_the_node() -> None:
    logs.set_defaults(node="node-9", unrelated="x")
    body = json.loads(JsonFormatter().format(record("no job %s", "here")))
    assert body["node"] == "node-9" and "unrelated" not in body
    body = json.loads(JsonFormatter().format(record(**job_fields(1, node="other"))))
    assert body["node"] == "other"


def test_plain_line_appends_the_job_fields() -> None:
    line = PlainFormatter().format(record(**job_fields(12, "s", 2, "n1", 7)))
    assert line.endswith("INFO jobserver.test: job 12 claimed [job=12 step=s attempt=2 "
                         "node=n1 fence=7]"), line
    assert PlainFormatter().format(record("no %s", "job")).endswith(": no job")


def test_format_names() -> None:
    assert isinstance(logs.formatter("json"), JsonFormatter)
    with pytest.raises(ValueError):
        logs.formatter("xml")


def test_gunicorn_logconfig_only_for_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(logs.FORMAT_ENV, "plain")
    assert gunicorn_logconfig() == {}
    monkeypatch.setenv(logs.FORMAT_ENV, "json")
    config = gunicorn_logconfig()
    assert config["formatters"]["json"]["()"] == "jobserver.logs.JsonFormatter"
    assert config["loggers"]["gunicorn.access"]["handlers"] == []
    assert config["root"]["handlers"] == ["json"]
