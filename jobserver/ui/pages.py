"""What every dashboard page shares: who may see it, who may act, and how refusals
and errors look.

* :func:`ui_page` marks a GET route: a signed-in session is needed (a browser without
  one is sent to the sign-in page with ``next=``) and the token's ``scope``; a
  missing scope answers a 403 page.
* :func:`ui_action` marks a POST route: a session, the form's CSRF token and the
  scope, else a 403 that changes nothing.
* Templates get ``can(scope)``, ``csrf_token()``, ``page_url(endpoint)`` and the
  visitor; routes get :func:`actor`, the :class:`~jobserver.store.records.Actor` the
  API records for the same token, to pass to repositories.

Closed by default: a route of the blueprint without either mark (and not public) is
refused with a 403 before it runs, as an API route without a scope needs ``admin``.
A client that does not ask for HTML (a script, the pages' own refresh requests)
gets the API's JSON errors instead of pages and redirects: a 401 when signed out.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from flask import Flask, Response, current_app, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from jobserver.api import (api, charge_route, error_reply, http_error_response,
                           jobserver_error_response, unexpected_error_response)
from jobserver.api.caller import requester_for
from jobserver.api.serialize import time_text
from jobserver.exceptions import AuthError, Forbidden, JobServerError
from jobserver.requester import Requester
from jobserver.store.records import Actor
from jobserver.ui.blueprint import blueprint
from jobserver.ui.session import CSRF_FIELD, csrf_ok, visitor

log = logging.getLogger(__name__)

View = TypeVar("View", bound=Callable[..., ResponseReturnValue])

#: Endpoints anyone may reach: the sign-in page (GET and its POST) and the static files.
PUBLIC = frozenset({"ui.sign_in", "ui.sign_in_post", "ui.static"})
#: The navigation, in this order; a page whose route does not exist (yet) is left out.
NAV: tuple[tuple[str, str], ...] = (("Cluster", "ui.cluster"), ("Jobs", "ui.jobs"))
#: The colour family of each state, for job states and the planners' alike.
STATE_TONES: dict[str, str] = {
    "READY": "waiting", "PENDING": "waiting", "NOT_STARTED": "waiting", "WAITING": "waiting",
    "RUNNING": "running", "LAUNCHED": "running",
    "SUCCEED": "ok", "SUCCESS": "ok", "ENABLED": "ok", "MATERIALIZED": "ok",
    "ERROR": "failed", "FAILED": "failed",
    "STOPPED": "stopped", "DISABLED": "stopped", "NOTHING": "stopped", "ABORTED": "stopped",
    "DISCARDED": "gone", "INVALIDATED": "gone", "DELETED": "gone",
}
#: Headers of every dashboard answer: no inline script or style runs, no other site
#: frames a page, and pages (which carry CSRF tokens) are not cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def wants_html() -> bool:
    """Whether the client asked for HTML by name (a browser navigating or posting a
    form), as opposed to a script or a ``fetch`` (``*/*``)."""
    return any(kind in ("text/html", "application/xhtml+xml") and quality > 0
               for kind, quality in request.accept_mimetypes)


def ui_page(scope: str) -> Callable[[View], View]:
    """A GET page needing a session whose token has ``scope``."""
    def decorate(view: View) -> View:
        @functools.wraps(view)
        def page(*args: Any, **kwargs: Any) -> ResponseReturnValue:
            if visitor() is None:
                return _sign_in_first()
            _require(scope)
            return view(*args, **kwargs)
        setattr(page, "ui_scope", scope)
        return cast(View, page)
    return decorate


def ui_action(scope: str) -> Callable[[View], View]:
    """A POST needing a session, the form's CSRF token and ``scope``."""
    def decorate(view: View) -> View:
        @functools.wraps(view)
        def action(*args: Any, **kwargs: Any) -> ResponseReturnValue:
            who = visitor()
            if who is None:
                return _sign_in_first()
            if not csrf_ok(who.csrf_token):
                raise Forbidden("the form's CSRF token is missing or wrong: reload the page "
                                "and try again", {"field": CSRF_FIELD})
            _require(scope)
            charge_route(who.principal)  # a fixed cost, as the API's routes'
            return view(*args, **kwargs)
        setattr(action, "ui_scope", scope)
        return cast(View, action)
    return decorate


def _require(scope: str) -> None:
    who = visitor()
    assert who is not None
    if not who.may(scope):
        raise Forbidden(f"token {who.principal.name!r} lacks the {scope!r} scope",
                        {"required_scope": scope, **who.principal.describe()})


def _sign_in_first() -> ResponseReturnValue:
    if not wants_html():
        raise AuthError("sign in first: this request has no dashboard session",
                        {"cookie": "jobserver_session"})
    back = request.full_path.rstrip("?") if request.method == "GET" else request.referrer
    return redirect(url_for("ui.sign_in", next=safe_next(back)), 303)


def safe_next(target: str | None) -> str | None:
    """``target`` if it is a path of the dashboard on this site, else None: a sign-in
    link never sends anyone elsewhere."""
    if not target:
        return None
    parts = urlsplit(target)
    if (parts.scheme or parts.netloc or not parts.path.startswith("/ui/") or "\\" in target
            or ".." in parts.path.split("/")):
        return None
    return target


def actor() -> Actor:
    """The signed-in token as the API records it (``submitted_by``, event actors)."""
    who = visitor()
    assert who is not None, "actor() outside a ui_page/ui_action route"
    return who.principal.actor


def requester() -> Requester:
    """The signed-in token as the planners act for it: its actor, scopes and submit
    budget, as for the same request through the API."""
    who = visitor()
    assert who is not None, "requester() outside a ui_page/ui_action route"
    return requester_for(who.principal)


def can(scope: str) -> bool:
    """Whether the visitor's token has ``scope`` (what templates offer)."""
    who = visitor()
    return who is not None and who.may(scope)


def csrf_token() -> str:
    who = visitor()
    return "" if who is None else who.csrf_token


def page_url(endpoint: str, **values: Any) -> str | None:
    """The URL of ``endpoint``, or None while no such route exists."""
    if endpoint not in current_app.view_functions:
        return None
    return url_for(endpoint, **values)


def install(app: Flask, planner_nav: Sequence[tuple[str, str]] = ()) -> None:
    """Give templates the dashboard's functions (also inside imported macros); the
    navigation lists the engine's pages, then ``planner_nav``."""
    app.jinja_env.globals.update(
        can=can, csrf_token=csrf_token, csrf_field=CSRF_FIELD, page_url=page_url,
        nav=(*NAV, *planner_nav), visitor=visitor, state_tone=lambda state: STATE_TONES.get(
            str(state).upper(), "other"), utc_text=time_text)


@blueprint.context_processor
def _page_context() -> dict[str, Any]:
    config = api().config
    return {"node_id": config.server.id,
            "refresh_ms": int(config.ui.refresh_interval * 1000)}


@blueprint.before_request
def _closed_by_default() -> None:
    """A route nobody marked is refused (a forgotten mark must not make it public)."""
    view = current_app.view_functions.get(request.endpoint or "")
    if request.endpoint not in PUBLIC and not hasattr(view, "ui_scope"):
        raise Forbidden("this dashboard route declares no scope", {"required_scope": "admin"})


@blueprint.after_request
def _secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    if request.endpoint != "ui.static":
        response.headers["Cache-Control"] = "no-store"
    return response


def error_page(status: int, title: str, message: str) -> tuple[str, int]:
    return render_template("ui/error.html", status=status, title=title,
                           message=message), status


@blueprint.errorhandler(JobServerError)
def _jobserver_error(exc: JobServerError) -> ResponseReturnValue:
    if not wants_html():
        return jobserver_error_response(exc)
    reply = error_reply(exc)
    if reply is None:
        return _unexpected(exc)
    return error_page(reply.status, reply.code.replace("_", " ").capitalize(), reply.message)


@blueprint.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> ResponseReturnValue:
    if not wants_html():
        return http_error_response(exc)
    return error_page(exc.code or 500, exc.name, exc.description or exc.name)


@blueprint.errorhandler(Exception)
def _unexpected(exc: Exception) -> ResponseReturnValue:
    if not wants_html():
        return unexpected_error_response(exc)
    log.exception("unhandled error on %s %s", request.method, request.path)
    return error_page(500, "Internal error", "Something went wrong on this node; its log "
                      "says what.")
