"""View definitions as the API and ``jobserver apply`` change them.

A definition is accepted only together with the definitions already stored: it is
parsed with the node's job policy (its job template is checked as a submitted job is),
then the whole set is validated (:func:`~jobserver.views.spec.validate_views`), so a
dependency on an unknown view, a mapping naming parameters the dependency does not
have, or a cycle is a 422 and nothing is stored. Deleting a view others depend on is a
409 naming them. Saving a definition whose structure checksum changed resets every
partition of the view to RECEIVE (:meth:`ViewRepository.put`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobserver.exceptions import Conflict, InvalidRequest, NotFound
from jobserver.resources import CREATED, digest, plan_put
from jobserver.spec import Policy
from jobserver.store import Store
from jobserver.views.checksums import structure_checksum, version_checksum
from jobserver.views.repos import view_repository
from jobserver.views.spec import ViewSpec, load_view, parse_view, spec_json, validate_views
from jobserver.views.store import Definition


@dataclass(frozen=True)
class PutResult:
    """What a PUT did (or, with ``dry_run``, would do); ``reset``: partitions put back
    to RECEIVE by a structure change."""

    change: str
    definition: Definition | None
    reset: int
    structure_changed: bool


class ViewCatalog:
    def __init__(self, store: Store, policy: Policy) -> None:
        self._repository = view_repository(store)
        self._policy = policy

    def parse(self, body: Mapping[str, Any]) -> ViewSpec:
        """A ``kind: View`` document as a spec, checked alone (422 with field paths)."""
        spec = parse_view(dict(body), self._policy)
        _no_fixed_after(spec)
        return spec

    def put(self, spec: ViewSpec, dry_run: bool = False) -> PutResult:
        """Create or replace the definition ``spec`` (from :meth:`parse`) once the set
        with it is valid (a dry run lets dependencies on unknown views pass)."""
        others = [load_view(d.spec) for d in self._repository.definitions()
                  if d.name != spec.name]
        try:
            validate_views([*others, spec])
        except InvalidRequest as exc:
            problems = [p for p in exc.details or [] if not (dry_run and _unknown_view(p))]
            if problems:
                raise InvalidRequest(f"{problems[0]['view']}: {problems[0]['field']}: "
                                     f"{problems[0]['message']}", problems) from None
        document = spec_json(spec)
        structure, version = structure_checksum(spec), version_checksum(spec)
        spec_hash = digest(document)
        current = self._repository.get(spec.name)
        structure_changed = current is not None and current.structure_checksum != structure
        if dry_run:
            stored = None if current is None else {"spec": current.spec,
                                                   "spec_hash": current.spec_hash}
            return PutResult(plan_put(stored, document, spec_hash)[0], current, 0,
                             structure_changed)
        change, reset = self._repository.put(spec.name, document, structure, version,
                                             spec_hash)
        return PutResult(change, self._repository.get(spec.name), reset, structure_changed)

    def get(self, name: str) -> Definition:
        found = self._repository.get(name)
        if found is None:
            raise NotFound(f"no view named {name}", {"view": name})
        return found

    def list(self) -> list[Definition]:
        return self._repository.definitions()

    def delete(self, name: str) -> None:
        """Drop a definition and its partitions' states; a view another depends on
        stays (409 naming the dependents)."""
        self.get(name)
        dependents = sorted(d.name for d in self._repository.definitions()
                            if any(dep.get("view") == name
                                   for dep in d.spec.get("dependencies", [])))
        if dependents:
            raise Conflict(f"{', '.join(dependents)} depend(s) on {name}; delete or change "
                           "them first", {"view": name, "dependents": dependents})
        self._repository.delete(name)


def _unknown_view(problem: Mapping[str, str]) -> bool:
    # A dry run (``jobserver apply`` checks every document first) accepts a dependency
    # on a view not stored yet: it may be earlier in the same file.
    return problem.get("field", "").endswith(".view") and \
        problem.get("message", "").startswith("no view named")


def _no_fixed_after(spec: ViewSpec) -> None:
    # A template's jobs are linked to their dependencies' jobs by materialize; a fixed
    # upstream job id in a template would make every partition wait for that one job.
    if spec.job is not None and spec.job.after:
        raise InvalidRequest("transformation.job.after: set by materialize, not by the "
                             "template", [{"field": "transformation.job.after",
                                           "message": "set by materialize; leave it out"}])


__all__ = ["CREATED", "PutResult", "ViewCatalog"]
