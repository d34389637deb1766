"""API tokens kept in the store: created, listed and revoked by ``jobserver token``.

A token is a 256-bit random secret shown once at creation; the store keeps only its
SHA-256 (see :class:`~jobserver.store.models.ApiTokenRow` for why a plain digest is the
right hash here). Each token has scopes and an optional expiry:

``read``     every GET route (jobs, events, cluster, metrics, the OpenAPI document)
``fence``    only the fence check (``GET /api/v1/jobs/<id>/fence/<fence>``), which
             ``read`` includes: the token to hand to steps, whose environment and
             output other people may see
``submit``   ``POST /api/v1/jobs``; creating and updating schedules
``shell``    in addition to ``submit``: jobs and schedule templates with ``shell`` steps
``sql``      in addition to ``submit``: jobs and schedule templates with ``sql`` steps
``operate``  pause, resume, rerun, discard; enable, disable and delete schedules
``admin``    cluster operations (routes without a scope of their own need it)

Tokens from the config (``api.tokens``) are not stored here and have every scope.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Label, insert, select, update

from jobserver.exceptions import NotFound, StoreError
# The scopes live outside the store (the CLI names them without SQLAlchemy); they
# stay importable from here.
from jobserver.scopes import (ADMIN, ALL_SCOPES, FENCE, INCLUDED, OPERATE, READ, SCOPES,
                              SHELL, SQL, SUBMIT, grants, parse_scopes)
from jobserver.store import Transactions
from jobserver.store.engine import seconds_since, store_now
from jobserver.store.tables import api_tokens

log = logging.getLogger(__name__)

#: Prefix of stored tokens' secrets, so that secret scanners and people can tell one.
SECRET_PREFIX = "jst_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,99}$")
#: ``last_used_at`` is written at most this often per token, so that reads stay reads.
LAST_USED_RESOLUTION = 60.0


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)  # 32 random bytes = 256 bits


@dataclass(frozen=True)
class TokenRecord:
    id: int
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    expired: bool = False

    @property
    def active(self) -> bool:
        return self.revoked_at is None and not self.expired

    @classmethod
    def from_row(cls, row: Any) -> TokenRecord:
        return cls(id=int(row["id"]), name=row["name"], scopes=tuple(row["scopes"] or ()),
                   created_at=row["created_at"], expires_at=row["expires_at"],
                   revoked_at=row["revoked_at"], last_used_at=row["last_used_at"],
                   expired=bool(row["expired"]))


@dataclass(frozen=True)
class Verdict:
    """What :meth:`TokenRepository.authenticate` found: the token, or why not."""

    token: TokenRecord | None
    reason: str | None = None  # "unknown", "revoked", "expired"


def _expired() -> Label[bool]:
    return (api_tokens.c.expires_at.is_not(None)
            & (api_tokens.c.expires_at <= store_now())).label("expired")


class TokenRepository:
    def __init__(self, tx: Transactions) -> None:
        self._tx = tx

    def create(self, name: str, scopes: list[str],
               expires_in: float | None = None) -> tuple[TokenRecord, str]:
        """Store a new token; return it with its secret (the only time it is seen)."""
        if not NAME.match(name):
            raise ValueError("a token name is 1-100 letters, digits and _.@:- "
                             "starting with a letter or digit")
        scopes = parse_scopes(scopes)
        if expires_in is not None and not 0 < expires_in <= 10 * 365 * 86400:
            raise ValueError("expiry must be between 1 second and 10 years")
        secret = new_secret()
        with self._tx.write() as conn:
            token_id = conn.execute(insert(api_tokens).values(
                name=name, token_hash=hash_secret(secret), scopes=scopes,
                created_at=store_now(),
                expires_at=None if expires_in is None else store_now(expires_in),
            ).returning(api_tokens.c.id)).scalar_one()
            return self._get(conn, token_id), secret

    def _get(self, conn, token_id: int) -> TokenRecord:
        row = conn.execute(select(api_tokens, _expired())
                           .where(api_tokens.c.id == token_id)).mappings().first()
        if row is None:
            raise NotFound(f"token {token_id} does not exist", {"token_id": token_id})
        return TokenRecord.from_row(row)

    def get(self, token_id: int) -> TokenRecord:
        with self._tx.read() as conn:
            return self._get(conn, token_id)

    def list(self) -> list[TokenRecord]:
        with self._tx.read() as conn:
            rows = conn.execute(select(api_tokens, _expired())
                                .order_by(api_tokens.c.id)).mappings().all()
        return [TokenRecord.from_row(row) for row in rows]

    def revoke(self, token_id: int) -> TokenRecord:
        """Revoke at once (the next request with it is a 401); revoking twice keeps
        the first time."""
        with self._tx.write() as conn:
            conn.execute(update(api_tokens).where(api_tokens.c.id == token_id,
                                                  api_tokens.c.revoked_at.is_(None))
                         .values(revoked_at=store_now()))
            return self._get(conn, token_id)

    def count_active(self) -> int:
        return sum(1 for token in self.list() if token.active)

    def authenticate(self, secret: str) -> Verdict:
        """Find the token whose hash matches ``secret``; note its use (at most once a
        minute, so that a GET stays a read transaction most of the time)."""
        digest = hash_secret(secret)
        with self._tx.read() as conn:
            row = conn.execute(select(api_tokens, _expired(),
                                      seconds_since(api_tokens.c.last_used_at).label("idle"))
                               .where(api_tokens.c.token_hash == digest)).mappings().first()
        # The lookup is by an index on the digest; comparing once more in constant
        # time keeps even a theoretical timing signal out of the comparison itself.
        if row is None or not hmac.compare_digest(row["token_hash"], digest):
            return Verdict(None, "unknown")
        token = TokenRecord.from_row(row)
        if token.revoked_at is not None:
            return Verdict(None, "revoked")
        if token.expired:
            return Verdict(None, "expired")
        if row["idle"] is None or float(row["idle"]) >= LAST_USED_RESOLUTION:
            try:
                with self._tx.write() as conn:
                    conn.execute(update(api_tokens).where(api_tokens.c.id == token.id)
                                 .values(last_used_at=store_now()))
            except StoreError:  # bookkeeping only: never fail the request for it
                log.warning("could not record the use of token %s", token.id, exc_info=True)
        return Verdict(token)
