"""``jobserver submit FILE|-``: one job, or many.

The file holds one JSON object (a job: it goes to ``POST /api/v1/jobs`` as it is), a
JSON array of jobs, or JSON lines (one job an object a line; blank lines are
skipped). Many jobs go to ``POST /api/v1/jobs/batch`` in batches of up to 1,000, each
item with its own optional ``idempotency_key``. Each job is a line, in input order, as
its batch is stored: ``job 13 submitted: <url>/ui/jobs/13``, its dashboard page. With
``--json`` the API's answer is printed instead: the job as JSON for one, ``{"id",
"created"}`` a line for many (what a script reads). A refused batch stops the command with one line naming the job
(``jobs[i]`` counts from the file's first job, whatever batch it went in); the
batches before it stay submitted. When the token's submit rate refuses a batch, the
command waits ``Retry-After`` and sends it again (smaller, if the batch is larger
than the token's burst).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from jobserver.client import ApiError, Client
from jobserver.exceptions import InvalidRequest

EXIT_API, EXIT_USAGE = 1, 2
#: The most jobs the API takes in one batch.
BATCH = 1000
#: Refusals by the rate limit in a row before giving up on a batch.
MAX_WAITS = 100
_ITEM = re.compile(r"jobs\[(\d+)\]")


def run(args: argparse.Namespace, client: Client) -> int:
    """The ``submit`` command: 0 when every job was stored."""
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        jobs, lines = read_jobs(data)
    except OSError as exc:
        return _usage(f"cannot read {args.file}: {exc.strerror or exc}")
    except InvalidRequest as exc:  # the file is not a job, jobs or JSON lines
        return _usage(f"{'stdin' if args.file == '-' else args.file}: {exc.message}")
    if isinstance(jobs, dict):  # one job, as the command always took it
        job = client.submit(data, args.idempotency_key)
        print(json.dumps(job, indent=2) if args.json else _line(client, job, args.quiet))
        return 0
    if args.idempotency_key:
        return _usage("--idempotency-key is for one job; give each job of an array or of "
                      "JSON lines its own \"idempotency_key\"")
    return submit_many(client, jobs, lines, args.json, args.quiet)


def _line(client: Client, item: dict[str, Any], quiet: bool) -> str:
    """What a user reads of one stored job: its id alone for a script (``--quiet``,
    as ``id=$(jobserver submit job.json -q)``), else :func:`submitted`."""
    if quiet:
        return str(item["id"])
    return submitted(client, item["id"], item.get("created", True))


def submitted(client: Client, job_id: int, created: bool = True) -> str:
    """``job 13 submitted: http://…/ui/jobs/13``: the line a user reads, with the page
    that shows the job (the API's base URL serves the dashboard too)."""
    verb = "submitted" if created else "was submitted before (same idempotency_key)"
    return f"job {job_id} {verb}: {client.url}/ui/jobs/{job_id}"


def read_jobs(data: bytes) -> tuple[dict[str, Any] | list[dict[str, Any]], list[int] | None]:
    """The job, or the jobs, of a file; for JSON lines also each job's line number.
    :class:`InvalidRequest` says what is wrong, and where."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidRequest("not UTF-8 text") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        return _json_lines(text, exc)
    if isinstance(document, dict):
        return document, None
    if not isinstance(document, list):
        raise InvalidRequest("expected a job (a JSON object), a JSON array of jobs or JSON lines")
    if not document:
        raise InvalidRequest("the array holds no job")
    for index, item in enumerate(document):
        if not isinstance(item, dict):
            raise InvalidRequest(f"jobs[{index}]: expected a JSON object")
    return document, None


def _json_lines(text: str, whole: ValueError) -> tuple[list[dict[str, Any]], list[int]]:
    """One job a line; ``whole``: why the text is not one JSON document, the error
    when not even its first line is JSON (a document, then, not JSON lines)."""
    jobs: list[dict[str, Any]] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InvalidRequest(f"line {number}: not valid JSON ({exc})" if jobs
                             else f"not valid JSON ({whole})") from None
        if not isinstance(item, dict):
            raise InvalidRequest(f"line {number}: expected a JSON object (a job)")
        jobs.append(item)
        lines.append(number)
    if not jobs:
        raise InvalidRequest("holds no job")
    return jobs, lines


def submit_many(client: Client, jobs: list[dict[str, Any]], lines: list[int] | None,
                as_json: bool = False, quiet: bool = False) -> int:
    """Send ``jobs`` in batches, printing a line per job (``as_json``: the API's
    ``{"id", "created"}``; ``quiet``: the id alone); 1 at the first batch refused."""
    done, size, waits = 0, BATCH, 0
    while done < len(jobs):
        chunk = jobs[done:done + size]
        try:
            answer = client.request("POST", "/api/v1/jobs/batch", {"jobs": chunk})
        except ApiError as exc:
            pause = _rate_limited(exc, size)
            if pause is None or waits >= MAX_WAITS:
                print(f"jobserver: {_located(exc.message, done, lines)}{_so_far(done)}",
                      file=sys.stderr)
                return EXIT_API
            size = min(size, _burst(exc) or size)
            waits += 1
            time.sleep(pause)
            continue
        waits = 0
        print("\n".join(json.dumps(item) if as_json else _line(client, item, quiet)
                         for item in answer["jobs"]), flush=True)
        done += len(chunk)
    return 0


def _rate_limited(exc: ApiError, size: int) -> float | None:
    """Seconds to wait before sending again; None when the refusal is not the rate's."""
    if exc.status != 429 or not isinstance(exc.details, dict):
        return None
    burst = _burst(exc)
    if burst is not None and burst < size:
        return 0.0  # smaller batches may pass at once
    return float(exc.details.get("retry_after") or 1)


def _burst(exc: ApiError) -> int | None:
    burst = exc.details.get("burst") if isinstance(exc.details, dict) else None
    return burst if isinstance(burst, int) and burst >= 1 else None


def _located(message: str, offset: int, lines: list[int] | None) -> str:
    """The API's message with its ``jobs[i]`` counted from the file's first job (and
    that job's line, for JSON lines)."""
    first = _ITEM.search(message)
    located = _ITEM.sub(lambda match: f"jobs[{offset + int(match.group(1))}]", message)
    if first is not None and lines is not None:
        index = offset + int(first.group(1))
        if index < len(lines):
            located += f" (line {lines[index]})"
    return located


def _so_far(done: int) -> str:
    return (f"; jobs[0] to jobs[{done - 1}] were submitted (printed above), "
            f"nothing from jobs[{done}] on" if done else "; nothing was submitted")


def _usage(message: str) -> int:
    print(f"jobserver: {message}", file=sys.stderr)
    return EXIT_USAGE
