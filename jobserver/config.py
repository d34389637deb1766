"""Configuration: one TOML file plus ``JOBSERVER_SECTION__KEY`` environment overrides.

Everything is typed and validated once at start-up. An unknown key or a bad value
raises :class:`ConfigError` naming the key (and the environment variable it came
from), so a node never starts half-configured.
"""

from __future__ import annotations

import enum
import json
import os
import re
import socket
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (BaseModel, ConfigDict, Field, SecretStr, ValidationError,
                      StringConstraints, ValidationInfo, field_validator,
                      model_validator)

from jobserver.exceptions import ConfigError

ENV_PREFIX = "JOBSERVER_"
CONFIG_ENV = "JOBSERVER_CONFIG"


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


#: ``${NAME}`` in a connection URL: replaced by the environment variable NAME at load.
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: The names of ``connections.<name>`` (and of a sql step's ``connection``).
CONNECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
#: A schema name under ``connections.<name>.attach`` (quoted into ATTACH ... AS "name").
ATTACH_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class ConnectionConfig(_Section):
    """A database that sql steps and watermark queries use by name.

    ``url`` is a SQLAlchemy URL. Each ``${NAME}`` in it is replaced, when the config is
    loaded, by the environment variable NAME (a missing one stops start-up), so that
    a password need not be written in the config file; the value is inserted as it is
    (percent-encode ``@``, ``:`` or ``/`` in a password). The expanded URL is a secret:
    it is never logged or shown with its password.
    """

    url: SecretStr
    # Connections of this node's engine for this database: held open (pool_size) and
    # opened beyond that while busy (max_overflow).
    pool_size: int = Field(default=2, ge=1, le=20)
    max_overflow: int = Field(default=2, ge=0, le=50)
    # SQLite only: other database files attached to every connection, schema name ->
    # path, so one statement can read a source file and write the warehouse
    # (``INSERT INTO stg SELECT ... FROM src.orders``). A statement cannot ATTACH for
    # itself: SQLite refuses it inside a transaction, and a pooled connection would
    # keep it.
    attach: dict[Annotated[str, StringConstraints(pattern=ATTACH_NAME)],
                 Annotated[str, StringConstraints(min_length=1, max_length=4096)]] = \
        Field(default_factory=dict, max_length=8)

    @field_validator("url", mode="before")
    @classmethod
    def _expand(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str):
            return value
        environ = (info.context or {}).get("environ", os.environ)
        missing = [name for name in _ENV_REFERENCE.findall(value) if name not in environ]
        if missing:
            raise ValueError(f"environment variable {missing[0]} (named in the URL as "
                             f"${{{missing[0]}}}) is not set")
        expanded = _ENV_REFERENCE.sub(lambda match: environ[match.group(1)], value)
        _check_url(expanded)
        return expanded

    @model_validator(mode="after")
    def _attach_on_sqlite(self) -> ConnectionConfig:
        from sqlalchemy.engine import make_url

        if self.attach and make_url(self.url.get_secret_value()).get_backend_name() != "sqlite":
            raise ValueError("attach is for SQLite connections only")
        reserved = [name for name in self.attach if name.lower() in ("main", "temp")]
        if reserved:
            raise ValueError(f"attach: {reserved[0]!r} is SQLite's own schema name")
        return self


def _check_url(url: str) -> None:
    """A URL SQLAlchemy parses, of a dialect whose driver is installed. The messages
    never quote the URL: it may hold a password."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError("not a SQLAlchemy URL such as "
                         "postgresql://user:${PASSWORD}@host/db or sqlite:////path/db") \
            from None
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        raise ValueError(f"no driver for {parsed.drivername!r}: {exc}") from None


class SchedulesConfig(_Section):
    """The schedule evaluator (jobserver.schedules.evaluator)."""

    enabled: bool = True
    # The longest the evaluator sleeps without looking for schedules changed by
    # another node's API or for new job events; it wakes earlier for fire times.
    poll_interval: float = Field(default=1.0, gt=0, le=60)
    # Schedules (and schedule-jobs) handled per transaction.
    batch: int = Field(default=500, ge=1, le=10000)
    # How long evaluation records are kept.
    evaluation_retention: float = Field(default=7 * 86400, ge=60, le=365 * 86400)
    # How long before its fire time a firing that depends on the clock alone (time
    # triggers only, no run constraints) is launched, as a job that may not start
    # before the fire time: the job is in the store when its time comes, however many
    # schedules fire at once (the evaluator starts earlier, up to 60 s, when firing
    # takes longer than half of this). 0 launches every firing when it is due.
    lead_time: float = Field(default=10.0, ge=0, le=300)


class ViewsConfig(_Section):
    """Views (jobserver.views): the tracker of view jobs and the view listeners."""

    enabled: bool = True
    # How many times a failed transformation is submitted again (RETRYING) before the
    # view partition is FAILED (Schedoscope's schedoscope.action.retry).
    retries: int = Field(default=2, ge=0, le=100)
    # The longest the tracker sleeps between looks at view jobs' events.
    poll_interval: float = Field(default=1.0, gt=0, le=60)
    # View scheduling listeners, "module:Class" (on_event(ViewSchedulingEvent)).
    listeners: list[str] = Field(default_factory=list)
    # Restarts of a failing listener before it is disabled (-1: no limit).
    listener_max_retries: int = Field(default=-1, ge=-1)
    # Where a noop view's relative `location` lies (its _SUCCESS flags); None:
    # <data_dir>/views. An absolute location is read as written.
    data_root: Path | None = None
    # View partitions one request (views query, materialize, invalidate) may expand,
    # its dependencies included, counted before they are built (jobserver.views.limits).
    max_partitions: int = Field(default=100_000, ge=1, le=10_000_000)


class DatasetsConfig(_Section):
    """Datasets (jobserver.datasets)."""

    # Consumers a dataset may have; a request adding one more is a 409 naming it.
    max_consumers: int = Field(default=20, ge=1, le=10_000)


class BatchesConfig(_Section):
    """Batches (jobserver.batches)."""

    # The one directory file watermarks ({file: PATH}) are read under: a relative
    # PATH is taken from it, and a PATH that resolves outside it (through '..' or a
    # symlink) is refused when saved and when read. None: <data_dir>/watermarks.
    watermark_dir: Path | None = None


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


class Config(_Section):
    data_dir: Path = Path(".jobserver")
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    lock: LockConfig = Field(default_factory=LockConfig)
    zookeeper: ZooKeeperConfig = Field(default_factory=ZooKeeperConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    ui: UiConfig = Field(default_factory=UiConfig)
    steps: StepsConfig = Field(default_factory=StepsConfig)
    schedules: SchedulesConfig = Field(default_factory=SchedulesConfig)
    connections: dict[Annotated[str, StringConstraints(pattern=CONNECTION_NAME)],
                      ConnectionConfig] = Field(default_factory=dict, max_length=100)
    views: ViewsConfig = Field(default_factory=ViewsConfig)
    datasets: DatasetsConfig = Field(default_factory=DatasetsConfig)
    batches: BatchesConfig = Field(default_factory=BatchesConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)

    @property
    def views_root(self) -> Path:
        """The directory relative view locations are read under."""
        return self.views.data_root or self.data_dir / "views"

    @property
    def watermark_root(self) -> Path:
        """The directory file watermarks are read under (``batches.watermark_dir``)."""
        return self.batches.watermark_dir or self.data_dir / "watermarks"

    @property
    def database_url(self) -> str:
        """The configured URL, or a SQLite file under ``data_dir`` (the embedded default)."""
        if self.database.url:
            return self.database.url
        return f"sqlite:///{(self.data_dir / 'jobserver.db').resolve()}"

    @property
    def capacity(self) -> int:
        return self.server.capacity or self.scheduler.max_concurrent_jobs


def load_config(path: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> Config:
    """Read the TOML file (if any), apply environment overrides, validate.

    ``path`` defaults to ``$JOBSERVER_CONFIG``. ``overrides`` are dotted keys applied
    last (used by the CLI for flags such as ``--nodes``).
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV) or None
    data: dict[str, Any] = _read_file(Path(path)) if path else {}
    sources: dict[tuple[str, ...], str] = {}
    for keys, value, env_name in _env_overrides(environ):
        _set_dotted(data, keys, value, env_name)
        sources[keys] = env_name
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, tuple(dotted.split(".")), value)
    try:
        return Config.model_validate(data, context={"environ": environ})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources)) from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _env_overrides(environ: Mapping[str, str]) -> Iterator[tuple[tuple[str, ...], Any, str]]:
    """Yield ``(keys, value, env_name)`` for every ``JOBSERVER_A__B`` variable, and for
    ``JOBSERVER_<TOP_LEVEL_KEY>`` (``JOBSERVER_DATA_DIR``, as :func:`env_name` spells it).
    Other ``JOBSERVER_*`` variables (``JOBSERVER_CONFIG``, ``JOBSERVER_URL``, a step's
    ``JOBSERVER_JOB_ID``) are not config keys and are ignored."""
    top_level = {key for key, field in Config.model_fields.items()
                 if not (isinstance(field.annotation, type)
                         and issubclass(field.annotation, BaseModel))}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        if "__" not in name:
            key = name[len(ENV_PREFIX):].lower()
            if key in top_level:
                yield (key,), _parse_env_value((key,), raw), name
            continue
        keys = tuple(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
        if any(not key for key in keys):
            raise ConfigError(f"environment variable {name} does not name a config key")
        yield keys, _parse_env_value(keys, raw), name


def _parse_env_value(keys: tuple[str, ...], raw: str) -> Any:
    stripped = raw.strip()
    if stripped.startswith("["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return raw
    if _is_list_field(keys):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


def _is_list_field(keys: tuple[str, ...]) -> bool:
    model: Any = Config
    for key in keys:
        field = getattr(model, "model_fields", {}).get(key)
        if field is None:
            return False
        model = field.annotation
    return "list[" in str(model)


def _set_dotted(data: dict[str, Any], keys: tuple[str, ...], value: Any,
                origin: str | None = None) -> None:
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            where = f" (from {origin})" if origin else ""
            raise ConfigError(f"{'.'.join(keys)}{where}: {key} is not a section")
        node = child
    node[keys[-1]] = value


def _describe(exc: ValidationError, sources: dict[tuple[str, ...], str]) -> str:
    lines = []
    for error in exc.errors():
        keys = tuple(str(part) for part in error["loc"])
        dotted = ".".join(keys)
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        # The variable that set this key, a key under it, or (for an unknown section
        # such as JOBSERVER_NOPE__X) a key beneath the one named.
        origin = next((env for k, env in sources.items()
                       if keys[: len(k)] == k or k[: len(keys)] == keys), None)
        where = f" (from {origin})" if origin else ""
        lines.append(f"{dotted}{where}: {message}")
    return "invalid configuration: " + "; ".join(lines)


def env_name(dotted_key: str) -> str:
    """The environment variable that overrides ``dotted_key``."""
    return ENV_PREFIX + dotted_key.upper().replace(".", "__")
