"""Planner parameters are data, never code: the one rule every planner's template obeys.

A planner launches a job from a template and values it did not write: a view
partition's parameter values (from a request's pattern), a batch's business date,
system and context columns, a schedule's fire time. Such a value reaches a step only
as data:

* every top-level scalar of a job's ``params`` is bound by name in sql statements
  (``:business_date``), is ``ctx.params`` of python steps, and is the environment
  variable ``JOBSERVER_PARAM_<NAME>`` of shell steps (:func:`step_environment`);
* a ``${name}`` placeholder in a template may stand only where a value is data
  (:func:`placeholder_problems`): the job's name and ``lock_key``, any value inside
  ``params``, a shell step's ``env`` values, a python step's ``args``, a sql step's
  ``params``, and an ``argv`` element that no interpreter reads as code. It never
  stands in a sql statement (bind ``:name`` instead), in ``argv[0]``, in the element
  after an inline-code flag (``-c``, ``-e``, ...), nor anywhere in the argv of a
  shell, a script interpreter or a command runner (:data:`CODE_RUNNERS`): those read
  their arguments as code, so the step reads ``$JOBSERVER_PARAM_<NAME>`` instead.

Templates are checked when they are saved, so a job is never rendered from one that
breaks the rule; values are checked against their declared type by the planner before
anything is planned (a view's string value matches :data:`SAFE_VALUE`). The two
together make a value harmless even where a template author slipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

#: Shell steps see each top-level scalar param as ``JOBSERVER_PARAM_<NAME>``.
PARAM_ENV_PREFIX = "JOBSERVER_PARAM_"
#: Which param names become environment variables (others stay in ``ctx.params``).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: What a planner's string value is by default: letters, digits, ``_``, ``.`` and
#: ``-``, not starting with ``-`` or ``.`` (no option, no hidden or parent path), and
#: without ``..`` anywhere.
SAFE_VALUE = re.compile(r"^(?!.*\.\.)[A-Za-z0-9_][A-Za-z0-9_.-]*$")

_PLACEHOLDER = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: Flags after which the next argument is program text, for any executable.
INLINE_CODE_FLAGS = frozenset({"-c", "-e", "-E", "-r", "-x", "--command", "--eval",
                               "--exec", "-exec", "-execdir", "-ok", "--expression",
                               "--init-command", "--run"})
#: Executables that read their arguments as code or run them as commands: a
#: placeholder stands nowhere in their argv (matched on the basename; ``python3.11``
#: is ``python``).
CODE_RUNNERS = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox",
    "env", "xargs", "nohup", "timeout", "nice", "ionice", "chroot", "sudo", "su", "doas",
    "runuser", "setsid", "setpriv", "stdbuf", "time", "watch", "flock", "ssh", "eval",
    "exec", "awk", "gawk", "mawk", "nawk", "sed", "perl", "ruby", "python", "pypy",
    "node", "nodejs", "deno", "php", "lua", "tclsh", "wish", "rscript", "r", "julia",
    "osascript", "pwsh", "powershell", "cmd", "jq", "make", "gdb", "vim", "vi", "ex",
    "emacs", "expect", "psql", "mysql", "sqlite3", "duckdb", "find", "parallel", "m4",
})
_VERSION_SUFFIX = re.compile(r"[0-9][0-9.]*$")


def placeholders(text: str) -> list[str]:
    """The names ``text`` refers to as ``${name}``; escaped ones (``$${x}``) left out."""
    return [match.group(2) for match in _PLACEHOLDER.finditer(text) if not match.group(1)]


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every ``${name}`` replaced by ``values[name]`` and ``$${name}``
    by a literal ``${name}``; any other ``$`` is left alone."""
    if "$" not in text:
        return text
    return _PLACEHOLDER.sub(
        lambda m: "${" + m.group(2) + "}" if m.group(1) else values[m.group(2)], text)


def fill(value: Any, values: Mapping[str, str]) -> Any:
    """Every string inside ``value`` (lists and dict values, not dict keys)
    substituted. Only for a template :func:`placeholder_problems` accepted."""
    if isinstance(value, str):
        return substitute(value, values)
    if isinstance(value, list):
        return [fill(item, values) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, values) for key, item in value.items()}
    return value


def strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside ``value`` with its field path (``steps[0].argv[1]``)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(item, f"{path}.{key}" if path else str(key))


def runs_code(executable: str) -> bool:
    """Whether ``executable`` (an argv[0]) reads its arguments as code or commands."""
    name = executable.rsplit("/", 1)[-1].lower()
    return name in CODE_RUNNERS or _VERSION_SUFFIX.sub("", name) in CODE_RUNNERS


def _argv_problem(argv: list[Any], index: int) -> str | None:
    if index == 0:
        return "the executable itself"
    if runs_code(str(argv[0])):
        return f"an argument of {argv[0]}, which reads its arguments as code or commands"
    if str(argv[index - 1]) in INLINE_CODE_FLAGS:
        return f"the program text after {argv[index - 1]}"
    return None


def _step_problem(step: Mapping[str, Any], rest: str) -> str | None:
    """Why a placeholder may not stand at ``rest`` (the path inside a step), or None."""
    kind = step.get("type")
    field, _, _ = rest.partition("[")
    field = field.partition(".")[0]
    if kind == "shell" and field == "argv":
        index = int(rest[len("argv["):].split("]", 1)[0])
        return _argv_problem(list(step.get("argv") or []), index)
    if (kind, field) in {("shell", "env"), ("python", "args"), ("sql", "params")}:
        return None
    if kind == "sql" and field == "statements":
        return "sql text; bind the value by name instead (:name), as params are"
    return f"{field}, which is not data"


_STEP_PATH = re.compile(r"^steps\[(\d+)\]\.(.+)$")


def where_not_data(job: Mapping[str, Any], path: str) -> str | None:
    """Why a placeholder at ``path`` of the job ``job`` (its JSON) would not be data,
    or None where it may stand."""
    if path in ("name", "lock_key") or path.startswith("params.") or path == "params":
        return None
    match = _STEP_PATH.match(path)
    if match is None:
        return f"{path.split('.')[0].split('[')[0]}, which is not data"
    steps = job.get("steps") or []
    return _step_problem(steps[int(match.group(1))], match.group(2))


def placeholder_problems(job: Mapping[str, Any], known: set[str],
                         prefix: str) -> list[dict[str, str]]:
    """A problem per ``${name}`` in the job template ``job`` (its JSON) that names no
    parameter in ``known`` or stands where a value would not be data. Field paths
    start with ``prefix`` (``transformation.job``)."""
    problems: list[dict[str, str]] = []
    for path, text in strings(dict(job), ""):
        for name in placeholders(text):
            field = f"{prefix}.{path}"
            if name not in known:
                problems.append({"field": field, "message": f"${{{name}}} names no parameter; "
                                 f"expected one of: {', '.join(sorted(known)) or 'none'}"})
                continue
            why = where_not_data(job, path)
            if why is not None:
                problems.append({"field": field, "message": (
                    f"${{{name}}} may not stand in {why}: a parameter is data; read it as "
                    f"${PARAM_ENV_PREFIX}{name.upper()} in the step (or :{name} in sql)")})
    return problems


def env_name(name: str) -> str | None:
    """The environment variable a param named ``name`` becomes, or None."""
    return PARAM_ENV_PREFIX + name.upper() if _ENV_NAME.match(name) else None


def _env_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and "\x00" not in value:
        return value
    return None  # objects, lists and null stay in ctx.params only


def step_environment(params: Mapping[str, Any]) -> dict[str, str]:
    """The ``JOBSERVER_PARAM_<NAME>`` variables of a job's top-level scalar params."""
    found: dict[str, str] = {}
    for name, value in params.items():
        variable, text = env_name(name), _env_text(value)
        if variable is not None and text is not None:
            found[variable] = text
    return found
