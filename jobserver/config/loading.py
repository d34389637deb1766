"""Reading a configuration: the TOML file, ``JOBSERVER_*`` environment overrides and
the messages that name a bad key and where it came from.

Each helper takes the root model (:class:`jobserver.config.Config`) as an argument,
so that this module need not import it.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from jobserver.exceptions import ConfigError

ENV_PREFIX = "JOBSERVER_"


def read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def env_overrides(root: type[BaseModel], environ: Mapping[str, str]
                  ) -> Iterator[tuple[tuple[str, ...], Any, str]]:
    """Yield ``(keys, value, env_name)`` for every ``JOBSERVER_A__B`` variable, and for
    ``JOBSERVER_<TOP_LEVEL_KEY>`` (``JOBSERVER_DATA_DIR``, as ``env_name`` spells it).
    Other ``JOBSERVER_*`` variables (``JOBSERVER_CONFIG``, ``JOBSERVER_URL``, a step's
    ``JOBSERVER_JOB_ID``) are not config keys and are ignored."""
    top_level = {key for key, field in root.model_fields.items()
                 if not (isinstance(field.annotation, type)
                         and issubclass(field.annotation, BaseModel))}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        if "__" not in name:
            key = name[len(ENV_PREFIX):].lower()
            if key in top_level:
                yield (key,), _parse_env_value(root, (key,), raw), name
            continue
        keys = tuple(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
        if any(not key for key in keys):
            raise ConfigError(f"environment variable {name} does not name a config key")
        yield keys, _parse_env_value(root, keys, raw), name


def _parse_env_value(root: type[BaseModel], keys: tuple[str, ...], raw: str) -> Any:
    stripped = raw.strip()
    if stripped.startswith("["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return raw
    if _is_list_field(root, keys):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


def _is_list_field(root: type[BaseModel], keys: tuple[str, ...]) -> bool:
    model: Any = root
    for key in keys:
        field = getattr(model, "model_fields", {}).get(key)
        if field is None:
            return False
        model = field.annotation
    return "list[" in str(model)


def set_dotted(data: dict[str, Any], keys: tuple[str, ...], value: Any,
               origin: str | None = None) -> None:
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            where = f" (from {origin})" if origin else ""
            raise ConfigError(f"{'.'.join(keys)}{where}: {key} is not a section")
        node = child
    node[keys[-1]] = value


def describe(exc: ValidationError, sources: dict[tuple[str, ...], str]) -> str:
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
