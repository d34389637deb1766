"""Schedoscope's change detection: structure and transformation version checksums.

* The **structure checksum** (Schedoscope's DDL checksum) is the SHA-256 of the canonical
  JSON of the declared fields, in order: a field added, removed, renamed, retyped or
  moved changes it; a description does not.
* The **version checksum** is the SHA-256 of the view's ``version`` when it defines one
  (``defineVersion``: then only a new version string re-transforms). Otherwise it is the
  SHA-256 of the normalized transformation: ``noop``, or the canonical JSON (sorted keys,
  no spaces) of the job template where

  - SQL text (an argument other than a shell's script, or a python step's string
    argument, that starts with an SQL keyword or comment) is compared with comments
    (``--`` to the end of the line, ``/* … */``) and whitespace ignored, quoted
    literals kept as written;
  - the script of ``sh -c`` / ``bash -c`` / ``dash -c`` (the first operand after the
    options) is shell text, compared with its comments dropped: each unquoted ``#``
    at the start of a word to the end of its line, as the shell reads it
    (:mod:`jobserver.views.shell_text`: a quoted ``#``, ``$#``, ``${#x}`` or a
    here-document's line is no comment, and a script the reader cannot follow keeps
    them all); then its whitespace as any shell argument's;
  - every shell argument is compared with runs of whitespace made one space and the
    ends trimmed;
  - what only says *when* or *where* a job runs — the job's name, priority,
    lock_key, assigned_servers, parallelism, not_before; a step's retries,
    retry_backoff, retryable, timeout — is left out, so tuning it does not re-run history;
  - fields left at their default are left out, so a field the job spec gains in a later
    release does not change every stored checksum.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from jobserver.views.shell_text import script_index, strip_comments

if TYPE_CHECKING:
    from jobserver.views.spec import ViewSpec

_JOB_SCHEDULING = ("name", "priority", "lock_key", "assigned_servers", "parallelism",
                   "not_before")
_STEP_SCHEDULING = ("retries", "retry_backoff", "retryable", "timeout")
_SQL_START = re.compile(
    r"\s*(--|/\*|(select|insert|with|create|update|delete|merge|drop|alter|truncate|"
    r"set|use|copy|grant|explain|values|replace|upsert)\b)", re.IGNORECASE)
# One token of SQL text: a quoted literal or identifier (kept), a comment (dropped),
# a run of whitespace (one space), or any other character.
_SQL_TOKEN = re.compile(r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`[^`]*`?"""  # quoted
                        r"""|--[^\n]*|/\*.*?(?:\*/|\Z)"""                   # comments
                        r"""|\s+|[^'"`\s/-]+|.""", re.DOTALL)
_SPACE = re.compile(r"\s+")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, non-ASCII as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def structure_checksum(spec: ViewSpec) -> str:
    """SHA-256 of the canonical JSON of the declared fields (names and types, in order)."""
    return sha256(canonical_json([[field.name, field.type] for field in spec.structure.fields]))


def version_checksum(spec: ViewSpec) -> str:
    """SHA-256 of ``version`` when given, else of the normalized transformation."""
    if spec.version is not None:
        return sha256(spec.version)
    return sha256(normalized_transformation(spec))


def normalized_transformation(spec: ViewSpec) -> str:
    """The text the version checksum is taken of (shown to explain a checksum change)."""
    if spec.job is None:
        return canonical_json("noop")
    body = spec.job.model_dump(mode="json", exclude_defaults=True)
    for key in _JOB_SCHEDULING:
        body.pop(key, None)
    body["steps"] = [_normalized_step(step) for step in body.get("steps", [])]
    return canonical_json(body)


def _normalized_step(step: dict[str, Any]) -> dict[str, Any]:
    step = {key: value for key, value in step.items() if key not in _STEP_SCHEDULING}
    if "argv" in step:
        step["argv"] = normalized_argv(step["argv"])
    if "args" in step:
        step["args"] = _normalized_strings(step["args"])
    return step


def normalized_argv(argv: list[str]) -> list[str]:
    """A shell step's argv as compared: a shell's ``-c`` script without its comments,
    SQL text without its own, every argument's whitespace made single spaces."""
    script = script_index(argv)
    bash = script is not None and argv[0].rsplit("/", 1)[-1] == "bash"
    return [normalize_space(strip_comments(arg, bash)) if index == script
            else normalize_sql(arg) if is_sql(arg) else normalize_space(arg)
            for index, arg in enumerate(argv)]


def _normalized_strings(value: Any) -> Any:
    if isinstance(value, str):
        return normalize_sql(value) if is_sql(value) else value
    if isinstance(value, list):
        return [_normalized_strings(item) for item in value]
    if isinstance(value, dict):
        return {key: _normalized_strings(item) for key, item in value.items()}
    return value


def is_sql(text: str) -> bool:
    """Whether ``text`` reads as SQL: it starts (after whitespace) with a comment or an
    SQL statement keyword and holds more than one word. A lone ``--flag`` is not."""
    return bool(_SQL_START.match(text)) and bool(_SPACE.search(text.strip()))


def normalize_space(text: str) -> str:
    """Runs of whitespace made one space; the ends trimmed."""
    return _SPACE.sub(" ", text).strip()


def normalize_sql(text: str) -> str:
    """SQL text with comments dropped and whitespace runs made one space (none at
    the ends); quoted literals and identifiers are kept exactly."""
    parts: list[str] = []
    for token in _SQL_TOKEN.findall(text):
        if token.startswith("--") or token.startswith("/*"):
            token = " "
        if token.isspace():
            if parts and parts[-1] != " ":
                parts.append(" ")
            continue
        parts.append(token)
    return "".join(parts).strip()
