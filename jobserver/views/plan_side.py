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

from jobserver.spec import JobSpec
from jobserver.views.model import Decision, Mode, StoredPartition, ViewAddress


def parse_pattern(pattern: str) -> list[ViewAddress]:
    from jobserver.views.patterns import parse_pattern as parse

    # The parser's addresses are its own class: the store keys on the vocabulary's.
    return [ViewAddress(a.package, a.view, tuple(a.values)) for a in parse(pattern)]


def parse_view(body: Any) -> Any:
    from jobserver.views.spec import parse_view as parse

    return parse(body)


def validate_views(specs: Iterable[Any]) -> None:
    from jobserver.views.spec import validate_views as validate

    validate(list(specs))


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


def render_job(spec: Any, address: ViewAddress) -> JobSpec:
    from jobserver.views.templates import render_job as render

    return render(spec, address)


def spec_json(spec: Any) -> dict[str, Any]:
    """A definition as the JSON the store keeps (``parse_view`` reads it back)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)
