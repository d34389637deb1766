"""The API tokens' scopes, and what each grants: names and checks with no store behind
them, so that the command line (``jobserver token create --scopes``) and the plug-ins'
route tables can name them without importing SQLAlchemy.

The store keeps tokens (:mod:`jobserver.store.tokens`, which re-exports these names and
documents each scope); the API checks them per route (:mod:`jobserver.api.auth`).
"""

from __future__ import annotations

READ, SUBMIT, SHELL, OPERATE, ADMIN = "read", "submit", "shell", "operate", "admin"
SQL, FENCE = "sql", "fence"
#: Every scope, in the canonical order tokens list them.
SCOPES = (READ, FENCE, SUBMIT, SHELL, SQL, OPERATE, ADMIN)
ALL_SCOPES = frozenset(SCOPES)
#: Scopes a scope grants besides itself: whoever may read a job may ask whether its
#: claim is current.
INCLUDED: dict[str, frozenset[str]] = {READ: frozenset({FENCE})}


def grants(scopes: frozenset[str] | tuple[str, ...], scope: str) -> bool:
    """Whether a token with ``scopes`` may use a route that needs ``scope``."""
    return scope in scopes or any(scope in INCLUDED.get(held, ()) for held in scopes)


def parse_scopes(text: str | list[str]) -> list[str]:
    """``"read,submit"`` -> ``["read", "submit"]`` in canonical order; ValueError names
    an unknown scope."""
    items = text.split(",") if isinstance(text, str) else list(text)
    wanted = {item.strip() for item in items if item.strip()}
    unknown = sorted(wanted - ALL_SCOPES)
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(SCOPES)}")
    if not wanted:
        raise ValueError(f"at least one scope is needed; choose from {', '.join(SCOPES)}")
    return [scope for scope in SCOPES if scope in wanted]
