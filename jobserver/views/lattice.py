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

It is bounded: every partition made and every mapping's fan-out is counted against the
request's :class:`~jobserver.views.limits.Budget` (``views.max_partitions``) before it
is made, so a pattern or a mapping that would expand further is a 422 naming
``pattern`` and the limit, with the memory not yet spent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobserver.exceptions import InvalidRequest
from jobserver.views.dates import address_date_problem
from jobserver.views.limits import Budget
from jobserver.parameters import SAFE_VALUE
from jobserver.views.mappings import Calendar, CompiledDependency
from jobserver.views.model import ViewAddress
from jobserver.views.spec import ViewSpec, value_fits

#: An address's values: how the addresses of one view are interned.
_Values = tuple[str | None, ...]


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

    def __init__(self, views: Mapping[str, ViewSpec], budget: Budget) -> None:
        self.views = views
        self.budget = budget
        self.calendar = Calendar()
        # Per view name: its compiled mappings, and whether its one mapping never gives
        # a partition twice (no duplicates to drop).
        self.compiled: dict[str, tuple[list[CompiledDependency], bool]] = {}
        # Per view name: its partitions made so far, by their values.
        self.interned: dict[str, dict[_Values, ViewAddress]] = {}

    def mappings(self, address: ViewAddress) -> tuple[list[CompiledDependency], bool]:
        found = self.compiled.get(address.name)
        if found is None:
            spec = self.views[address.name]
            mappings = [CompiledDependency(dependency, spec.parameter_names,
                                           self._view(dependency.view, spec.name)
                                           .parameter_names, self.calendar)
                        for dependency in spec.dependencies]
            found = self.compiled[address.name] = (
                mappings, len(mappings) == 1 and mappings[0].unique)
        return found

    def _view(self, name: str, needed_by: str) -> ViewSpec:
        spec = self.views.get(name)
        if spec is None:
            raise InvalidRequest(f"{needed_by} depends on {name}, which is not defined",
                                 [{"field": "view", "message": f"no view named {name}"}])
        return spec

    def partitions(self, name: str) -> dict[_Values, ViewAddress]:
        found = self.interned.get(name)
        if found is None:
            found = self.interned[name] = {}
        return found

    def address(self, name: str, values: _Values) -> ViewAddress:
        partitions = self.partitions(name)
        found = partitions.get(values)
        if found is None:
            self.budget.partition()
            package, view = name.split("/", 1)
            found = partitions[values] = ViewAddress(package, view, values)
        return found

    def expand(self, address: ViewAddress) -> tuple[ViewAddress, ...]:
        found: list[ViewAddress] = []
        mappings, unique = self.mappings(address)
        for mapping in mappings:
            self.budget.fan_out(mapping.fan_out, address)
            try:
                targets = mapping.targets(address.values)
            except ValueError as exc:
                raise InvalidRequest(f"{address.path}: {exc}", [
                    {"field": "pattern", "message": f"{address.path}: {exc}"}]) from None
            name, partitions = mapping.view, self.partitions(mapping.view)
            for values in targets:
                target = partitions.get(values)
                found.append(self.address(name, values) if target is None else target)
        if len(found) < 2 or unique:
            return tuple(found)
        # Interned: the same partition is the same object, so ids tell duplicates apart
        # without hashing addresses (a Python-level hash each).
        return tuple({id(target): target for target in found}.values())


def check_address(views: Mapping[str, ViewSpec], address: ViewAddress) -> None:
    """Raise :class:`InvalidRequest` naming ``address`` unless its view is defined and
    its values fit the view's parameters (count and types) and, for a view with
    ``year`` and ``month`` parameters, form a real calendar date
    (:mod:`jobserver.views.dates`)."""
    spec = views.get(address.name)
    if spec is None:
        _refuse(address, f"no view named {address.name}")
        return
    if len(address.values) != len(spec.parameters):
        names = ", ".join(spec.parameter_names) or "none"
        _refuse(address, f"{address.name} takes {len(spec.parameters)} parameter value(s) "
                         f"({names}), not {len(address.values)}")
    for parameter, value in zip(spec.parameters, address.values):
        if not value_fits(parameter.type, value, parameter.pattern):
            _refuse(address, f"{value!r} is not a {parameter.type} ({parameter.name})"
                    + _expected(parameter))
    problem = address_date_problem(spec.parameter_names, address.values)
    if problem is not None:
        _refuse(address, problem)


def _expected(parameter: Any) -> str:
    if parameter.type != "string":
        return ""
    return f": expected a match of {parameter.pattern or SAFE_VALUE.pattern}"


def _refuse(address: ViewAddress, message: str) -> None:
    raise InvalidRequest(f"{address.path}: {message}",
                         [{"field": "pattern", "message": f"{address.path}: {message}"}])


def instantiate(views: Mapping[str, ViewSpec], addresses: Iterable[ViewAddress], *,
                recursive: bool = True, limit: int | None = None) -> Lattice:
    """The lattice of ``addresses`` (checked with :func:`check_address`) and, with
    ``recursive``, every partition they depend on, transitively. ``views`` must have
    passed :func:`~jobserver.views.spec.validate_views` (no cycles between views).

    At most ``limit`` distinct partitions (default: the request's
    ``views.max_partitions``) are made: one more is an :class:`InvalidRequest` naming
    ``pattern`` and the limit (:class:`~jobserver.views.limits.Budget`)."""
    builder = _Builder(views, Budget(limit))
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
    expanded: set[int] = set()
    placed: set[int] = set()
    for root in roots:
        _walk(builder, root, lattice, expanded, placed)
    return lattice


def _walk(builder: _Builder, root: ViewAddress, lattice: Lattice, expanded: set[int],
          placed: set[int]) -> None:
    """Depth first from ``root``; a partition is placed once all it reads is placed.
    A partition expanded but not placed is on the current path: meeting it again is a
    cycle, which validated views cannot have. Interned addresses are tracked by id."""
    dependencies, order = lattice.dependencies, lattice.order
    stack = [root]
    while stack:
        address = stack[-1]
        key = id(address)
        if key not in expanded:
            expanded.add(key)
            found = dependencies[address] = builder.expand(address)
            for dependency in reversed(found):
                seen = id(dependency)
                if seen in placed:
                    continue
                if seen not in expanded:
                    stack.append(dependency)
                else:
                    raise InvalidRequest(f"{address.path}: depends on itself through "
                                         f"{dependency.path}", [{"field": "views",
                                                                 "message": "cycle"}])
            continue
        stack.pop()
        if key not in placed:
            placed.add(key)
            order.append(address)
