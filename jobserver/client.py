"""A small HTTP client for the CLI (standard library only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from jobserver.exceptions import JobServerError


class ApiError(JobServerError):
    """The API answered with an error; ``status`` and the server's error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body.get("error") or {}
        super().__init__(error.get("message") or f"HTTP {status}", error.get("details"))
        self.status = status
        self.code = error.get("code", "error")


class Client:
    def __init__(self, url: str, token: str | None, timeout: float = 10.0) -> None:
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
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except ValueError:
                payload = {}
            raise ApiError(exc.code, payload) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise JobServerError(f"cannot reach the API at {self.url}: {reason}") from None

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


def _query_value(value: Any) -> Any:
    # The API reads booleans as true/false, not Python's True/False.
    return ("true" if value else "false") if isinstance(value, bool) else value


def _path(collection: str, namespace: str, name: str) -> str:
    quote = urllib.parse.quote
    return f"/api/v1/{collection}/{quote(namespace, safe='')}/{quote(name, safe='')}"
