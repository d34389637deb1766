"""Start-up checks of ``jobserver serve``: never an API without authentication on a
reachable address, never an API that nobody can authenticate to.
"""

from __future__ import annotations

import ipaddress
import logging

from jobserver.config import Config
from jobserver.exceptions import ConfigError, StoreError

log = logging.getLogger(__name__)

HOW_TO_CREATE = ("set api.tokens in the config file or JOBSERVER_API__TOKENS, or create "
                 "one with `jobserver token create --name NAME --scopes read,submit` "
                 "(there is no default token)")


def is_loopback(bind: str) -> bool:
    """``127.0.0.0/8``, ``::1`` and ``localhost`` are; a Unix socket counts as local too
    (only processes on this host that may open the file can connect)."""
    if bind.startswith("unix:"):
        return True
    host = bind.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_serve_auth(config: Config, count_stored_tokens=None) -> None:
    """Refuse to serve without authentication on a non-loopback bind, or with
    authentication but no token at all (neither in the config nor in the store)."""
    if not config.api.auth:
        for bind in filter(None, (config.api.bind, config.api.node_bind)):
            if not is_loopback(bind):
                raise ConfigError(
                    f"api.auth: authentication is off, so the API may only listen on a "
                    f"loopback address (127.0.0.1, ::1, localhost), not {bind}; "
                    "set api.auth = true or bind to loopback")
        log.warning("api.auth=false: the API on %s accepts every request without a token",
                    config.api.bind)
        return
    if config.api.tokens:
        return
    count = (count_stored_tokens or _count_stored_tokens)(config)
    if count == 0:
        raise ConfigError(f"api.tokens: no API token configured; {HOW_TO_CREATE}")


def _count_stored_tokens(config: Config) -> int:
    """Active tokens in the store; 0 when the store has no token table yet (a new
    database is migrated by the node, but then it cannot have tokens either)."""
    from jobserver.store import Store

    store = Store(config.database_url, pool_size=1, notify=False)
    try:
        return store.tokens.count_active()
    except StoreError as exc:
        log.debug("no stored tokens readable: %s", exc)
        return 0
    finally:
        store.dispose()
