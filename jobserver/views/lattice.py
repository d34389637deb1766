"""Instantiation: the addressed view partitions and, recursively, those they read.

:func:`instantiate` is Schedoscope's instantiation phase without the metastore: it
checks every addressed partition against its view (known view, one value per
parameter, values of the parameters' types) and walks the dependency mappings down to
the source views. The :class:`Lattice` it returns lists every partition once, each
after all of its dependencies, which is the order the planner decides them in.

It is linear in the lattice's edges: each view's mappings are compiled once per call,
day windows are computed once per day (:class:`~jobserver.views.mappings.Calendar`),
and a partition met again through another dependent is the same
:class:`~jobserver.views.model.ViewAddress` object, found by one dict lookup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jobserver.exceptions import InvalidRequest
from jobserver.views.mappings import Calendar, CompiledDependency
from jobserver.views.model import ViewAddress
from jobserver.views.spec import ViewSpec, value_fits

#: An address's view name and values: how addresses are interned.
_Key = tuple[str, tuple[str | None, ...]]


@dataclass
class Lattice:
    """Partitions in dependency order. ``dependencies[a]`` are the partitions ``a``
    reads (empty for sources and when instantiated without recursion); ``addressed``
    those the request named."""

    order: list[ViewAddress] = field(default_factory=list)
    dependencies: dict[ViewAddress, tuple[ViewAddress, ...]] = field(default_factory=dict)
    addressed: set[ViewAddress] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.order)


class _Builder:
    """One instantiation: compiled mappings and interned addresses, for its duration."""

    def __init__(self, views: Mapping[str, ViewSpec]) -> None:
        self.views = views
        self.calendar = Calendar()
        self.compiled: dict[str, list[CompiledDependency]] = {}
        self.interned: dict[_Key, ViewAddress] = {}

    def mappings(self, name: str) -> list[CompiledDependency]:
        found = self.compiled.get(name)
        if found is None:
            spec = self.views[name]
            found = [CompiledDependency(dependency, spec.parameter_names,
                                        self._view(dependency.view, spec.name).parameter_names,
                                        self.calendar)
                     for dependency in spec.dependencies]
            self.compiled[name] = found
        return found

    def _view(self, name: str, needed_by: str) -> ViewSpec:
        spec = self.views.get(name)
        if spec is None:
            raise InvalidRequest(f"{needed_by} depends on {name}, which is not defined",
                                 [{"field": "view", "message": f"no view named {name}"}])
        return spec

    def address(self, name: str, values: tuple[str | None, ...]) -> ViewAddress:
        key = (name, values)
        found = self.interned.get(key)
        if found is None:
            package, view = name.split("/", 1)
            found = ViewAddress(package, view, values)
            self.interned[key] = found
        return found

    def expand(self, address: ViewAddress) -> tuple[ViewAddress, ...]:
        found: list[ViewAddress] = []
        for mapping in self.mappings(address.name):
            try:
                targets = mapping.targets(address.values)
            except ValueError as exc:
                raise InvalidRequest(f"{address.path}: {exc}", [
                    {"field": "pattern", "message": f"{address.path}: {exc}"}]) from None
            found.extend(self.address(mapping.view, values) for values in targets)
        return tuple(dict.fromkeys(found)) if len(found) > 1 else tuple(found)


def check_address(views: Mapping[str, ViewSpec], address: ViewAddress) -> None:
    """Raise :class:`InvalidRequest` naming ``address`` unless its view is defined and
    its values fit the view's parameters (count and types)."""
    spec = views.get(address.name)
    if spec is None:
        _refuse(address, f"no view named {address.name}")
        return
    if len(address.values) != len(spec.parameters):
        names = ", ".join(spec.parameter_names) or "none"
        _refuse(address, f"{address.name} takes {len(spec.parameters)} parameter value(s) "
                         f"({names}), not {len(address.values)}")
    for parameter, value in zip(spec.parameters, address.values):
        if not value_fits(parameter.type, value):
            _refuse(address, f"{value!r} is not a {parameter.type} ({parameter.name})")


def _refuse(address: ViewAddress, message: str) -> None:
    raise InvalidRequest(f"{address.path}: {message}",
                         [{"field": "pattern", "message": f"{address.path}: {message}"}])


def instantiate(views: Mapping[str, ViewSpec], addresses: Iterable[ViewAddress], *,
                recursive: bool = True) -> Lattice:
    """The lattice of ``addresses`` (checked with :func:`check_address`) and, with
    ``recursive``, every partition they depend on, transitively. ``views`` must have
    passed :func:`~jobserver.views.spec.validate_views` (no cycles between views)."""
    builder = _Builder(views)
    lattice = Lattice()
    roots: list[ViewAddress] = []
    for address in addresses:
        check_address(views, address)
        interned = builder.address(address.name, address.values)
        if interned not in lattice.addressed:
            lattice.addressed.add(interned)
            roots.append(interned)
    if not recursive:
        lattice.order = roots
        lattice.dependencies = {address: () for address in roots}
        return lattice
    placed: set[ViewAddress] = set()
    for root in roots:
        _walk(builder, root, lattice, placed)
    return lattice


def _walk(builder: _Builder, root: ViewAddress, lattice: Lattice,
          placed: set[ViewAddress]) -> None:
    """Depth first from ``root``; a partition is placed once all it reads is placed.
    A partition expanded but not placed is on the current path: meeting it again is a
    cycle, which validated views cannot have."""
    dependencies = lattice.dependencies
    stack = [root]
    while stack:
        address = stack[-1]
        if address not in dependencies:
            expanded = builder.expand(address)
            dependencies[address] = expanded
            for dependency in reversed(expanded):
                if dependency not in dependencies:
                    stack.append(dependency)
                elif dependency not in placed:
                    raise InvalidRequest(f"{address.path}: depends on itself through "
                                         f"{dependency.path}", [{"field": "views",
                                                                 "message": "cycle"}])
            continue
        stack.pop()
        if address not in placed:
            placed.add(address)
            lattice.order.append(address)
