"""``jobserver apply FILE [--dry-run]``: make the server match a YAML file.

The file holds YAML documents (separated by ``---``), each one resource with a
``kind``. The installed planners say which kinds there are and how each is applied
(:meth:`jobserver.planners.base.Planner.apply_kinds`): the built-in ones handle
``Schedule``, ``Dataset``, ``Consumer``, ``View`` and ``BatchConfig``, each
described with its resource class in the planner's ``cli`` module. Most kinds are
put whole (:class:`PutResource`, :class:`DocumentResource`); ``deleted: true``
deletes the resource if it exists (every other field is then ignored).

All documents are checked before anything changes: each is sent as a dry run, and
if the server refuses any of them (or one is not a resource at all) each refusal is
printed with its document's index and nothing is applied. Then the documents are
applied in file order, one line per resource (``schedule default/nightly: updated
(trigger, constraints)``). Applying a file twice changes nothing the second time.
Exit code: 0, or 1 when a document was refused (or the file is not YAML); 2 when the
file passes the bounds of :mod:`jobserver.yaml_bounds` (aliases that would repeat
too much, a recursive alias, nesting too deep), with the file and line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, Protocol, TextIO

import yaml

from jobserver.client import ApiError, Client
from jobserver.exceptions import ConfigError, InvalidRequest
from jobserver.names import IDENT
from jobserver.planners import installed
from jobserver.yaml_bounds import YamlBoundError, load_all

CREATED, UPDATED, UNCHANGED, DELETED = "created", "updated", "unchanged", "deleted"
_NAME = re.compile(rf"^{IDENT}$")


@dataclass(frozen=True)
class Outcome:
    """What applying a resource changed (or, on a dry run, would change)."""

    change: str
    fields: tuple[str, ...] = ()
    absent: bool = False  # a deleted resource that did not exist

    def describe(self, dry_run: bool) -> str:
        fields = f" ({', '.join(self.fields)})" if self.fields else ""
        if self.change == UNCHANGED:
            return "unchanged (absent)" if self.absent else UNCHANGED
        if dry_run:
            verb = {CREATED: "would create", UPDATED: "would update", DELETED: "would delete"}
            return verb[self.change] + fields
        return self.change + fields


class Resource(Protocol):
    """One document of the file, ready to be sent."""

    label: str

    def apply(self, client: Client, dry_run: bool) -> Outcome: ...


class PutResource:
    """A document of a kind the API puts whole (``kind: Schedule``, ``kind: Dataset``):
    ``PUT /api/v1/<collection>/<ns>/<name>`` with the document (bar ``kind``) as the
    body, or a delete."""

    collection = ""
    noun = ""

    def __init__(self, document: dict[str, Any]) -> None:
        self.body = {key: value for key, value in document.items()
                     if key not in ("kind", "deleted")}
        self.deleted = document.get("deleted", False)
        if not isinstance(self.deleted, bool):
            refuse("deleted", "expected true or false")
        self.namespace = checked_name(self.body, "namespace", "default")
        self.name = checked_name(self.body, "name")
        self.label = f"{self.noun} {self.namespace}/{self.name}"

    def apply(self, client: Client, dry_run: bool) -> Outcome:
        if self.deleted:
            return self._delete(client, dry_run)
        reply = client.put_resource(self.collection, self.namespace, self.name, self.body,
                                    dry_run)
        return Outcome(reply["change"], tuple(reply["changed"]))

    def _delete(self, client: Client, dry_run: bool) -> Outcome:
        try:
            if dry_run:
                client.resource(self.collection, self.namespace, self.name)
            else:
                client.delete_resource(self.collection, self.namespace, self.name)
        except ApiError as exc:
            if exc.status == 404:
                return Outcome(UNCHANGED, absent=True)
            raise
        return Outcome(DELETED)


class DocumentResource:
    """A document PUT whole to one path (:attr:`path`), deleted there with ``deleted:
    true``; subclasses name the path and read what changed from the server's reply."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.body = {key: value for key, value in document.items()
                     if key not in ("kind", "deleted")}
        self.deleted = document.get("deleted", False)
        if not isinstance(self.deleted, bool):
            refuse("deleted", "expected true or false")
        self.label, self.path = self.locate()

    def locate(self) -> tuple[str, str]:
        """The resource's label for people and its path in the API."""
        raise NotImplementedError

    def changed(self, reply: dict[str, Any]) -> tuple[str, ...]:
        """What an update changed, from the PUT's reply."""
        raise NotImplementedError

    def apply(self, client: Client, dry_run: bool) -> Outcome:
        if self.deleted:
            try:
                client.request("GET" if dry_run else "DELETE", self.path)
            except ApiError as exc:
                if exc.status == 404:
                    return Outcome(UNCHANGED, absent=True)
                raise
            return Outcome(DELETED)
        reply = client.request("PUT", self.path, self.body, query={"dry_run": dry_run})
        return Outcome(reply["change"], self.changed(reply))


def checked_name(body: dict[str, Any], field: str, default: str | None = None) -> str:
    """A namespace or name, checked here: it becomes part of the URL."""
    value = body.get(field, default)
    if not isinstance(value, str) or not _NAME.match(value):
        refuse(field, "required: 1 to 64 letters, digits, '_', '.' or '-', starting with "
                       "a letter or digit (no '/')")
    return value


#: Reads one document of a ``kind`` into its resource, refusing a bad one with
#: :class:`~jobserver.exceptions.InvalidRequest` naming the field.
ResourceFactory = Callable[[dict[str, Any]], Resource]


def kinds() -> dict[str, ResourceFactory]:
    """Every ``kind`` the installed planners apply (:meth:`Planner.apply_kinds
    <jobserver.planners.base.Planner.apply_kinds>`), in their order; a kind two
    planners claim is a :class:`~jobserver.exceptions.ConfigError`."""
    found: dict[str, ResourceFactory] = {}
    owners: dict[str, str] = {}
    for planner in installed():
        for kind, factory in planner.apply_kinds().items():
            if kind in owners:
                raise ConfigError(f"two planners apply kind {kind!r}: {owners[kind]} and "
                                  f"{planner.name}")
            found[kind], owners[kind] = factory, planner.name
    return found


class Problem(NamedTuple):
    """A document that cannot be applied: its index (1-based), what it names, why."""

    document: int
    label: str
    message: str
    details: Any = None


def refuse(field: str, message: str) -> NoReturn:
    """Refuse a document: ``field`` is wrong, as ``message`` says."""
    raise InvalidRequest(f"{field}: {message}", [{"field": field, "message": message}])


def load(text: str) -> list[Any]:
    """The file's documents, empty ones (a trailing ``---``) left out. YAML turns
    unquoted timestamps into datetimes; they are sent as ISO 8601 text. Aliases and
    nesting are bounded (:class:`YamlBoundError`): a file is a user's input."""
    return [_plain(document) for document in load_all(text) if document is not None]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return value


def resources(documents: list[Any]) -> tuple[list[tuple[int, Resource]], list[Problem]]:
    """Each document as its kind's resource; the ones that are not, as problems."""
    found: list[tuple[int, Resource]] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    known = kinds()
    for index, document in enumerate(documents, 1):
        kind = document.get("kind") if isinstance(document, dict) else None
        try:
            if not isinstance(document, dict):
                refuse("document", "expected a mapping with a 'kind'")
            factory = known.get(kind) if isinstance(kind, str) else None
            if factory is None:
                refuse("kind", f"unknown kind {kind!r}; expected one of {', '.join(known)}")
            resource = factory(document)
        except InvalidRequest as exc:
            problems.append(Problem(index, str(kind or "?"), exc.message, exc.details))
            continue
        if resource.label in seen:
            problems.append(Problem(index, resource.label,
                                    f"also in document {seen[resource.label]}"))
            continue
        seen[resource.label] = index
        found.append((index, resource))
    return found, problems


def apply_documents(client: Client, documents: list[Any], dry_run: bool = False,
                    out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Check every document with a dry run, then (unless ``dry_run``) apply them in
    order; print one line per resource (to ``out``, refusals to ``err``; by default
    standard output and error). Returns the exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    found, problems = resources(documents)
    plans: list[tuple[Resource, Outcome]] = []
    for index, resource in found:
        try:
            plans.append((resource, resource.apply(client, dry_run=True)))
        except ApiError as exc:
            if exc.status == 401:  # the token, not the document: say it once
                raise
            problems.append(Problem(index, resource.label, exc.message, exc.details))
    if problems:
        for problem in sorted(problems, key=lambda problem: problem.document):
            _print_problem(problem, err)
        print(f"nothing applied: {len(problems)} of {len(documents)} documents refused",
              file=err)
        return 1
    failed = False
    for resource, plan in plans:
        try:
            done = dry_run or plan.change == UNCHANGED
            outcome = plan if done else resource.apply(client, dry_run=False)
        except ApiError as exc:  # changed on the server since the dry run
            print(f"{resource.label}: refused: {exc.message}", file=err)
            failed = True
            continue
        print(f"{resource.label}: {outcome.describe(dry_run)}", file=out)
    return 1 if failed else 0


def _print_problem(problem: Problem, err: TextIO) -> None:
    print(f"document {problem.document} ({problem.label}): refused: {problem.message}", file=err)
    details = problem.details if isinstance(problem.details, list) else []
    for item in details:
        if isinstance(item, dict) and "field" in item:
            print(f"  {item['field']}: {item.get('message', '')}", file=err)


def run(client: Client, path: str, dry_run: bool) -> int:
    """``jobserver apply``: the file (``-``: standard input) applied through ``client``."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        documents = load(text)
    except YamlBoundError as exc:  # nothing sent: bad input, as an unreadable file is
        raise ConfigError(f"{'<stdin>' if path == '-' else path}:{exc.line}: "
                          f"{exc.reason}") from None
    except yaml.YAMLError as exc:
        print(f"{path}: not valid YAML: {exc}", file=sys.stderr)
        return 1
    if not documents:
        print(f"{path}: no documents; nothing to apply")
        return 0
    return apply_documents(client, documents, dry_run)
