"""A view's job template and location made concrete for one view partition.

A partition's parameter values are data (:mod:`jobserver.parameters`): the rendered
job's params carry each of them by name (bound as ``:shop`` in sql, ``ctx.params`` in
python, ``$JOBSERVER_PARAM_SHOP`` in shell steps), and a ``${name}`` placeholder may
stand only where a value is data (the job's name, params, env values, python args, an
argv element no interpreter reads as code), which is checked when the view is saved
(:func:`placeholder_problems`), so rendering never meets a placeholder elsewhere.
``null()`` becomes the empty string; ``$${name}`` is written for a literal
``${name}``; any other ``$`` is left alone, so shell text such as ``$HOME`` passes.

The rendered job is named ``view <address>`` and its params carry the partition:
``{<name>: value, ..., "view": name, "partition": key, "parameters": {name: value},
"version_checksum": …}`` on top of the template's own params, so that the tracker
records the version the job actually ran, whatever the definition says by the time it
ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from jobserver import parameters
from jobserver.exceptions import InvalidRequest
from jobserver.parameters import fill, placeholders, substitute
from jobserver.resources import check_template
from jobserver.spec import JobSpec, Policy, field_path
from jobserver.views.model import ViewAddress

if TYPE_CHECKING:
    from jobserver.views.spec import ViewSpec

MAX_JOB_NAME = 200
#: Params every rendered job carries; no view parameter may take one of these names.
RESERVED_PARAMS = ("view", "partition", "parameters", "version_checksum")


def placeholder_problems(spec: ViewSpec) -> list[dict[str, str]]:
    """A problem per ``${name}`` in the location naming no parameter, and per
    placeholder of the job template that names none or stands where a value would not
    be data (:func:`jobserver.parameters.placeholder_problems`)."""
    known = {parameter.name for parameter in spec.parameters}
    problems = []
    if spec.location is not None:
        problems += [{"field": "location", "message": f"${{{name}}} names no parameter of "
                      f"the view; expected one of: {', '.join(sorted(known)) or 'none'}"}
                     for name in placeholders(spec.location) if name not in known]
    if spec.job is not None:
        problems += parameters.placeholder_problems(
            spec.job.model_dump(mode="json", exclude_none=True), known, "transformation.job")
    problems += [{"field": f"parameters[{index}].name", "message": f"{parameter.name!r} is "
                  f"reserved: every view job's params carry it"}
                 for index, parameter in enumerate(spec.parameters)
                 if parameter.name in RESERVED_PARAMS]
    return problems


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
    body["params"] = {**body.get("params", {}), **values, "view": spec.name,
                      "partition": address.key, "parameters": values,
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
    if spec.job is not None:
        check_template(spec.job, policy, "transformation.job")
