"""``jobserver token create|list|revoke``: API tokens kept (hashed) in the store.

These are admin commands for the server host: they open the store named by the
config's ``database.url`` directly (bringing its schema up to date first, as a starting
node would) and never go through the API. ``create`` prints the secret once; the store
keeps only its SHA-256.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobserver.cli.views import table
from jobserver.exceptions import ConfigError
from jobserver.scopes import SCOPES, SHELL, SQL, parse_scopes

if TYPE_CHECKING:  # the store is imported when the command runs, not to parse it
    from jobserver.config import Config
    from jobserver.store.tokens import TokenRecord

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_parser(sub: Any) -> None:
    """Add ``token`` and its subcommands to the CLI's subparsers."""
    token = sub.add_parser("token", help="API tokens in the store (admin, on the server host)")
    actions = token.add_subparsers(dest="token_action", required=True, metavar="ACTION",
                                   help="create, list or revoke")
    create = actions.add_parser("create", help="create a token and print its secret once")
    create.add_argument("--name", required=True, help="who or what uses it (shown in logs)")
    create.add_argument("--scopes", required=True,
                        help=f"comma-separated, from: {', '.join(SCOPES)}")
    create.add_argument("--expires-in", help="e.g. 3600, 90m, 12h, 30d, 4w (default: never)")
    create.add_argument("--shell", action="store_true",
                        help="also allow jobs with shell steps (the 'shell' scope)")
    create.add_argument("--sql", action="store_true",
                        help="also allow jobs with sql steps (the 'sql' scope)")
    listing = actions.add_parser("list", help="id, name, scopes, expiry, revoked")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    revoke = actions.add_parser("revoke", help="revoke a token by id (effective at once)")
    revoke.add_argument("id", type=int, help="the token's id (token list shows it)")


def parse_duration(text: str) -> float:
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"--expires-in: {text!r} is not a duration such as 3600, 90m, "
                          "12h, 30d or 4w")
    return float(match.group(1)) * _UNITS[match.group(2)]


def run(args: argparse.Namespace, config: Config) -> int:
    from jobserver.store import Store

    store = Store(config.database_url, pool_size=1, notify=False)
    try:
        store.upgrade()
        if args.token_action == "create":
            return _create(store, args)
        if args.token_action == "list":
            tokens = store.tokens.list()
            print(json.dumps([token_json(t) for t in tokens], indent=2) if args.json
                  else _table(tokens))
            return 0
        token = store.tokens.revoke(args.id)
        print(f"token {token.id} ({token.name}) revoked at {_time(token.revoked_at)}")
        return 0
    finally:
        store.dispose()


def _create(store: Any, args: argparse.Namespace) -> int:
    try:
        scopes = parse_scopes(args.scopes + (f",{SHELL}" if args.shell else "")
                              + (f",{SQL}" if args.sql else ""))
    except ValueError as exc:
        raise ConfigError(f"--scopes: {exc}") from None
    expires_in = parse_duration(args.expires_in) if args.expires_in else None
    try:
        token, secret = store.tokens.create(args.name, scopes, expires_in)
    except ValueError as exc:
        raise ConfigError(f"token: {exc}") from None
    print(secret)
    print(f"token {token.id} ({token.name}): scopes {','.join(token.scopes)}; expires "
          f"{_time(token.expires_at) or 'never'}. The secret above is shown only once.",
          file=sys.stderr)
    return 0


def _time(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds").replace("+00:00", "Z") if value else None


def token_json(token: TokenRecord) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "scopes": list(token.scopes),
            "created_at": _time(token.created_at), "expires_at": _time(token.expires_at),
            "revoked_at": _time(token.revoked_at), "last_used_at": _time(token.last_used_at),
            "active": token.active}


def _table(tokens: list[TokenRecord]) -> str:
    rows = [("ID", "NAME", "SCOPES", "EXPIRES", "REVOKED", "LAST USED")]
    for token in tokens:
        expires = _time(token.expires_at) or "never"
        if token.expired:
            expires += " (expired)"
        rows.append((str(token.id), token.name, ",".join(token.scopes), expires,
                     _time(token.revoked_at) or "-", _time(token.last_used_at) or "-"))
    return table(rows)
