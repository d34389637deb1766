"""The engine's configuration sections: scheduling, locks, servers, the API and the
dashboard, steps, retention. Each is a pydantic model that refuses unknown keys, so a
misspelt key stops start-up instead of being ignored."""

from __future__ import annotations

import enum
import os
import re
import socket
from typing import Annotated, Any

from pydantic import (BaseModel, ConfigDict, Field, SecretStr, StringConstraints,
                      field_validator)


class SchedulerMode(str, enum.Enum):
    """Kylin's scheduler modes; Kylin's numbers are accepted as aliases."""

    SINGLE = "single"
    DISTRIBUTED = "distributed"
    LEADER = "leader"


#: The listener that runs unless ``scheduler.listeners`` says otherwise: it logs.
DEFAULT_LISTENER = "jobserver.listeners:LoggingListener"
_LISTENER_NAME = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

_KYLIN_MODE_NUMBERS = {0: SchedulerMode.SINGLE, 2: SchedulerMode.DISTRIBUTED,
                       100: SchedulerMode.LEADER}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class DatabaseConfig(_Section):
    url: str | None = None
    pool_size: int = Field(default=5, ge=1, le=100)


class SchedulerConfig(_Section):
    mode: SchedulerMode = SchedulerMode.SINGLE
    poll_interval: float = Field(default=1.0, gt=0, le=300)
    max_concurrent_jobs: int = Field(default=10, ge=1, le=1000)
    claim_batch: int = Field(default=32, ge=1, le=1000)
    # Claim-ahead: a claim round that fills the runner holds up to this many more jobs
    # (READY, held by the node) to start by id as slots free; 0: off. Off by default:
    # a held job's start writes what a claim writes, so holding adds a write per job
    # and saves none (bench/RESULTS.md). Leader mode does not hold (the leader's
    # assignments play that part).
    prefetch: int = Field(default=0, ge=0, le=1000)
    # A held job that waited this long for a slot goes back to any claimer.
    prefetch_timeout: float = Field(default=0.1, gt=0, le=60)
    # A job READY longer than this, for a reason other than waiting for a free slot,
    # counts in jobserver_jobs_stuck (and fires the JobserverJobsBlocked alert).
    stuck_after: float = Field(default=600.0, gt=0, le=7 * 86400)
    # Wake idle schedulers at once: on PostgreSQL submits NOTIFY and schedulers LISTEN
    # (turn off behind a transaction-pooling proxy); on SQLite schedulers watch the file
    # for others' commits every 10 ms. Polling remains either way.
    notify: bool = True
    # Scheduling listeners (jobserver.listeners): "module:Class" names, trusted operator
    # config imported at start-up. An empty list turns every listener off.
    listeners: list[str] = Field(default_factory=lambda: [DEFAULT_LISTENER])
    listener_max_retries: int = Field(default=-1, ge=-1)  # -1: restart for ever
    listener_queue_size: int = Field(default=10000, ge=1, le=1_000_000)
    # The webhook listener runs when URLs are set: POST of each event's JSON.
    webhook_urls: list[str] = Field(default_factory=list)
    webhook_retries: int = Field(default=3, ge=0, le=100)
    webhook_timeout: float = Field(default=5.0, gt=0, le=300)

    def prefetch_limit(self) -> int:
        """How many jobs a node may hold ahead in this mode (see ``prefetch``)."""
        return 0 if self.mode is SchedulerMode.LEADER else self.prefetch

    @field_validator("mode", mode="before")
    @classmethod
    def _kylin_numbers(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            number = int(value)
            if number not in _KYLIN_MODE_NUMBERS:
                raise ValueError("Kylin mode numbers are 0 (single), 2 (distributed), 100 (leader)")
            return _KYLIN_MODE_NUMBERS[number]
        return value

    @field_validator("listeners")
    @classmethod
    def _listener_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not _LISTENER_NAME.match(name):
                raise ValueError(f"{name!r} is not a 'module:Class' name")
        return names

    @field_validator("webhook_urls")
    @classmethod
    def _webhook_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return urls


class LockConfig(_Section):
    backend: str = Field(default="file", pattern=r"^(file|postgres|zookeeper|memory)$")
    # postgres backend: how long a stalled holder keeps its locks (idle_session_timeout)
    session_timeout: float = Field(default=5.0, ge=1, le=600)
    # postgres backend: the database holding the advisory locks (default: database.url)
    url: str | None = None


class ZooKeeperConfig(_Section):
    hosts: str = "127.0.0.1:2181"
    root: str = Field(default="/jobserver", pattern=r"^/[A-Za-z0-9_./-]*$")
    session_timeout: float = Field(default=6.0, ge=1, le=600)
    # "digest:USER:PASSWORD": nodes are created readable and writable by that user only
    # (and the client authenticates as it). No default; unset means open ACLs.
    auth: SecretStr | None = None

    @field_validator("auth")
    @classmethod
    def _digest_auth(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            scheme, _, rest = value.get_secret_value().partition(":")
            user, _, password = rest.partition(":")
            if scheme != "digest" or not user or not password:
                raise ValueError("expected 'digest:USER:PASSWORD'")
        return value


class ServerConfig(_Section):
    id: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}",
                    pattern=r"^[A-Za-z0-9][A-Za-z0-9.:@-]{0,99}$")
    heartbeat_interval: float = Field(default=2.0, gt=0, le=300)
    dead_after: float = Field(default=10.0, gt=0, le=3600)
    drain_timeout: float = Field(default=30.0, ge=0, le=86400)
    capacity: int | None = Field(default=None, ge=1, le=1000)


#: What a bearer token can be on the wire: printable ASCII without spaces.
_TOKEN_TEXT = re.compile(r"^[\x21-\x7e]+$")
#: ``host:port`` or ``unix:PATH``
BIND_PATTERN = r"^[^\s:]+:\d{1,5}$|^unix:\S+$"


class ApiConfig(_Section):
    bind: str = Field(default="127.0.0.1:8080", pattern=BIND_PATTERN)
    # An address of this node's API alone, beside ``bind`` (which several nodes may
    # share with ``reuse_port``): where a scrape of /metrics reaches this very node.
    node_bind: str | None = Field(default=None, pattern=BIND_PATTERN)
    tokens: list[str] = Field(default_factory=list)
    workers: int = Field(default=2, ge=1, le=64)
    max_body_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)
    # Seconds a client has to send a whole request (its head, and a body of up to
    # 64 KiB), from its connection (or, between requests, from its first byte): then
    # 408 and closed. Requests are read by the workers' loops, never by their threads
    # (``jobserver.api.worker``).
    read_timeout: float = Field(default=10.0, ge=0.5, le=300)
    reuse_port: bool = False
    # False: no authentication at all; ``serve`` then refuses any bind but loopback.
    auth: bool = True
    # Submits per second per token and node (one bucket shared by the node's workers).
    submit_rate: float = Field(default=100.0, gt=0, le=1_000_000)
    submit_burst: int = Field(default=200, ge=1, le=1_000_000)

    def local_url(self) -> str | None:
        """Where a process on this host reaches the API (a step's ``JOBSERVER_URL``);
        None on a Unix socket, which the CLI's client does not speak."""
        if self.bind.startswith("unix:"):
            return None
        host, port = self.bind.rsplit(":", 1)
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"

    @field_validator("tokens")
    @classmethod
    def _strong_tokens(cls, tokens: list[str]) -> list[str]:
        """Each token one a request can carry and the API can match: a header's value
        loses its outer spaces, and holds only printable ASCII (``token_problem`` of
        :mod:`jobserver.client` says the same). Messages name a token by its place,
        never by its text."""
        for place, token in enumerate(tokens, 1):
            if not token.strip():
                raise ValueError(f"token #{place} is empty or only spaces")
            if token != token.strip():
                raise ValueError(f"token #{place} starts or ends with a space, which a "
                                 "request's Authorization header cannot carry")
            if not _TOKEN_TEXT.match(token):
                raise ValueError(f"token #{place} holds a space, a control character or "
                                 "a character beyond ASCII; a bearer token is printable "
                                 "ASCII without spaces")
            if len(token) < 16:
                raise ValueError("each token must be at least 16 characters")
        return tokens


class SecureCookies(str, enum.Enum):
    """When the dashboard's cookies carry ``Secure`` (``ui.secure_cookies``)."""

    AUTO = "auto"  # when the request came over https, as gunicorn sees it
    ALWAYS = "always"  # behind a TLS proxy gunicorn does not trust
    NEVER = "never"  # plain http only


class UiConfig(_Section):
    """The web dashboard at ``/ui`` (``jobserver.ui``)."""

    # How long a sign-in lasts at most; it ends earlier with its token (revoked,
    # expired, or a config token taken out of ``api.tokens``) or by signing out.
    session_lifetime: float = Field(default=12 * 3600.0, ge=60, le=30 * 86400)
    # How often a page's live parts ask for fresh data (seconds).
    refresh_interval: float = Field(default=2.0, ge=0.5, le=300)
    # The session cookies' Secure flag: "auto" when the request came over https (as
    # gunicorn sees it: X-Forwarded-Proto counts from forwarded_allow_ips only),
    # "always" behind a TLS proxy gunicorn does not trust, "never" for plain http.
    secure_cookies: SecureCookies = SecureCookies.AUTO


class ShellStepConfig(_Section):
    allowed_executables: list[str] | None = None
    env_passthrough: list[str] = Field(default_factory=lambda: ["PATH", "HOME", "LANG", "TZ"])
    # Names a step's own ``env`` may not set, beside the built-in ones (the loader's,
    # shells' and interpreters' start-up variables, PATH, JOBSERVER_*: jobserver.step_env);
    # ``PREFIX*`` refuses every name starting with PREFIX.
    denied_env: list[Annotated[str, StringConstraints(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}\*?$")]] = Field(default_factory=list,
                                                              max_length=1000)
    output_limit_bytes: int = Field(default=64 * 1024, ge=1024, le=16 << 20)
    kill_grace: float = Field(default=0.5, ge=0, le=60)


class StepsConfig(_Section):
    shell: ShellStepConfig = Field(default_factory=ShellStepConfig)
    #: How much of each step attempt's output the store keeps as its full log; more is
    #: dropped, and a line at the end says how much (jobserver.steps.log).
    log_limit_bytes: int = Field(default=10 << 20, ge=1024, le=1 << 30)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw]?)$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_seconds(value: Any) -> Any:
    """A duration in seconds from a number or a text such as ``3600``, ``90m``,
    ``12h``, ``30d`` or ``4w``; ``off`` is 0. Anything else is left for the field's
    own validation to refuse."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text == "off":
        return 0
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{value!r} is not a duration such as 3600, 90m, 12h, 30d, 4w "
                         "or off")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


#: The shortest retention of finished jobs: a job is kept at least this long.
MIN_RETENTION = 60.0


class RetentionConfig(_Section):
    """Retention of finished jobs (jobserver.retention), by the node holding the planner
    seat."""

    # SUCCEED and DISCARDED jobs finished longer ago than this are deleted with their
    # steps and events, unless something still refers to them (see docs/configuration.md,
    # Retention). A duration ("30d", "12h", seconds); 0 or "off" keeps every job.
    finished_jobs: float = Field(default=30 * 86400.0, ge=0, le=100 * 365 * 86400)
    # Rows of the change history (GET /api/v1/changes: who changed a definition, added
    # partitions, materialized, ran a batch) older than this are deleted; an audit
    # trail is kept longer than jobs. A duration; 0 or "off" keeps every row.
    changes: float = Field(default=365 * 86400.0, ge=0, le=100 * 365 * 86400)
    # Seconds between looks for jobs to delete, once none is left.
    interval: float = Field(default=60.0, gt=0, le=86400)
    # Jobs deleted per transaction: each one holds SQLite's write lock, or the rows
    # of those jobs on PostgreSQL, for its length.
    batch_size: int = Field(default=500, ge=1, le=10_000)
    # Seconds at least between two delete transactions of the loop, so that claims
    # and completions get the database (SQLite: the write lock) in between; the loop
    # also waits at least three times as long as the last one took.
    pause: float = Field(default=0.1, ge=0, le=60)

    @field_validator("finished_jobs", "changes", "interval", "pause", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> Any:
        return duration_seconds(value)

    @field_validator("finished_jobs", "changes")
    @classmethod
    def _not_too_short(cls, value: float) -> float:
        if 0 < value < MIN_RETENTION:
            raise ValueError(f"keep them at least {MIN_RETENTION:.0f} s, or 0 (off)")
        return value
