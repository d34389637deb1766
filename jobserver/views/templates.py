"""A view's job template and location made concrete for one view partition.

``${name}`` in any string of the job template (step argv, env values, python args,
params, the job's name) and of the location is replaced by the partition's value of
the view's parameter ``name`` (``null()`` becomes the empty string); ``$${name}`` is
written for a literal ``${name}``; any other ``$`` is left alone, so shell text such as
``$HOME`` passes through. A placeholder naming no parameter is refused when the view
is saved (:func:`placeholder_problems`), so rendering never meets one.

The rendered job is named ``view <address>`` and its params carry the partition:
``{"view": name, "partition": key, "parameters": {name: value}, "version_checksum":
…}`` on top of the template's own params, so that the tracker records the version the
job actually ran, whatever the definition says by the time it ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from jobserver.exceptions import InvalidRequest
from jobserver.spec import JobSpec, Policy, field_path, validate_job
from jobserver.views.model import ViewAddress

if TYPE_CHECKING:
    from jobserver.views.spec import ViewSpec

_PLACEHOLDER = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_JOB_NAME = 200


def placeholders(text: str) -> list[str]:
    """The parameter names ``text`` refers to, escaped ones (``$${x}``) left out."""
    return [match.group(2) for match in _PLACEHOLDER.finditer(text) if not match.group(1)]


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every ``${name}`` replaced by ``values[name]``."""
    if "$" not in text:
        return text
    return _PLACEHOLDER.sub(
        lambda m: "${" + m.group(2) + "}" if m.group(1) else values[m.group(2)], text)


def fill(value: Any, values: Mapping[str, str]) -> Any:
    """Every string inside ``value`` (lists and dict values, not dict keys) substituted."""
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


def placeholder_problems(spec: ViewSpec) -> list[dict[str, str]]:
    """A problem per ``${name}`` in the template or location naming no parameter."""
    known = {parameter.name for parameter in spec.parameters}
    found: list[tuple[str, str]] = []
    if spec.location is not None:
        found.append(("location", spec.location))
    if spec.job is not None:
        found.extend(strings(spec.job.model_dump(mode="json"), "transformation.job"))
    return [{"field": path, "message": f"${{{name}}} names no parameter of the view; "
                                       f"expected one of: {', '.join(sorted(known)) or 'none'}"}
            for path, text in found for name in placeholders(text) if name not in known]


def parameter_values(spec: ViewSpec, address: ViewAddress) -> dict[str, str]:
    """The partition's values by parameter name; ``null()`` as the empty string."""
    return {parameter.name: "" if value is None else value
            for parameter, value in zip(spec.parameters, address.values)}


def render_location(spec: ViewSpec, address: ViewAddress) -> str | None:
    """The partition's location (noop views: its ``_SUCCESS`` flag is under it)."""
    if spec.location is None:
        return None
    return substitute(spec.location, parameter_values(spec, address))


def job_name(address: ViewAddress) -> str:
    """``view app.eci.stage/Search/SHOP10/2015/05/03``, cut to what a job name holds."""
    name = f"view {address.path}"
    return name if len(name) <= MAX_JOB_NAME else name[:MAX_JOB_NAME - 1] + "…"


def render_job(spec: ViewSpec, address: ViewAddress, *,
               version_checksum: str | None = None) -> JobSpec:
    """The job transforming one partition of a view with a job transformation.

    ``version_checksum`` defaults to the view's current one (pass it when rendering
    many partitions: it is computed once per view). Raises :class:`InvalidRequest` when
    the substituted values make the job invalid (a value too long for a field).
    """
    from jobserver.views.checksums import version_checksum as current_checksum

    if spec.job is None:
        raise InvalidRequest(f"{spec.name}: a noop view has no job to render",
                             [{"field": "transformation", "message": "noop"}])
    values = parameter_values(spec, address)
    body = fill(spec.job.model_dump(), values)
    body["name"] = job_name(address)
    body["params"] = {**body.get("params", {}), "view": spec.name, "partition": address.key,
                      "parameters": values,
                      "version_checksum": version_checksum or current_checksum(spec)}
    try:
        return JobSpec.model_validate(body)
    except ValidationError as exc:
        details = [{"field": "transformation.job." + field_path(e["loc"]), "message": e["msg"]}
                   for e in exc.errors()]
        raise InvalidRequest(f"{address.path}: {details[0]['field']}: "
                             f"{details[0]['message']}", details) from None


def validate_template(spec: ViewSpec, policy: Policy) -> None:
    """Check a view's job template against the node's job policy (registered python
    callables, allowed executables, step names and DAG), as a submitted job is
    checked: a template the engine would refuse is refused when the view is saved,
    not at the first materialize. Field paths start ``transformation.job.``."""
    if spec.job is None:
        return
    try:
        validate_job(spec.job, policy)
    except InvalidRequest as exc:
        details = [{"field": f"transformation.job.{d['field']}", "message": d["message"]}
                   for d in exc.details or []]
        raise InvalidRequest(f"transformation.job.{exc.message}", details) from None
