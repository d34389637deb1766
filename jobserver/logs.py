"""Log formats: plain text (default) or one JSON object per line (``--log-format json``).

A line about a job carries the job's fields as ``extra=`` on the log call (see
:func:`job_fields`): ``job_id``, ``step``, ``attempt``, ``node`` and ``fence``. The JSON
format writes them as keys; the plain one appends them as
``[job=12 step=load attempt=2 node=node-1 fence=7]``. A node process also sets its id
as the default ``node`` of every JSON line (:func:`set_defaults`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any

FORMATS = ("plain", "json")
FORMAT_ENV = "JOBSERVER_LOG_FORMAT"
#: The node id, passed on to the API's gunicorn processes (see :func:`inherit_defaults`).
NODE_ENV = "JOBSERVER_LOG_NODE"
#: The fields a line about a job carries, in this order; the plain format's labels.
JOB_FIELDS = {"job_id": "job", "step": "step", "attempt": "attempt", "node": "node",
              "fence": "fence"}
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_defaults: dict[str, Any] = {}


def set_defaults(**fields: Any) -> None:
    """Fields every JSON line of this process (and of the processes it starts, see
    :func:`inherit_defaults`) carries unless the record has its own."""
    _defaults.update({key: value for key, value in fields.items() if key in JOB_FIELDS})
    if fields.get("node"):
        os.environ[NODE_ENV] = str(fields["node"])


def inherit_defaults() -> None:
    """In a child process (gunicorn): take the node id its node process set."""
    if os.environ.get(NODE_ENV):
        _defaults.setdefault("node", os.environ[NODE_ENV])


def job_fields(job_id: int | None = None, step: str | None = None,
               attempt: int | None = None, node: str | None = None,
               fence: int | None = None) -> dict[str, Any]:
    """``extra=`` for a log call about a job (None values are left out of the line)."""
    return {"job_id": job_id, "step": step, "attempt": attempt, "node": node, "fence": fence}


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key in JOB_FIELDS
            if (value := getattr(record, key, None)) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, pid, the job fields
    present, and the traceback (``exc_info``) if any."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc)
                            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        fields = {**_defaults, **_record_fields(record)}
        body.update({key: fields[key] for key in JOB_FIELDS if key in fields})
        if record.exc_info:
            body["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            body["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(body, default=str)


class PlainFormatter(logging.Formatter):
    """``time LEVEL logger: message [job=.. step=.. attempt=.. node=.. fence=..]``."""

    def __init__(self) -> None:
        super().__init__(PLAIN_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - stdlib name
        text = super().formatMessage(record)
        fields = _record_fields(record)
        if not fields:
            return text
        return text + " [" + " ".join(f"{JOB_FIELDS[k]}={v}" for k, v in fields.items()) + "]"


def formatter(name: str) -> logging.Formatter:
    if name not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {name!r}")
    return JsonFormatter() if name == "json" else PlainFormatter()


def default_format() -> str:
    """``$JOBSERVER_LOG_FORMAT``, or plain (with a warning when it names no format)."""
    value = os.environ.get(FORMAT_ENV, "plain").strip().lower() or "plain"
    if value not in FORMATS:
        print(f"jobserver: {FORMAT_ENV}={value!r} is not one of {', '.join(FORMATS)}; "
              "logging in plain text", file=sys.stderr)
        return "plain"
    return value


def setup_logging(level: str = "INFO", fmt: str = "plain") -> None:
    """Configure the root logger of this process (a no-op if it already has handlers,
    as ``logging.basicConfig``), and export the format to child processes (the API's
    gunicorn, the nodes of ``jobserver cluster``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.captureWarnings(True)  # Python warnings in the same format, not raw stderr
    os.environ[FORMAT_ENV] = fmt


def gunicorn_logconfig() -> dict[str, Any]:
    """gunicorn's ``logconfig_dict`` for JSON logs (empty: gunicorn's own plain format):
    its messages and those of the API code in its workers as JSON lines on stderr,
    no access log."""
    if default_format() != "json":
        return {}
    return {
        "formatters": {"json": {"()": "jobserver.logs.JsonFormatter"}},
        "handlers": {"json": {"class": "logging.StreamHandler", "formatter": "json",
                              "stream": "ext://sys.stderr"}},
        "root": {"level": "WARNING", "handlers": ["json"]},
        "loggers": {
            "gunicorn.error": {"level": "WARNING", "handlers": ["json"], "propagate": False},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
        },
    }
