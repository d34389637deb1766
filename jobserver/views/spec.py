"""View definitions (``kind: View``): parsed strictly, validated alone and as a set.

A view, in YAML (``examples/views.yaml`` holds a whole lattice)::

    kind: View
    name: app.eci.stage/SearchWeekly            # package/View
    parameters:                                 # ordered; an address gives them in order
      - {name: shop, type: string}
      - {name: year, type: string}
      - {name: month, type: string}
      - {name: day, type: string}
    structure:                                  # its checksum is the DDL checksum
      fields: [{name: id, type: bigint}, {name: query, type: string}]
    dependencies:                               # see jobserver.views.mappings
      - view: app.eci.stage/Search
        map: {shop: $shop}
        days: {last: 7}
    transformation:                             # or: noop (data arrives from outside)
      job:                                      # a job body; ${param} in any string
        steps: [{name: aggregate, type: shell, argv: [agg, --day, "${year}${month}${day}"]}]
    location: /data/app.eci.stage/search_weekly/${shop}/${year}${month}${day}
    version: "1.0.0"                            # optional: only this string is versioned

Parameter types are Schedoscope's: string, int, long, byte, boolean, float, double
(values travel as strings; an addressed value must read as its type; a string matches
``[A-Za-z0-9_][A-Za-z0-9_.-]*`` without ``..``, or the parameter's own ``pattern``,
since it may reach a path or an argv element). The job template
may leave out ``name``: the rendered job is named after the partition.

:func:`parse_view` checks one definition on its own (every problem with its field path,
e.g. ``dependencies[0].map.shop``); :func:`validate_views` checks a set together:
dependencies on unknown views, mappings that miss or invent a dependency's parameters
or give it values of the wrong type, and cycles between views.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import (BeforeValidator, Discriminator, Field, StringConstraints, Tag,
                      field_validator)

from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.parameters import SAFE_VALUE
from jobserver.resources import parse_resource
from jobserver.spec import JobSpec, Policy, StrictModel
from jobserver.views.mappings import (DependencySpec, ParamName, ViewName, fixed,
                                      reference)
from jobserver.views.templates import placeholder_problems, validate_template

ParamType = Literal["string", "int", "long", "byte", "boolean", "float", "double"]
ColumnType = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_<>,:() ]{0,199}$")]
_INT_RANGE = {"int": 2 ** 31, "long": 2 ** 63, "byte": 2 ** 7}
_INT = re.compile(r"-?\d+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FLOAT = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_TAGS = ("noop-transformation", "job-transformation")


class Parameter(StrictModel):
    name: ParamName
    type: ParamType = "string"
    #: What a string value must match in full, when the default (:data:`SAFE_VALUE`)
    #: is too narrow; control characters are refused whatever it says.
    pattern: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value


class Column(StrictModel):
    name: ParamName
    type: ColumnType
    description: str | None = Field(default=None, max_length=500)


class Structure(StrictModel):
    fields: list[Column] = Field(min_length=1, max_length=1000)


def _named_job(value: Any) -> Any:
    # The template's name is optional: a rendered job is named after its partition.
    if isinstance(value, dict) and "name" not in value:
        return {"name": "view", **value}
    return value


class JobTransformation(StrictModel):
    job: Annotated[JobSpec, BeforeValidator(_named_job)]


def _transformation_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "noop-transformation"
    if isinstance(value, (dict, JobTransformation)):
        return "job-transformation"
    return None


Transformation = Annotated[
    Union[Annotated[Literal["noop"], Tag("noop-transformation")],
          Annotated[JobTransformation, Tag("job-transformation")]],
    Discriminator(_transformation_kind, custom_error_type="transformation",
                  custom_error_message="expected 'noop' or {job: {steps: [...]}}")]


class ViewSpec(StrictModel):
    """One view definition as accepted by :func:`parse_view`."""

    name: ViewName
    description: str | None = Field(default=None, max_length=500)
    parameters: list[Parameter] = Field(default_factory=list, max_length=16)
    structure: Structure
    dependencies: list[DependencySpec] = Field(default_factory=list, max_length=32)
    transformation: Transformation
    location: str | None = Field(default=None, min_length=1, max_length=1000,
                                 pattern=r"^[^\x00]+$")
    version: str | None = Field(default=None, min_length=1, max_length=100,
                                pattern=r"^[^\x00]+$")

    @property
    def job(self) -> JobSpec | None:
        """The job template, or None for a noop view."""
        t = self.transformation
        return t.job if isinstance(t, JobTransformation) else None

    @property
    def noop(self) -> bool:
        return self.job is None

    @property
    def parameter_names(self) -> list[str]:
        return [parameter.name for parameter in self.parameters]


def parse_view(body: bytes | str | Mapping[str, Any], policy: Policy | None = None) -> ViewSpec:
    """Parse one definition; raise :class:`InvalidRequest` with every problem in
    ``details`` (the first in the message) or :class:`MalformedRequest` (not JSON).
    A ``kind`` key must say ``View`` and is dropped. With ``policy``, the job template
    is also checked as a submitted job would be (:func:`validate_template`)."""
    spec = parse_resource(ViewSpec, _document(body), _TAGS)
    problems = _own_problems(spec)
    if problems:
        _raise(problems)
    if policy is not None:
        validate_template(spec, policy)
    return spec


def spec_json(spec: ViewSpec) -> dict[str, Any]:
    """A definition as the JSON the store keeps (:func:`load_view` reads it back)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


def load_view(stored: Mapping[str, Any]) -> ViewSpec:
    """A definition as stored (``model_dump(mode="json")`` of one :func:`parse_view`
    accepted), read back without the node's policy."""
    return ViewSpec.model_validate_json(json.dumps(stored))


def _document(body: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    parsed: Any = body
    if isinstance(body, (bytes, str)):
        try:
            parsed = json.loads(body)
        except ValueError:
            raise MalformedRequest("request body is not valid JSON",
                                   [{"field": "body", "message": "malformed JSON"}]) from None
    if not isinstance(parsed, Mapping):
        _raise([{"field": "body", "message": "expected an object"}])
    document = dict(parsed)
    kind = document.pop("kind", "View")
    if kind != "View":
        _raise([{"field": "kind", "message": f"expected 'View', not {kind!r}"}])
    return document


def _raise(details: list[dict[str, str]]) -> Any:
    first = details[0]
    raise InvalidRequest(f"{first['field']}: {first['message']}", details)


def _own_problems(spec: ViewSpec) -> list[dict[str, str]]:
    """What needs the whole definition: unique names, mappings naming own parameters,
    placeholders naming parameters."""
    problems = _duplicates([p.name for p in spec.parameters], "parameters")
    problems += _duplicates([f.name for f in spec.structure.fields], "structure.fields")
    own = set(spec.parameter_names)
    for index, dependency in enumerate(spec.dependencies):
        where = f"dependencies[{index}]"
        for target, value in dependency.map.items():
            items = value if isinstance(value, list) else [value]
            for ref in (reference(item) for item in items):
                if ref is not None and ref not in own:
                    problems.append({"field": f"{where}.map.{target}", "message":
                                     f"${ref} names no parameter of {spec.name}"})
        if dependency.days is not None:
            for name in dependency.days.source():
                if name not in own:
                    problems.append({"field": f"{where}.days.of", "message":
                                     f"{name!r} is no parameter of {spec.name}"})
            problems += _duplicates(dependency.days.into, f"{where}.days.into")
    return problems + placeholder_problems(spec)


def _duplicates(names: list[str], where: str) -> list[dict[str, str]]:
    return [{"field": f"{where}[{i}].name" if not where.endswith("into") else f"{where}[{i}]",
             "message": f"duplicate name {name!r}"}
            for i, name in enumerate(names) if name in names[:i]]


def value_fits(kind: str, value: str | None, pattern: str | None = None) -> bool:
    """Whether a parameter value (a string, or None for ``null()``) reads as ``kind``.

    A string is data that may reach a path or an argv element: by default it matches
    :data:`~jobserver.parameters.SAFE_VALUE` (or is empty), else the parameter's own
    ``pattern``; never a control character either way."""
    if value is None:
        return True
    if kind == "string":
        if _CONTROL.search(value):
            return False
        if pattern is not None:
            return re.fullmatch(pattern, value) is not None
        return value == "" or SAFE_VALUE.match(value) is not None
    if kind in _INT_RANGE:
        bound = _INT_RANGE[kind]
        return bool(_INT.fullmatch(value)) and -bound <= int(value) < bound
    if kind == "boolean":
        return value in ("true", "false")
    return bool(_FLOAT.fullmatch(value))


def validate_views(specs: Iterable[ViewSpec]) -> list[str]:
    """Check definitions together; return their names, dependencies first.

    Raises :class:`InvalidRequest` listing every problem; each detail names the view
    (``view``) and the field within it.
    """
    views: dict[str, ViewSpec] = {}
    problems: list[dict[str, str]] = []
    for spec in specs:
        if spec.name in views:
            problems.append({"view": spec.name, "field": "name", "message": "defined twice"})
        views[spec.name] = spec
    for spec in views.values():
        for index, dependency in enumerate(spec.dependencies):
            problems += [{"view": spec.name, **problem}
                         for problem in _mapping_problems(spec, index, dependency, views)]
    order, cycle = _order(views)
    if cycle:
        problems.append({"view": cycle[0], "field": "dependencies",
                         "message": "dependency cycle: " + " -> ".join(cycle)})
    if problems:
        first = problems[0]
        raise InvalidRequest(f"{first['view']}: {first['field']}: {first['message']}", problems)
    return order


def _mapping_problems(spec: ViewSpec, index: int, dependency: DependencySpec,
                      views: Mapping[str, ViewSpec]) -> list[dict[str, str]]:
    where = f"dependencies[{index}]"
    target = views.get(dependency.view)
    if target is None:
        return [{"field": f"{where}.view", "message": f"no view named {dependency.view}"}]
    types = {p.name: p.type for p in target.parameters}
    patterns = {p.name: p.pattern for p in target.parameters}
    own_types = {p.name: p.type for p in spec.parameters}
    problems = [{"field": f"{where}.map.{name}",
                 "message": f"{target.name} has no parameter {name!r}"}
                for name in dependency.map if name not in types]
    into = dependency.days.into if dependency.days else []
    problems += [{"field": f"{where}.days.into", "message": f"{target.name} has no "
                  f"parameter {name!r}"} for name in into if name not in types]
    for name, kind in types.items():
        problems += _coverage(f"{where}.map.{name}", name, (kind, patterns[name]),
                              dependency, own_types, target.name)
    if dependency.days is not None:
        problems += [{"field": f"{where}.days.of", "message": f"{name!r} is a {own_types[name]}; "
                      "a date is read from string or int parameters"}
                     for name in dependency.days.source()
                     if own_types.get(name, "string") not in ("string", "int", "long")]
    return problems


def _coverage(field: str, name: str, typed: tuple[str, str | None],
              dependency: DependencySpec, own_types: Mapping[str, str],
              target: str) -> list[dict[str, str]]:
    """Whether the dependency parameter ``name`` gets exactly one value of its type
    (``typed``: its type and pattern)."""
    kind, pattern = typed
    into = dependency.days.into if dependency.days else []
    if name in into:
        if name in dependency.map:
            return [{"field": field, "message": "given twice: by map and by days.into"}]
        if kind not in ("string", "int", "long"):
            return [{"field": field, "message": f"a {kind} cannot take a day"}]
        return []
    if name not in dependency.map:
        return [{"field": field, "message": f"parameter {name!r} of {target} is not "
                 f"mapped; give ${name}, a fixed value or a list"}]
    value = dependency.map[name]
    problems = []
    for item in value if isinstance(value, list) else [value]:
        ref = reference(item)
        if ref is not None and own_types.get(ref, kind) != kind:
            problems.append({"field": field, "message": f"${ref} is a {own_types[ref]}; "
                             f"{name!r} of {target} is a {kind}"})
        elif ref is None and not value_fits(kind, fixed(item), pattern):
            problems.append({"field": field, "message": f"{fixed(item)!r} is not a {kind}"})
    return problems


def _order(views: Mapping[str, ViewSpec]) -> tuple[list[str], list[str] | None]:
    """View names dependencies first, or a cycle among known views."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: placed
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        if state.get(name) == 2 or name not in views:
            return None
        if state.get(name) == 1:
            return path[path.index(name):] + [name]
        state[name] = 1
        path.append(name)
        for dependency in views[name].dependencies:
            cycle = visit(dependency.view)
            if cycle:
                return cycle
        path.pop()
        state[name] = 2
        order.append(name)
        return None

    for name in views:
        cycle = visit(name)
        if cycle:
            return order, cycle
    return order, None
