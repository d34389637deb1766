"""``jobserver apply FILE [--dry-run]``: make the server match a YAML file.

The file holds YAML documents (separated by ``---``), each one resource with a
``kind``. ``kind: Schedule`` carries a schedule spec's fields at the top level
(``namespace`` defaults to ``default``), optionally ``enabled: true|false`` (left out:
a new schedule is disabled, an existing one keeps its flag); ``kind: Dataset`` a
dataset's (``name``, ``namespace``, ``description``, ``key``); ``kind: View`` a view
definition (``name: package/View``, see :mod:`jobserver.views.spec`; a view after the
views it depends on); ``kind: BatchConfig`` a batch config's
(:mod:`jobserver.batches.spec`; ``name`` defaults to ``default``). ``deleted: true``
deletes the resource if it exists (every other field is then ignored; a dataset goes
with its partitions).

All documents are checked before anything changes: each is sent as a dry run, and
if the server refuses any of them (or one is not a resource at all) each refusal is
printed with its document's index and nothing is applied. Then the documents are
applied in file order, one line per resource (``schedule default/nightly: updated
(trigger, constraints)``). Applying a file twice changes nothing the second time.
Exit code: 0, or 1 when a document was refused.
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
from jobserver.exceptions import InvalidRequest
from jobserver.schedules.spec import IDENT

CREATED, UPDATED, UNCHANGED, DELETED = "created", "updated", "unchanged", "deleted"
_NAME = re.compile(rf"^{IDENT}$")
_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,1000}/[A-Za-z_][A-Za-z0-9_]{0,99}$")


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
            _refuse("deleted", "expected true or false")
        self.namespace = _name(self.body, "namespace", "default")
        self.name = _name(self.body, "name")
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


class ScheduleResource(PutResource):
    """A ``kind: Schedule`` document; ``enabled`` travels in the body."""

    collection, noun = "schedules", "schedule"


class DatasetResource(PutResource):
    """A ``kind: Dataset`` document. Deleting a dataset deletes its partitions."""

    collection, noun = "datasets", "dataset"


class ConsumerResource(PutResource):
    """A ``kind: Consumer`` document: ``dataset`` (in ``namespace``) and ``name``
    with the consumer's settings; PUT to ``…/datasets/<ns>/<dataset>/consumers/<name>``.
    Deleting a consumer deletes its working set and pointer."""

    noun = "consumer"

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document)
        dataset = _name(self.body, "dataset")
        self.collection = f"datasets/{self.namespace}/{dataset}/consumers"
        self.label = f"consumer {self.namespace}/{dataset}/{self.name}"

    def apply(self, client: Client, dry_run: bool) -> Outcome:
        if self.deleted:
            return self._delete(client, dry_run)
        reply = client.request("PUT", self._path(), self.body, query={"dry_run": dry_run})
        return Outcome(reply["change"], tuple(reply["changed"]))

    def _delete(self, client: Client, dry_run: bool) -> Outcome:
        try:
            client.request("GET" if dry_run else "DELETE", self._path())
        except ApiError as exc:
            if exc.status == 404:
                return Outcome(UNCHANGED, absent=True)
            raise
        return Outcome(DELETED)

    def _path(self) -> str:
        return f"/api/v1/{self.collection}/{self.name}"


class DocumentResource:
    """A document PUT whole to one path (:attr:`path`), deleted there with ``deleted:
    true``; subclasses name the path and read what changed from the server's reply."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.body = {key: value for key, value in document.items()
                     if key not in ("kind", "deleted")}
        self.deleted = document.get("deleted", False)
        if not isinstance(self.deleted, bool):
            _refuse("deleted", "expected true or false")
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


class ViewResource(DocumentResource):
    """A ``kind: View`` document (:mod:`jobserver.views.spec`): ``PUT
    /api/v1/view-definitions/<package>/<View>`` with the document as the body. A view
    must come after the views it depends on: the dry run accepts a dependency on a view
    not stored yet, the apply in file order does not."""

    def locate(self) -> tuple[str, str]:
        name = self.body.get("name")
        if not isinstance(name, str) or not _VIEW_NAME.match(name):
            _refuse("name", "required: package/View, e.g. app.eci.datamart/SearchExport")
        return f"view {name}", f"/api/v1/view-definitions/{name}"

    def changed(self, reply: dict[str, Any]) -> tuple[str, ...]:
        return ("structure",) if reply["structure_changed"] else ()


class BatchConfigResource(DocumentResource):
    """A ``kind: BatchConfig`` document (``name`` defaults to ``default``): PUT to
    ``/api/v1/batches/configs/<name>``. Deleting a config keeps its batches."""

    def locate(self) -> tuple[str, str]:
        name = _name(self.body, "name", "default")
        return f"batch config {name}", f"/api/v1/batches/configs/{name}"

    def changed(self, reply: dict[str, Any]) -> tuple[str, ...]:
        return tuple(reply["changed"])


def _name(body: dict[str, Any], field: str, default: str | None = None) -> str:
    """A namespace or name, checked here: it becomes part of the URL."""
    value = body.get(field, default)
    if not isinstance(value, str) or not _NAME.match(value):
        _refuse(field, "required: 1 to 64 letters, digits, '_', '.' or '-', starting with "
                       "a letter or digit (no '/')")
    return value


#: What each ``kind`` is applied as; later kinds (views, batches) add theirs.
KINDS: dict[str, Callable[[dict[str, Any]], Resource]] = {"Schedule": ScheduleResource,
                                                          "Dataset": DatasetResource,
                                                          "Consumer": ConsumerResource,
                                                          "View": ViewResource,
                                                          "BatchConfig": BatchConfigResource}


class Problem(NamedTuple):
    """A document that cannot be applied: its index (1-based), what it names, why."""

    document: int
    label: str
    message: str
    details: Any = None


def _refuse(field: str, message: str) -> NoReturn:
    raise InvalidRequest(f"{field}: {message}", [{"field": field, "message": message}])


def load(text: str) -> list[Any]:
    """The file's documents, empty ones (a trailing ``---``) left out. YAML turns
    unquoted timestamps into datetimes; they are sent as ISO 8601 text."""
    return [_plain(document) for document in yaml.safe_load_all(text) if document is not None]


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
    for index, document in enumerate(documents, 1):
        kind = document.get("kind") if isinstance(document, dict) else None
        try:
            if not isinstance(document, dict):
                _refuse("document", "expected a mapping with a 'kind'")
            factory = KINDS.get(kind) if isinstance(kind, str) else None
            if factory is None:
                _refuse("kind", f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
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
    except yaml.YAMLError as exc:
        print(f"{path}: not valid YAML: {exc}", file=sys.stderr)
        return 1
    if not documents:
        print(f"{path}: no documents; nothing to apply")
        return 0
    return apply_documents(client, documents, dry_run)
