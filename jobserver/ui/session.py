"""Who is looking at the dashboard: sessions opened with an API token, and the CSRF
tokens of their forms.

The browser holds a random session id in an HttpOnly, SameSite=Strict cookie scoped
to ``/ui``; the store holds the id's hash and a reference to the token
(:mod:`jobserver.store.ui_sessions`). Every request looks the session up again, so a
revoked or expired token, or a config token taken out of ``api.tokens``, ends the
sessions opened with it at their next request.

CSRF: every form of a signed-in page carries ``HMAC(session id, purpose)``. Only the
server and the browser's cookie jar know the id (scripts cannot read an HttpOnly
cookie), so another site can neither read nor forge the value; SameSite=Strict keeps
the cookie off cross-site requests as a second guard. The sign-in form, which has no
session yet, carries a random value that must match a cookie of its own (a
double-submit), so that no other site can sign a browser in as someone else.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from flask import g, request
from werkzeug.wrappers import Response

from jobserver.api import api
from jobserver.api.auth import ANONYMOUS, Principal, authenticate, config_token_principal
from jobserver.config import Config, SecureCookies
from jobserver.exceptions import Forbidden
from jobserver.store.tokens import READ, grants, hash_secret
from jobserver.store.ui_sessions import UiSession

COOKIE = "jobserver_session"
SIGN_IN_COOKIE = "jobserver_sign_in"
#: The form field of every POST's CSRF token.
CSRF_FIELD = "csrf_token"
_CSRF_PURPOSE = b"jobserver-ui-csrf-v1"
#: Longer values are not ids of ours; they are refused before any lookup.
_MAX_COOKIE = 128


@dataclass(frozen=True)
class Visitor:
    """A signed-in browser: the principal its token stands for, as the API sees it."""

    principal: Principal
    session_id: str

    @property
    def csrf_token(self) -> str:
        return hmac.new(self.session_id.encode(), _CSRF_PURPOSE, hashlib.sha256).hexdigest()

    def may(self, scope: str) -> bool:
        return grants(self.principal.scopes, scope)


def visitor() -> Visitor | None:
    """The current request's signed-in visitor, or None (looked up once a request)."""
    if "ui_visitor" not in g:
        g.ui_visitor = _look_up(request.cookies.get(COOKIE, ""))
    found: Visitor | None = g.ui_visitor
    return found


def _look_up(session_id: str) -> Visitor | None:
    if not session_id or len(session_id) > _MAX_COOKIE:
        return None
    ctx = api()
    session = ctx.store.ui_sessions.find(session_id)
    principal = None if session is None else principal_of(ctx.config, session)
    return None if principal is None else Visitor(principal, session_id)


def principal_of(config: Config, session: UiSession) -> Principal | None:
    """Whom ``session`` stands for under ``config`` now; None if its config token is
    no longer configured (or it was opened with authentication off, which is on)."""
    if not config.api.auth:
        return ANONYMOUS
    if session.token_id is not None:
        return Principal(session.token_name or "", frozenset(session.scopes or ()),
                         session.token_id)
    for index, token in enumerate(config.api.tokens):
        if session.config_token_hash is not None and hmac.compare_digest(
                hash_secret(token), session.config_token_hash):
            return config_token_principal(index)
    return None


def open_session(token: str) -> tuple[Principal, str]:
    """Check ``token`` as the API checks a bearer token (AuthError if it is not one)
    and open a session for it; the dashboard needs ``read``. Returns the principal
    and the new session's id."""
    ctx = api()
    principal = authenticate(ctx.config, ctx.store, f"Bearer {token.strip()}")
    if not grants(principal.scopes, READ):
        raise Forbidden(f"token {principal.name!r} lacks the 'read' scope, which the "
                        "dashboard needs", {"required_scope": READ, **principal.describe()})
    config_hash = (hash_secret(token.strip())
                   if ctx.config.api.auth and principal.id is None else None)
    session_id = ctx.store.ui_sessions.open(ctx.config.ui.session_lifetime, principal.id,
                                            config_hash)
    return principal, session_id


def secure_cookies() -> bool:
    """Whether the dashboard's cookies carry ``Secure`` (``ui.secure_cookies``): by
    default when this request came over https, which behind a TLS proxy gunicorn
    knows only from ``X-Forwarded-Proto`` sent by an address in its
    ``forwarded_allow_ips``."""
    setting = api().config.ui.secure_cookies
    if setting is SecureCookies.AUTO:
        return request.is_secure
    return setting is SecureCookies.ALWAYS


def set_session_cookie(response: Response, session_id: str) -> None:
    response.set_cookie(COOKIE, session_id, max_age=int(api().config.ui.session_lifetime),
                        path="/ui", secure=secure_cookies(), httponly=True, samesite="Strict")


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/ui", secure=secure_cookies(), httponly=True,
                           samesite="Strict")


def csrf_ok(expected: str) -> bool:
    """Whether the POSTed form carries ``expected`` as its CSRF token."""
    sent = request.form.get(CSRF_FIELD, "")
    return bool(expected) and hmac.compare_digest(sent.encode(), expected.encode())


def sign_in_nonce() -> str:
    """The sign-in form's double-submit value: the browser's cookie, or a new one
    (set by :func:`set_sign_in_cookie`)."""
    current = request.cookies.get(SIGN_IN_COOKIE, "")
    return current if 20 <= len(current) <= _MAX_COOKIE else secrets.token_urlsafe(24)


def set_sign_in_cookie(response: Response, nonce: str) -> None:
    response.set_cookie(SIGN_IN_COOKIE, nonce, max_age=3600, path="/ui/sign-in",
                        secure=secure_cookies(), httponly=True, samesite="Strict")
