"""What every planner's resource shares: its name, its parsing, its digest, its put.

A resource is what a user declares and puts whole (a schedule, a dataset, a
consumer, a view, a batch config). Each planner defines its own model; the rules
every one of them follows live here, once, so that they all refuse, compare and
decide alike:

- a name is a namespace and a name, each an :data:`Ident` (:class:`NamespacedSpec`);
- a body (JSON text, or a document already loaded from JSON or YAML) is parsed by
  :func:`parse_resource`: :class:`MalformedRequest` when it is not JSON,
  :class:`InvalidRequest` naming every bad field otherwise, with the size and
  nesting bounds of the model applied (:func:`jobserver.spec.parse_model`);
- a stored spec is compared by the :func:`digest` of its canonical JSON, and a put
  is planned by :func:`plan_put` (created, updated with the fields that change, or
  unchanged), under the row's lock (:func:`find_row`);
- a job template inside a resource is checked as a submitted job (:func:`check_template`);
- resources are listed a page at a time in (namespace, name) order (:func:`name_page`).

This module is core: it imports no planner, and every planner may import it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BaseModel, WithJsonSchema
from sqlalchemy import Connection, RowMapping, Select, Table, and_, or_, select

from jobserver.exceptions import InvalidRequest, JobServerError
from jobserver.names import IDENT
from jobserver.spec import (JobSpec, ModelT, Policy, Problem, StrictModel, field_path,
                            parse_model, validate_job, validation_message)

#: What a put did, or on a dry run would do.
CREATED, UPDATED, UNCHANGED = "created", "updated", "unchanged"
#: The most resources one page lists.
MAX_PAGE = 500


def matching(pattern: str, explained: str) -> tuple[AfterValidator, WithJsonSchema]:
    """What makes a string type match ``pattern`` whole (``Annotated[str, *matching(…)]``):
    refused as ``explained``, the words a user reads rather than the expression; the
    pattern in its JSON schema."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(explained)
        return value
    return (AfterValidator(check),
            WithJsonSchema({"type": "string", "pattern": f"^{pattern}$"}))


#: A namespace or a name: 1 to 64 letters, digits, '_', '.' or '-', never '/'.
Ident = Annotated[str, *matching(IDENT, "1 to 64 letters, digits, '_', '.' or '-', starting "
                                        "with a letter or digit (no '/')")]


def _utc(value: datetime) -> datetime:
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:  # 9999-12-31T23:00-05:00 is past datetime's last instant in UTC
        raise ValueError("out of range once converted to UTC") from None


#: A time with its offset, kept in UTC (a time without an offset is refused).
Instant = Annotated[AwareDatetime, AfterValidator(_utc)]


class NamespacedSpec(StrictModel):
    """A resource named ``namespace/name``; the namespace defaults to ``default``."""

    namespace: Ident = "default"
    name: Ident

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}/{self.name}"


def naming_fields(tags: Iterable[str] = ()) -> Problem:
    """How one of pydantic's errors reads in a refusal: ``{"field", "message"}``, the
    field's path without the discriminator ``tags`` of the model's unions (a
    trigger's ``time`` is no field a user writes). A refusal raised inside a
    validator, carrying its own details, keeps its own field."""
    dropped = frozenset(tags)

    def problem(error: Mapping[str, Any]) -> dict[str, str]:
        cause = (error.get("ctx") or {}).get("error")
        details = getattr(cause, "details", None)
        if isinstance(details, list) and details:
            return dict(details[0])
        loc = (part for part in error["loc"] if not (isinstance(part, str) and part in dropped))
        return {"field": field_path(loc), "message": validation_message(error)}
    return problem


def parse_resource(model: type[ModelT], body: bytes | str | Mapping[str, Any],
                   tags: Iterable[str] = ()) -> ModelT:
    """Parse a resource's body as ``model`` (see the module's docstring); every
    problem is in the :class:`InvalidRequest`'s details, the first in its message."""
    return parse_model(model, body, naming_fields(tags))


def check_template(job: JobSpec, policy: Policy, where: str) -> None:
    """Check a resource's job template as a submitted job is checked
    (:func:`jobserver.spec.validate_job`), its fields named below ``where``
    (``template.steps[0].argv[0]``): a template the engine would refuse is refused
    when the resource is saved, not when it first launches."""
    try:
        validate_job(job, policy)
    except InvalidRequest as exc:
        details = [{"field": f"{where}.{d['field']}", "message": d["message"]}
                   for d in exc.details or []]
        raise InvalidRequest(f"{where}.{exc.message}", details) from None


def digest(document: Any) -> str:
    """The SHA-256 of a JSON document's canonical form (sorted keys, no spaces,
    non-ASCII as is): equal documents, equal digests."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def model_digest(spec: BaseModel) -> str:
    """The :func:`digest` of a spec as stored (``model_dump(mode="json")``)."""
    return digest(spec.model_dump(mode="json"))


def find_row(conn: Connection, table: Table, lock: bool = True,
             **key: Any) -> RowMapping | None:
    """The row of ``table`` whose columns equal ``key``, or None; with ``lock``, held
    (``FOR UPDATE``) until the transaction ends on PostgreSQL, where two writers of
    one resource would otherwise interleave (SQLite's writes are serial anyway)."""
    query = select(table).where(*(table.c[column] == value for column, value in key.items()))
    if lock and conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return conn.execute(query).mappings().first()


def page_size(limit: int) -> int:
    """A page's size as asked, kept from 1 to :data:`MAX_PAGE`."""
    return max(1, min(limit, MAX_PAGE))


def name_page(table: Table, limit: int, namespace: str | None = None,
              after: tuple[str, str] | None = None) -> Select[Any]:
    """``table``'s resources in (namespace, name) order, those of ``namespace`` only
    when given, from just past ``after``: ``limit`` + 1 rows, the last telling that
    more follow (:func:`next_after`). A page never skips nor repeats a resource, however
    many are put or deleted between pages."""
    query = select(table).order_by(table.c.namespace, table.c.name).limit(limit + 1)
    if namespace is not None:
        query = query.where(table.c.namespace == namespace)
    if after is not None:
        query = query.where(or_(table.c.namespace > after[0],
                                and_(table.c.namespace == after[0], table.c.name > after[1])))
    return query


def next_after(rows: Sequence[RowMapping], limit: int) -> tuple[str, str] | None:
    """The ``after`` of the page following ``rows`` (a :func:`name_page`), None on the
    last."""
    return ((rows[limit - 1]["namespace"], rows[limit - 1]["name"]) if len(rows) > limit
            else None)


def found_row(conn: Connection, table: Table, missing: JobServerError, lock: bool = True,
              **key: Any) -> RowMapping:
    """The row :func:`find_row` finds; ``missing`` (a :class:`NotFound` naming the
    resource) raised when there is none."""
    row = find_row(conn, table, lock, **key)
    if row is None:
        raise missing
    return row


def plan_put(row: Mapping[Any, Any] | None, document: Mapping[str, Any], digest: str,
             enabled: bool | None = None) -> tuple[str, list[str]]:
    """What putting ``document`` (whose digest is ``digest``) over the stored ``row``
    (its ``spec`` and ``spec_hash``; None: there is none) changes: ``(change, the
    top-level fields that change)``. ``enabled`` (None: kept) adds ``enabled`` when it
    flips the row's flag. A spec whose JSON is equal but whose digest differs (stored
    by an older canonical form) is still a new spec, named ``spec``."""
    if row is None:
        return CREATED, []
    changed: list[str] = []
    if digest != row["spec_hash"]:
        old = row["spec"]
        changed = [key for key in {**document, **old} if document.get(key) != old.get(key)]
        changed = changed or ["spec"]
    if enabled is not None and enabled != bool(row["enabled"]):
        changed.append("enabled")
    return (UPDATED if changed else UNCHANGED), changed
