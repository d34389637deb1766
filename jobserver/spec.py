"""Job specifications as submitted: parsed strictly, checked against the node's policy.

Parsing (types, unknown fields, sizes) is pydantic's; :func:`validate_job` then checks
what needs the whole job or the configuration: unique step names, a DAG without cycles,
registered python callables, allowed shell executables and the variables a shell
step's ``env`` may set (:mod:`jobserver.step_env`), an sql step's connection and
its statements' parameters (``:d::date`` is not one). Every failure names the field,
e.g. ``steps[1].argv[0]``, ``steps[0].env.LD_PRELOAD`` or ``steps[2].statements[0]``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, timezone
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import (AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field,
                      StringConstraints, ValidationError)

from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.step_env import env_rule
from jobserver.steps.sql import cast_problem

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
ServerId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:@-]{0,99}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")]
# PostgreSQL text cannot hold NUL; refuse it here rather than fail on insert. A step's
# spec (argv, env, python args) reaches its row through a conversion to text.
Arg = Annotated[str, StringConstraints(max_length=8192, pattern=r"^[^\x00]*$")]
Text = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]


def _to_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("out of range once converted to UTC") from None


MAX_STEPS = 200
#: Free-form JSON (a job's ``params``, a python step's ``args``) is capped by its
#: serialized size: it is stored on every job row and handed to every step.
MAX_JSON_BYTES = 64 * 1024


def _capped_json(value: dict[str, Any]) -> dict[str, Any]:
    try:
        # NaN and Infinity parse (Python's JSON dialect) but are not JSON: PostgreSQL
        # refuses them and clients could not read them back.
        size = len(json.dumps(value, separators=(",", ":"), allow_nan=False).encode())
    except ValueError:
        raise ValueError("NaN and Infinity are not JSON numbers") from None
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{size} bytes of JSON; at most {MAX_JSON_BYTES} are allowed")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_capped_json)]


def _has_nul(value: Any) -> bool:
    """Whether any string of ``value`` (dict keys included) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(key) or _has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def _text_json(value: dict[str, Any]) -> dict[str, Any]:
    if _has_nul(value):
        raise ValueError("a NUL character (\\u0000) cannot be stored")
    return value


#: Free-form JSON stored in a step's spec, which PostgreSQL converts to text.
StepJson = Annotated[JsonObject, AfterValidator(_text_json)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _StepBase(StrictModel):
    name: Name
    depends_on: list[Name] | None = Field(default=None, max_length=MAX_STEPS)
    retries: int = Field(default=0, ge=0, le=20)
    retry_backoff: float = Field(default=1.0, ge=0, le=3600)
    retryable: bool = Field(default=True, description=(
        "False: if the node running this step dies, the job goes to ERROR instead of "
        "being re-queued"))


class NoopStep(_StepBase):
    type: Literal["noop"]


class SleepStep(_StepBase):
    type: Literal["sleep"]
    seconds: float = Field(ge=0, le=86400)


class ShellStep(_StepBase):
    type: Literal["shell"]
    argv: list[Arg] = Field(min_length=1, max_length=256)
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400)
    env: dict[EnvName, Arg] = Field(
        default_factory=dict, max_length=64, json_schema_extra={"additionalProperties": False},
        description=("variables added to the step's environment; the loader's, shells' and "
                     "interpreters' start-up variables, PATH, JOBSERVER_* and the names in "
                     "steps.shell.denied_env are refused (jobserver.step_env)"))


class PythonStep(_StepBase):
    type: Literal["python"]
    callable: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,200}$")]
    args: StepJson = Field(default_factory=dict)


MAX_SQL_STATEMENTS = 50
MAX_SQL_CHARS = 64 * 1024


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("a statement cannot be blank")
    return value


#: One SQL text: parameters are named in it (``:business_date``), never formatted in.
SqlText = Annotated[str, StringConstraints(max_length=MAX_SQL_CHARS, pattern=r"^[^\x00]*$"),
                    AfterValidator(_not_blank)]


class SqlStep(_StepBase):
    """Statements run in one transaction on a named connection (``connections.<name>``),
    with the job's params and the step's own (the step's win) bound by name."""

    type: Literal["sql"]
    connection: Name
    statements: list[SqlText] = Field(min_length=1, max_length=MAX_SQL_STATEMENTS)
    params: StepJson = Field(default_factory=dict)
    timeout: float = Field(default=300.0, gt=0, le=86400)


StepSpec = Annotated[Union[NoopStep, SleepStep, ShellStep, PythonStep, SqlStep],
                     Field(discriminator="type")]
STEP_TYPES = ("noop", "sleep", "shell", "python", "sql")


#: A dataset an input names: ``name`` (namespace ``default``) or ``namespace/name``.
DatasetRef = Annotated[str, StringConstraints(
    pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
MAX_INPUTS = 8


class InputSpec(StrictModel):
    """A dataset the job consumes through one of its consumers: when the job starts
    it takes up to ``limit`` partitions (at most the consumer's ``processing_limit``;
    None: that limit) from the consumer's working set. ``on_empty``: with nothing to
    consume, ``succeed`` ends the job SUCCEED at once with no step run; ``skip`` skips
    this start: the job waits ``wait_seconds`` (READY) and tries again."""

    dataset: DatasetRef
    consumer: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    limit: int | None = Field(default=None, ge=1, le=100_000)
    on_empty: Literal["succeed", "skip"] = "succeed"
    wait_seconds: float = Field(default=30.0, ge=0.1, le=86400)


MAX_AFTER = 1000


class AfterSpec(StrictModel):
    """An upstream job this job waits for. ``done``: until it is SUCCEED, ERROR (after
    its retries) or DISCARDED; ``succeeded``: until it is SUCCEED, and if it ends ERROR
    or DISCARDED instead, this job goes to ERROR naming it."""

    job: int = Field(ge=1, le=2**63 - 1)
    when: Literal["done", "succeeded"] = "done"


def _merged_after(value: list[AfterSpec]) -> list[AfterSpec]:
    """One entry per upstream, in first-named order: a job named twice waits for the
    stricter of the two (``succeeded`` over ``done``)."""
    merged: dict[int, AfterSpec] = {}
    for item in value:
        known = merged.get(item.job)
        if known is None or item.when == "succeeded":
            merged[item.job] = item  # a key keeps its first position in the dict
    return list(merged.values())


class JobSpec(StrictModel):
    name: Text
    steps: list[StepSpec] = Field(min_length=1, max_length=MAX_STEPS)
    priority: int = Field(default=0, ge=-1000, le=1000)
    lock_key: Text | None = None
    assigned_servers: list[ServerId] | None = Field(default=None, min_length=1, max_length=64)
    params: JsonObject = Field(default_factory=dict)
    parallelism: int = Field(default=1, ge=1, le=64)
    not_before: Annotated[AwareDatetime, AfterValidator(_to_utc)] | None = None
    inputs: list[InputSpec] = Field(default_factory=list, max_length=MAX_INPUTS)
    after: Annotated[list[AfterSpec], AfterValidator(_merged_after)] = Field(
        default_factory=list, max_length=MAX_AFTER, description=(
            "upstream jobs that must end first: the job stays READY, unclaimed, until "
            "each is final for its `when`"))


class Policy:
    """What the node allows: registered callables, permitted executables, the
    connections sql steps may name (None: not known here, so not checked) and the
    variables a shell step's ``env`` may set (the built-in refusals always apply,
    plus ``denied_env``, the operator's ``steps.shell.denied_env``)."""

    def __init__(self, is_registered: Callable[[str], bool],
                 allowed_executables: Iterable[str] | None,
                 connections: Iterable[str] | None = None,
                 denied_env: Iterable[str] = ()) -> None:
        self.is_registered = is_registered
        self.allowed_executables = (None if allowed_executables is None
                                    else frozenset(allowed_executables))
        self.connections = None if connections is None else frozenset(connections)
        self.env_rule = env_rule(tuple(denied_env))


def field_path(loc: Iterable[Any]) -> str:
    """``('steps', 1, 'shell', 'argv', 0)`` -> ``steps[1].argv[0]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in STEP_TYPES:
            continue  # pydantic's discriminator tag, not a field
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def parse_job(body: bytes | str) -> JobSpec:
    """Parse a JSON body into a :class:`JobSpec` or raise :class:`InvalidRequest`."""
    return parse_model(JobSpec, body, job_problem)


def job_problem(error: Mapping[str, Any]) -> dict[str, str]:
    """The detail of one of pydantic's errors in a job body (or a batch of them)."""
    if error["type"] == "union_tag_invalid":
        message = f"unknown step type; expected one of {', '.join(STEP_TYPES)}"
    else:
        message = validation_message(error)
    return {"field": field_path(error["loc"]), "message": message}


ModelT = TypeVar("ModelT", bound=BaseModel)
#: Turns one of pydantic's errors into a ``{"field", "message"}`` detail.
Problem = Callable[[Mapping[str, Any]], dict[str, str]]


def default_problem(error: Mapping[str, Any]) -> dict[str, str]:
    """The detail of one of pydantic's errors: its field path and a plain message."""
    return {"field": field_path(error["loc"]), "message": validation_message(error)}


def parse_model(model: type[ModelT], body: bytes | str | Mapping[str, Any],
                problem: Problem = default_problem) -> ModelT:
    """Parse a request body (JSON text, or a document already loaded from JSON or YAML)
    as ``model``: :class:`MalformedRequest` when it is not JSON, :class:`InvalidRequest`
    naming every bad field otherwise (the first in the message).

    Every resource (jobs, schedules, datasets, consumers, views) is parsed here, so that
    they all refuse alike. A loaded document goes through JSON too: the models are
    strict, and JSON is the one form whose types they all accept.
    """
    if not isinstance(body, (bytes, str)):
        body = json_text(body)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise MalformedRequest("request body is not valid JSON",
                                   [{"field": "body", "message": "malformed JSON"}]) from None
        refuse([problem(e) for e in exc.errors()])
        raise AssertionError("unreachable: refuse raised") from None


def json_text(document: Mapping[str, Any]) -> str:
    """A loaded document as JSON text; YAML's timestamps and dates become ISO strings,
    anything else that is not JSON is an :class:`InvalidRequest` on ``body``."""
    try:
        return json.dumps(document, default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"body: {exc}", [{"field": "body", "message": str(exc)}]) \
            from None


def _json_default(value: Any) -> Any:
    # YAML turns unquoted timestamps into datetime and date objects.
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def refuse(problems: list[dict[str, str]]) -> None:
    """Raise :class:`InvalidRequest` for ``problems`` (the first in the message)."""
    if problems:
        raise InvalidRequest(f"{problems[0]['field']}: {problems[0]['message']}", problems)


def validation_message(error: Mapping[str, Any]) -> str:
    """One of pydantic's errors in words a request's author reads."""
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "union_tag_invalid":
        return (f"unknown type {error['ctx']['tag']!r}; expected one of "
                f"{error['ctx']['expected_tags']}")
    if kind == "union_tag_not_found":
        return "missing field 'type'"
    message: str = error["msg"]
    return message.removeprefix("Value error, ")


def validate_job(spec: JobSpec, policy: Policy) -> list[list[str]]:
    """Check the job as a whole; return each step's resolved dependencies.

    Without any ``depends_on`` the steps form a chain in list order.
    """
    problems: list[dict[str, str]] = []
    names = [step.name for step in spec.steps]
    for index, step in enumerate(spec.steps):
        if step.name in names[:index]:
            problems.append({"field": f"steps[{index}].name",
                             "message": f"duplicate step name {step.name!r}"})
        problems.extend(_check_step(index, step, set(names), policy))
    if problems:
        raise InvalidRequest(f"{problems[0]['field']}: {problems[0]['message']}", problems)
    if all(step.depends_on is None for step in spec.steps):
        # A chain in list order: each step after the one before it, so no cycle.
        return [[]] + [[spec.steps[i - 1].name] for i in range(1, len(spec.steps))]
    dependencies = [list(dict.fromkeys(step.depends_on or [])) for step in spec.steps]
    cycle = find_cycle(names, dependencies)
    if cycle:
        raise InvalidRequest("steps: depends_on forms a cycle: " + " -> ".join(cycle),
                             [{"field": "steps", "message": "dependency cycle"}])
    return dependencies


def _check_step(index: int, step: Any, names: set[str], policy: Policy) -> list[dict[str, str]]:
    where = f"steps[{index}]"
    problems = []
    for dep_index, dep in enumerate(step.depends_on or []):
        if dep not in names or dep == step.name:
            problems.append({"field": f"{where}.depends_on[{dep_index}]",
                             "message": f"no other step named {dep!r}"})
    if isinstance(step, PythonStep) and not policy.is_registered(step.callable):
        problems.append({"field": f"{where}.callable",
                         "message": f"no python step is registered as {step.callable!r}"})
    if (isinstance(step, ShellStep) and policy.allowed_executables is not None
            and step.argv[0] not in policy.allowed_executables):
        problems.append({"field": f"{where}.argv[0]",
                         "message": f"executable {step.argv[0]!r} is not allowed "
                                    "(steps.shell.allowed_executables)"})
    if isinstance(step, ShellStep):
        problems.extend({"field": f"{where}.env.{name}", "message": reason}
                        for name, reason in policy.env_rule.refused(step.env).items())
    if (isinstance(step, SqlStep) and policy.connections is not None
            and step.connection not in policy.connections):
        problems.append({"field": f"{where}.connection",
                         "message": f"no connection named {step.connection!r} "
                                    "(connections.<name>.url in the config)"})
    if isinstance(step, SqlStep):
        problems.extend({"field": f"{where}.statements[{number}]", "message": cast[1]}
                        for number, statement in enumerate(step.statements)
                        if (cast := cast_problem(statement)) is not None)
    return problems


def find_cycle(names: list[str], dependencies: list[list[str]]) -> list[str] | None:
    """A dependency cycle among ``names`` (each depending on its entry of
    ``dependencies``) as a path of names, first = last; None without one. A dependency
    that is not among ``names`` is no cycle (callers refuse it on its own)."""
    graph = dict(zip(names, dependencies))
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> list[str] | None:
        if name in done or name not in graph:
            return None
        if name in visiting:
            return visiting[visiting.index(name):] + [name]
        visiting.append(name)
        for dep in graph[name]:
            cycle = visit(dep)
            if cycle:
                return cycle
        visiting.pop()
        done.add(name)
        return None

    for name in names:
        cycle = visit(name)
        if cycle:
            return cycle
    return None


def step_columns(step: Any) -> dict[str, Any]:
    """The type-specific fields of a step, as stored in ``steps.spec``."""
    return step.model_dump(mode="json", exclude=_common_step_fields())


@functools.cache
def _common_step_fields() -> frozenset[str]:
    """The fields every step type has (stored in their own ``steps`` columns): read
    once, as pydantic builds ``model_fields`` anew on each access."""
    return frozenset(_StepBase.model_fields) | {"type"}
