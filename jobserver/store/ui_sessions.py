"""Sessions of the web dashboard: opened by signing in with an API token, ended by
signing out, by their own expiry, or with the token they stand for.

A session's id is 256 random bits, handed to the browser once (in its cookie); the
store keeps only the id's SHA-256, so a reader of the table cannot sign in as anyone.
A session refers to its token (see :class:`~jobserver.store.models.UiSessionRow`) and
is checked against it on every lookup: the token's revocation or expiry ends the
session at the next request, as it ends the token's bearer use.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, insert, select

from jobserver.store import Transactions
from jobserver.store.engine import store_now
from jobserver.store.tables import api_tokens, ui_sessions
from jobserver.store.tokens import hash_secret

#: Random bytes in a session id (256 bits, as a token's secret).
SESSION_ID_BYTES = 32


@dataclass(frozen=True)
class UiSession:
    """A live session: whom it stands for, and until when."""

    token_id: int | None  # a stored token's id; None for a config token (or no auth)
    token_name: str | None  # the stored token's name
    scopes: tuple[str, ...] | None  # the stored token's scopes
    config_token_hash: str | None
    expires_at: datetime


class UiSessionRepository:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def open(self, lifetime: float, token_id: int | None = None,
             config_token_hash: str | None = None) -> str:
        """A new session for a stored token (``token_id``) or a config token (its
        SHA-256), ending after ``lifetime`` seconds at the latest; returns its id, the
        only time it is seen. Sessions already expired are deleted on the way."""
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        with self._tx.write() as conn:
            conn.execute(delete(ui_sessions).where(ui_sessions.c.expires_at <= store_now()))
            conn.execute(insert(ui_sessions).values(
                id_hash=hash_secret(session_id), token_id=token_id,
                config_token_hash=config_token_hash, created_at=store_now(),
                expires_at=store_now(lifetime)))
        return session_id

    def find(self, session_id: str) -> UiSession | None:
        """The session ``session_id`` names while it and its stored token are valid;
        None otherwise. A session whose token was revoked or has expired is deleted:
        it has ended for good. One read by primary key (and the token's)."""
        token_ok = (api_tokens.c.revoked_at.is_(None)
                    & (api_tokens.c.expires_at.is_(None)
                       | (api_tokens.c.expires_at > store_now()))).label("token_ok")
        query = (select(ui_sessions.c.token_id, ui_sessions.c.config_token_hash,
                        ui_sessions.c.expires_at, api_tokens.c.name, api_tokens.c.scopes,
                        token_ok)
                 .select_from(ui_sessions.outerjoin(
                     api_tokens, api_tokens.c.id == ui_sessions.c.token_id))
                 .where(ui_sessions.c.id_hash == hash_secret(session_id),
                        ui_sessions.c.expires_at > store_now()))
        with self._tx.read() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        if row["token_id"] is not None and not row["token_ok"]:
            self.close(session_id)
            return None
        return UiSession(row["token_id"], row["name"],
                         None if row["scopes"] is None else tuple(row["scopes"]),
                         row["config_token_hash"], row["expires_at"])

    def close(self, session_id: str) -> None:
        """End the session (signing out, or a session found dead); a no-op for an id
        that names none."""
        with self._tx.write() as conn:
            conn.execute(delete(ui_sessions)
                         .where(ui_sessions.c.id_hash == hash_secret(session_id)))
