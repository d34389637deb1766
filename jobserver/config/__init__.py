"""Configuration: one TOML file plus ``JOBSERVER_SECTION__KEY`` environment overrides.

Everything is typed and validated once at start-up. An unknown key or a bad value
raises :class:`ConfigError` naming the key (and the environment variable it came
from), so a node never starts half-configured. The sections live beside this module:
the engine's in ``sections``, named databases in ``connections``, the built-in
planners' in ``planners``; reading the file and the environment in ``loading``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, ValidationError

from jobserver.config.connections import ATTACH_NAME, CONNECTION_NAME, ConnectionConfig
from jobserver.config.loading import ENV_PREFIX, describe, env_overrides, read_file, set_dotted
from jobserver.config.planners import (BatchesConfig, DatasetsConfig, SchedulesConfig,
                                       ViewsConfig)
from jobserver.config.sections import (BIND_PATTERN, DEFAULT_LISTENER, MIN_RETENTION,
                                       ApiConfig, DatabaseConfig, LockConfig,
                                       RetentionConfig, SchedulerConfig, SchedulerMode,
                                       SecureCookies, ServerConfig, ShellStepConfig,
                                       StepsConfig, UiConfig, ZooKeeperConfig, _Section,
                                       duration_seconds)
from jobserver.exceptions import ConfigError

__all__ = [
    "ATTACH_NAME", "BIND_PATTERN", "CONFIG_ENV", "CONNECTION_NAME", "DEFAULT_LISTENER",
    "ENV_PREFIX", "MIN_RETENTION", "ApiConfig", "BatchesConfig", "Config",
    "ConnectionConfig", "DatabaseConfig", "DatasetsConfig", "LockConfig",
    "RetentionConfig", "SchedulerConfig", "SchedulerMode", "SchedulesConfig",
    "SecureCookies", "ServerConfig", "ShellStepConfig", "StepsConfig", "UiConfig",
    "ViewsConfig", "ZooKeeperConfig", "duration_seconds", "env_name", "load_config",
]

CONFIG_ENV = "JOBSERVER_CONFIG"


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
    data: dict[str, Any] = read_file(Path(path)) if path else {}
    sources: dict[tuple[str, ...], str] = {}
    for keys, value, variable in env_overrides(Config, environ):
        set_dotted(data, keys, value, variable)
        sources[keys] = variable
    for dotted, value in (overrides or {}).items():
        set_dotted(data, tuple(dotted.split(".")), value)
    try:
        return Config.model_validate(data, context={"environ": environ})
    except ValidationError as exc:
        raise ConfigError(describe(exc, sources)) from None


def env_name(dotted_key: str) -> str:
    """The environment variable that overrides ``dotted_key``."""
    return ENV_PREFIX + dotted_key.upper().replace(".", "__")
