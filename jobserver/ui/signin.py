"""Signing in with an API token, and out again (``/ui/sign-in``, ``/ui/sign-out``)."""

from __future__ import annotations

from flask import make_response, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from jobserver.api import api
from jobserver.exceptions import AuthError, Forbidden
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import safe_next, ui_action, ui_page
from jobserver.ui.session import (COOKIE, SIGN_IN_COOKIE, clear_session_cookie, csrf_ok,
                                  open_session, set_session_cookie, set_sign_in_cookie,
                                  sign_in_nonce, visitor)

#: Where a sign-in without ``next`` lands.
HOME = "ui.cluster"


@blueprint.get("/")
@ui_page(READ)
def home() -> ResponseReturnValue:
    return redirect(url_for(HOME))


@blueprint.get("/sign-in")
def sign_in() -> ResponseReturnValue:
    target = safe_next(request.args.get("next"))
    if visitor() is not None:
        return redirect(target or url_for(HOME), 303)
    ended = bool(request.cookies.get(COOKIE))  # a cookie no session stands behind
    notice = ("Signed out." if request.args.get("signed_out") else
              "Your session has ended: it expired, or its token was revoked." if ended
              else None)
    return _form(target, notice=notice, status=200, clear=ended)


@blueprint.post("/sign-in")
def sign_in_post() -> ResponseReturnValue:
    target = safe_next(request.form.get("next"))
    if not csrf_ok(request.cookies.get(SIGN_IN_COOKIE, "")):
        return _form(target, error="This sign-in form has expired; please try again.",
                     status=403)
    try:
        _, session_id = open_session(request.form.get("token", ""))
    except AuthError as exc:
        return _form(target, error=f"Not signed in: {exc.message}.", status=401)
    except Forbidden as exc:
        return _form(target, error=f"Not signed in: {exc.message}.", status=403)
    response = redirect(target or url_for(HOME), 303)
    set_session_cookie(response, session_id)
    response.delete_cookie(SIGN_IN_COOKIE, path="/ui/sign-in")
    return response


@blueprint.post("/sign-out")
@ui_action(READ)
def sign_out() -> ResponseReturnValue:
    who = visitor()
    assert who is not None
    api().store.ui_sessions.close(who.session_id)
    response = redirect(url_for("ui.sign_in", signed_out=1), 303)
    clear_session_cookie(response)
    return response


def _form(target: str | None, status: int, error: str | None = None,
          notice: str | None = None, clear: bool = False) -> ResponseReturnValue:
    nonce = sign_in_nonce()
    response = make_response(render_template(
        "ui/sign_in.html", next=target, nonce=nonce, error=error, notice=notice,
        auth=api().config.api.auth), status)
    set_sign_in_cookie(response, nonce)
    if clear:
        clear_session_cookie(response)
    return response
