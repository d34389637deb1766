"""The planning side's functions, imported in one place when first used.

Definitions, lattices, plans and job templates are the pure half of views
(``spec``, ``checksums``, ``lattice``, ``planner``, ``templates``, ``patterns``); the
stored and running half calls them only through here, so that it imports, and its
store-level parts work, whatever the planning half's module layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from jobserver.spec import JobSpec, Policy
from jobserver.views.model import Decision, Mode, StoredPartition, ViewAddress


def parse_pattern(pattern: str) -> list[ViewAddress]:
    from jobserver.views.patterns import parse_pattern as parse

    return parse(pattern)


def parse_view(body: Any, policy: Policy | None = None) -> Any:
    """A definition as submitted: with ``policy``, its job template is checked as a
    submitted job would be (registered callables, allowed executables)."""
    from jobserver.views.spec import parse_view as parse

    return parse(body, policy)


def load_view(stored: Mapping[str, Any]) -> Any:
    """A definition as stored (accepted once already), read back without a policy."""
    from jobserver.views.spec import load_view as load

    return load(stored)


def validate_views(specs: Iterable[Any]) -> list[str]:
    """The names dependencies first; :class:`InvalidRequest` listing every problem of
    the set (unknown dependency views, wrong mappings, cycles)."""
    from jobserver.views.spec import validate_views as validate

    return validate(list(specs))


def checksums(spec: Any) -> tuple[str, str]:
    """(structure checksum, version checksum) of a definition."""
    from jobserver.views.checksums import structure_checksum, version_checksum

    return structure_checksum(spec), version_checksum(spec)


def instantiate(views: Mapping[str, Any], addresses: list[ViewAddress],
                recursive: bool) -> Any:
    from jobserver.views.lattice import instantiate as build

    return build(views, addresses, recursive=recursive)


def plan(lattice: Any, views: Mapping[str, Any], stored: Mapping[ViewAddress, StoredPartition],
         mode: Mode, now: datetime,
         data_time: Callable[[ViewAddress], datetime | None]) -> list[Decision]:
    from jobserver.views.planner import plan as decide

    return decide(lattice, views, stored, mode, now, data_time)


def render_job(spec: Any, address: ViewAddress, version_checksum: str | None = None) -> JobSpec:
    """The job of one partition; ``version_checksum``: the one planned (computed once
    per view by the planner), recorded in the job's params as the version it runs."""
    from jobserver.views.templates import render_job as render

    return render(spec, address, version_checksum=version_checksum)


def spec_json(spec: Any) -> dict[str, Any]:
    """A definition as the JSON the store keeps (``parse_view`` reads it back)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)
