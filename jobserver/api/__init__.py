"""The HTTP API: a Flask application factory.

``create_app()`` builds everything from config and starts nothing: no scheduler, no
thread. Under gunicorn each worker calls it after forking, so no connection is shared
between processes. Every route but ``/healthz`` needs a bearer token, except the web
dashboard's under ``/ui`` (``jobserver.ui``), which need its session instead, and
``/``, which only sends a browser to the dashboard. Every answer names the node that
gave it (``X-Jobserver-Node``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from flask import Flask, Response, current_app, g, jsonify, redirect, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from jobserver.config import Config, load_config
from jobserver.api.auth import Cost, Principal, authenticate, authorize, route_cost
from jobserver.api.limits import SubmitLimiter
from jobserver.api.requests import check_body, check_path
from jobserver.exceptions import (AuthError, Conflict, FencedOff, Forbidden, InvalidRequest,
                                  JobServerError, LockError, MalformedRequest, NotFound,
                                  RateLimited, StoreError, StoreUnavailable)
from jobserver.metrics import ApiMetrics, multiprocess
from jobserver.presence import PresenceProbe, probe_for
from jobserver.spec import Policy
from jobserver.steps.python import PythonSteps
from jobserver.store import Store

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from locks.base import LockBackend

log = logging.getLogger(__name__)

#: Routes without a token: the health check, and ``/``, which reveals nothing (it
#: answers every caller with the same redirect to the dashboard, whose pages need
#: a session).
PUBLIC_ENDPOINTS = frozenset({"health.healthz", "home"})
#: Where the web dashboard (``jobserver.ui``) is served.
UI_PREFIX = "/ui"
#: The header of every answer that names the node which gave it (``server.id``).
NODE_HEADER = "X-Jobserver-Node"

#: The HTTP status of each error class; a class not listed answers as its nearest
#: listed base class, and :class:`JobServerError` itself as an internal error.
HTTP_STATUS: dict[type[JobServerError], int] = {
    InvalidRequest: 422, MalformedRequest: 400, NotFound: 404, Conflict: 409,
    FencedOff: 409, AuthError: 401, Forbidden: 403, RateLimited: 429,
    LockError: 503, StoreUnavailable: 503,
}
#: What a client is told when the store is out; the driver's words stay in the log.
STORE_UNAVAILABLE = "the metadata store is not reachable"


class ErrorReply(NamedTuple):
    """An error as the API answers it, before it becomes a response."""

    status: int
    code: str
    message: str
    details: Any = None
    headers: dict[str, str] = {}


def error_reply(exc: JobServerError) -> ErrorReply | None:
    """The answer to ``exc``; None for an error that is a bug of the server (a store
    error other than an outage, an unlisted class), which is logged and answered as
    an internal error without its message."""
    status = next((HTTP_STATUS[cls] for cls in type(exc).__mro__ if cls in HTTP_STATUS), 500)
    if status == 500:
        return None
    if isinstance(exc, StoreError):
        return ErrorReply(status, exc.code, STORE_UNAVAILABLE)
    headers = {}
    if isinstance(exc, AuthError):
        headers["WWW-Authenticate"] = 'Bearer realm="jobserver"'
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
    return ErrorReply(status, exc.code, exc.message, exc.details, headers)


@dataclass
class ApiContext:
    config: Config
    store: Store
    policy: Policy
    metrics: ApiMetrics
    registry: Any  # this app's own registry when not in multiprocess mode
    limiter: SubmitLimiter  # per-token submit rate (api.submit_rate), per node
    presence: PresenceProbe  # asks the lock service which nodes are present


def api() -> ApiContext:
    """The context of the application handling the current request."""
    return current_app.extensions["jobserver"]


def create_app(config: Config | None = None, store: Store | None = None,
               python_steps: PythonSteps | None = None,
               locks: LockBackend | None = None) -> Flask:
    """The API of ``config``. ``locks``: a node's lock backend in the same process,
    which the cluster view asks which nodes are present; by default the app makes a
    backend of its own for that on first use (``jobserver.presence``)."""
    config = config or load_config()
    python_steps = python_steps or PythonSteps.with_entry_points()
    app = Flask("jobserver")
    app.config["MAX_CONTENT_LENGTH"] = config.api.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]  # Flask's default provider has it
    registry = None if multiprocess() else _registry()
    store = store or Store(config.database_url, config.database.pool_size,
                           notify=config.scheduler.notify)
    app.extensions["jobserver"] = ApiContext(
        config=config, store=store,
        policy=Policy(python_steps.is_registered, config.steps.shell.allowed_executables,
                      connections=config.connections,
                      denied_env=config.steps.shell.denied_env),
        metrics=ApiMetrics(registry), registry=registry,
        limiter=SubmitLimiter.for_node(config.api.submit_rate, config.api.submit_burst),
        presence=(PresenceProbe.over(locks) if locks is not None
                  else probe_for(config, store)))

    from jobserver.api import (bulk, cluster, fences, health, history, jobs, logs, metrics,
                               openapi)
    from jobserver import ui
    from jobserver.planners import installed

    for module in (health, jobs, bulk, fences, logs):
        app.register_blueprint(module.blueprint)
    for planner in installed():
        for planned in planner.blueprints():
            app.register_blueprint(planned)
    for module in (cluster, openapi, metrics, history):
        app.register_blueprint(module.blueprint)
    ui.register(app)
    app.add_url_rule("/", "home", home)
    app.before_request(_start_timer)
    app.before_request(_authenticate)
    app.before_request(check_path)
    app.before_request(check_body)
    app.after_request(_count_request)
    app.after_request(history.record_change)
    app.after_request(_name_node)
    app.register_error_handler(JobServerError, jobserver_error_response)
    app.register_error_handler(HTTPException, http_error_response)
    app.register_error_handler(Exception, unexpected_error_response)
    return app


def _registry() -> CollectorRegistry:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def home() -> ResponseReturnValue:
    """``GET /``: a browser pointed at a node lands on the dashboard (302 to ``/ui/``,
    whose pages ask it to sign in)."""
    return redirect(UI_PREFIX + "/", 302)


def _start_timer() -> None:
    g.started = time.perf_counter()


def _count_request(response: Response) -> Response:
    # The URL rule, not the path: job ids never become label values.
    route = request.url_rule.rule if request.url_rule else "unmatched"
    metrics = api().metrics
    metrics.requests.labels(route, request.method, str(response.status_code)).inc()
    if "started" in g:
        metrics.latency.labels(route).observe(time.perf_counter() - g.started)
    return response


def _name_node(response: Response) -> Response:
    """Say which node answered: nodes may share one address (``api.reuse_port``)."""
    response.headers[NODE_HEADER] = api().config.server.id
    return response


def error_response(status: int, code: str, message: str,
                   details: Any = None) -> tuple[Response, int]:
    body = {"error": {"code": code, "message": message, "details": details}}
    return jsonify(body), status


def _authenticate() -> None:
    """401 without a valid token, 403 outside the token's scopes (``api/auth.py``).
    The dashboard's routes authorise by its session instead (``jobserver.ui.pages``);
    a path under ``/ui`` that matches no route is left to be the 404 it is."""
    if request.endpoint in PUBLIC_ENDPOINTS or _is_dashboard():
        return
    ctx = api()
    g.principal = authenticate(ctx.config, ctx.store, request.headers.get("Authorization", ""))
    authorize(g.principal, request.endpoint)
    charge_route(g.principal)


def charge_route(principal: Principal) -> None:
    """Take a route's fixed cost (:class:`~jobserver.api.auth.Cost`) from the caller's
    submit budget before it runs; reads and per-job routes are charged elsewhere."""
    if request.method in ("GET", "HEAD", "OPTIONS") or request.endpoint is None:
        return
    if route_cost(request.endpoint) is Cost.ONE:
        api().limiter.check(principal, 1)


def _is_dashboard() -> bool:
    if request.url_rule is not None:
        return request.blueprint == "ui"
    return request.path == UI_PREFIX or request.path.startswith(UI_PREFIX + "/")


def jobserver_error_response(exc: JobServerError) -> tuple[Response, int]:
    reply = error_reply(exc)
    if reply is None:
        return unexpected_error_response(exc)
    if isinstance(exc, StoreUnavailable):
        log.warning("%s %s: the store is unavailable: %s", request.method, request.path, exc)
    response = error_response(reply.status, reply.code, reply.message, reply.details)
    response[0].headers.update(reply.headers)
    return response


def http_error_response(exc: HTTPException) -> tuple[Response, int]:
    """Werkzeug's own errors (no route, a method a route does not take, a body over
    the limit) in the API's format, with what the client can do about them."""
    status = exc.code or 500
    code = (exc.name or "error").lower().replace(" ", "_")
    message: str = exc.description or exc.name
    details: dict[str, Any] | None = None
    where = f"{request.method} {_clipped(request.path)}"
    if status == 404 and request.url_rule is None:
        message = f"no route matches {where} (see /api/v1/openapi.json)"
    elif status == 405:
        allowed = sorted(set(getattr(exc, "valid_methods", None) or ()) - {"HEAD", "OPTIONS"})
        message = f"{where}: method not allowed; allowed: {', '.join(allowed)}"
        details = {"allowed": allowed}
    elif status == 413:
        limit = request.max_content_length
        setting = "api.max_body_bytes" if limit == api().config.api.max_body_bytes \
            else "this route's limit"
        message = f"request body is larger than {limit} bytes ({setting})"
        details = {"field": "body"}
    response = error_response(status, code, message, details)
    for name, value in exc.get_headers():
        if name.lower() != "content-type":  # Allow of a 405, for one
            response[0].headers[name] = value
    return response


def _clipped(text: str, width: int = 200) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def unexpected_error_response(exc: Exception) -> tuple[Response, int]:
    log.exception("unhandled error on %s %s", request.method, request.path)
    return error_response(500, "internal_error", "internal server error; see the node's log")
