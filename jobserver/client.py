"""A small HTTP client for the CLI (standard library only).

Every failure is a :class:`~jobserver.exceptions.JobServerError` with a one-line
message: :class:`ApiError` when the API answered with an error, the base class when
it could not be reached or did not answer like the API, and
:class:`~jobserver.exceptions.ConfigError` for a URL or token that cannot be used
(before anything is sent).
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from jobserver.exceptions import ConfigError, JobServerError

#: What a bearer token can be on the wire: printable ASCII without spaces.
_TOKEN = re.compile(r"^[\x21-\x7e]+$")


class ApiError(JobServerError):
    """The API answered with an error; ``status`` and the server's error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body.get("error") or {}
        super().__init__(error.get("message") or f"HTTP {status}", error.get("details"))
        self.status = status
        self.code = error.get("code", "error")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the API's base URL, or None when it can."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises for a port that is not a number in range
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected http://HOST:PORT or https://HOST:PORT"
    if any(char.isspace() or not char.isprintable() for char in url):
        return "spaces or control characters in the URL"
    if parts.query or parts.fragment or port == 0:
        return "expected http://HOST:PORT[/PATH], without a query or a fragment"
    return None


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be sent as a bearer token, or None when it can."""
    return None if _TOKEN.match(token) else "expected printable ASCII without spaces"


class Client:
    def __init__(self, url: str, token: str | None, timeout: float = 10.0) -> None:
        problem = url_problem(url)
        if problem:
            raise ConfigError(f"API URL {url!r}: {problem}")
        if token is not None and token_problem(token):
            raise ConfigError(f"API token: {token_problem(token)}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None,
                query: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: _query_value(v) for k, v in query.items()
                                                 if v is not None}, doseq=True)
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        return self._answer(request)

    def _answer(self, request: urllib.request.Request) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except (ValueError, OSError, http.client.HTTPException):
                payload = {}
            raise ApiError(exc.code, payload if isinstance(payload, dict) else {}) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise JobServerError(f"cannot reach the API at {self.url}: "
                                 f"{str(reason) or type(reason).__name__}") from None
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise JobServerError(f"the answer from {self.url} is not JSON: is it the "
                                 "jobserver API?") from None

    def submit(self, spec: bytes, idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.request("POST", "/api/v1/jobs", spec, headers)

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}")

    def job_events(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}/events")

    def jobs(self, **query: Any) -> dict[str, Any]:
        return self.request("GET", "/api/v1/jobs", query=query)

    def operate(self, job_id: int, action: str) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/jobs/{job_id}/{action}")

    def fence(self, job_id: int, fence: int, attempt: int | None = None) -> dict[str, Any]:
        """Whether the job's claim under ``fence`` (and ``attempt``) is current."""
        return self.request("GET", f"/api/v1/jobs/{job_id}/fence/{fence}",
                            query={"attempt": attempt})

    # -- resources: schedules, datasets ---------------------------------------------------
    def resource(self, collection: str, namespace: str, name: str) -> dict[str, Any]:
        return self.request("GET", _path(collection, namespace, name))

    def put_resource(self, collection: str, namespace: str, name: str, body: dict[str, Any],
                     dry_run: bool = False) -> dict[str, Any]:
        """Create or update to match ``body``: ``{<noun>, "change", "changed",
        "dry_run"}``."""
        return self.request("PUT", _path(collection, namespace, name), body,
                            query={"dry_run": dry_run})

    def delete_resource(self, collection: str, namespace: str, name: str) -> None:
        self.request("DELETE", _path(collection, namespace, name))

    # -- schedules ------------------------------------------------------------------------
    def schedules(self, **query: Any) -> dict[str, Any]:
        return self.request("GET", "/api/v1/schedules", query=query)

    def schedule(self, namespace: str, name: str) -> dict[str, Any]:
        return self.resource("schedules", namespace, name)

    def put_schedule(self, namespace: str, name: str, body: dict[str, Any],
                     dry_run: bool = False) -> dict[str, Any]:
        return self.put_resource("schedules", namespace, name, body, dry_run)

    def schedule_action(self, namespace: str, name: str, action: str) -> dict[str, Any]:
        """``enable`` or ``disable``; returns the schedule."""
        return self.request("POST", f"{_path('schedules', namespace, name)}/{action}")

    def delete_schedule(self, namespace: str, name: str) -> None:
        self.delete_resource("schedules", namespace, name)

    def schedule_jobs(self, namespace: str, name: str, **query: Any) -> dict[str, Any]:
        return self.request("GET", f"{_path('schedules', namespace, name)}/jobs", query=query)

    def schedule_evaluations(self, namespace: str, name: str, **query: Any) -> dict[str, Any]:
        return self.request("GET", f"{_path('schedules', namespace, name)}/evaluations",
                            query=query)

    # -- datasets and partitions ---------------------------------------------------------
    def datasets(self, **query: Any) -> dict[str, Any]:
        return self.request("GET", "/api/v1/datasets", query=query)

    def partitions(self, namespace: str, name: str, **query: Any) -> dict[str, Any]:
        """A page of partitions; ``where`` is a list of conditions."""
        return self.request("GET", f"{_path('datasets', namespace, name)}/partitions",
                            query=query)

    def add_partitions(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        return self.request("POST", f"{_path('datasets', namespace, name)}/partitions", body)

    def delete_partitions(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        return self.request("DELETE", f"{_path('datasets', namespace, name)}/partitions",
                            body)

    def cluster(self) -> dict[str, Any]:
        return self.request("GET", "/api/v1/cluster")

    def materialize(self, pattern: str, mode: str, plan: bool) -> dict[str, Any]:
        return self.request("POST", "/api/v1/views/materialize",
                            {"pattern": pattern, "mode": mode, "plan": plan})

    def invalidate(self, pattern: str) -> dict[str, Any]:
        return self.request("POST", "/api/v1/views/invalidate", {"pattern": pattern})

    def views(self, **query: Any) -> dict[str, Any]:
        return self.request("GET", "/api/v1/views", query=query)

    def healthy(self) -> bool:
        try:
            self.request("GET", "/healthz")
            return True
        except JobServerError:
            return False

    # -- step logs ------------------------------------------------------------------------
    def step_log(self, job_id: int, step: str, attempt: int | None = None,
                 offset: int = 0) -> LogStream:
        """Open a step attempt's log (the newest attempt by default) from byte
        ``offset``; use the result in a ``with`` block and iterate over its pieces."""
        path = f"/api/v1/jobs/{job_id}/steps/{urllib.parse.quote(step, safe='')}/log"
        query = {"offset": offset, **({"attempt": attempt} if attempt is not None else {})}
        request = urllib.request.Request(f"{self.url}{path}?{urllib.parse.urlencode(query)}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            return LogStream(urllib.request.urlopen(request, timeout=self.timeout), self.url)
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except ValueError:
                payload = {}
            raise ApiError(exc.code, payload) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise JobServerError(f"cannot reach the API at {self.url}: {reason}") from None


def _query_value(value: Any) -> Any:
    # The API reads booleans as true/false, not Python's True/False.
    return ("true" if value else "false") if isinstance(value, bool) else value


def _path(collection: str, namespace: str, name: str) -> str:
    quote = urllib.parse.quote
    return f"/api/v1/{collection}/{quote(namespace, safe='')}/{quote(name, safe='')}"


class LogStream:
    """An open step log response: ``attempt``, ``complete`` (the attempt had ended, so
    this is the whole rest of its log) and the body's pieces when iterated."""

    PIECE = 64 * 1024

    def __init__(self, response: Any, url: str) -> None:
        self._response, self._url = response, url
        self.attempt = int(response.headers.get("X-Log-Attempt", "0"))
        self.complete = response.headers.get("X-Log-Complete") == "true"

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._response.close()

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                piece = self._response.read(self.PIECE)
            except (http.client.HTTPException, OSError) as exc:
                raise JobServerError(f"the log from {self._url} broke off: "
                                     f"{type(exc).__name__}") from None
            if not piece:
                return
            yield piece
