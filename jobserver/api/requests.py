"""Reading requests the same way in every blueprint: query strings checked by a
pydantic model (unknown parameters refused), JSON object bodies, empty bodies, and
the id cursors of pages. Every failure is an :class:`InvalidRequest` (422) or
:class:`MalformedRequest` (400) naming the field."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flask import request
from pydantic import BaseModel, ValidationError

from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.spec import field_path

#: Ids are BIGINT; a larger cursor matches nothing.
MAX_ID = 2**63 - 1
ID_CURSOR = r"^[1-9][0-9]{0,18}$"

Query = TypeVar("Query", bound=BaseModel)


def parse_query(model: type[Query], **extra: Any) -> Query:
    """The query string (each parameter once) as ``model``; ``extra``: values read
    otherwise (a repeated parameter), validated with the rest."""
    try:
        return model.model_validate({**request.args.to_dict(), **extra})
    except ValidationError as exc:
        details = [{"field": field_path(e["loc"]),
                    "message": "unknown query parameter" if e["type"] == "extra_forbidden"
                    else e["msg"]} for e in exc.errors()]
        raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details) from None


def json_object() -> dict[str, Any]:
    """The request's JSON object (anything else is left to the caller's parser)."""
    body = json_value()
    if not isinstance(body, dict):
        raise InvalidRequest("body: expected a JSON object",
                             [{"field": "body", "message": "expected a JSON object"}])
    return body


def json_value() -> Any:
    """The request's JSON body, whatever its type."""
    if not request.is_json:
        raise InvalidRequest("Content-Type must be application/json",
                             [{"field": "Content-Type", "message": "expected application/json"}])
    try:
        return json.loads(request.get_data(cache=False))
    except ValueError:  # also bytes that are not UTF-8
        raise MalformedRequest("request body is not valid JSON",
                               [{"field": "body", "message": "malformed JSON"}]) from None


def no_body(action: str) -> None:
    if request.get_data(cache=False).strip() not in (b"", b"{}"):
        raise InvalidRequest(f"{action} takes no request body",
                             [{"field": "body", "message": "must be empty or {}"}])


def id_cursor(cursor: str | None) -> int | None:
    """A page cursor (an id as text) as a number; None for the first page."""
    return min(int(cursor), MAX_ID) if cursor else None


def named_as_url(body: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """A PUT body with the URL's namespace and name filled in; when the body gives
    them, they must be the URL's."""
    for field, value in (("namespace", namespace), ("name", name)):
        if body.setdefault(field, value) != value:
            raise InvalidRequest(f"{field}: does not match the URL ({value!r})",
                                 [{"field": field, "message": f"must be {value!r} as in "
                                                            "the URL, or left out"}])
    return body
