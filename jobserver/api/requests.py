"""Reading requests the same way in every blueprint: query strings checked by a
pydantic model (unknown parameters refused), JSON object bodies, empty bodies, and
the id cursors of pages. Every failure is an :class:`InvalidRequest` (422) or
:class:`MalformedRequest` (400) naming the field.

Two limits hold for every route, before it runs (:func:`check_body`): a body larger
than ``api.max_body_bytes`` (or a route's own :func:`body_limit`) is a 413, and a JSON
body nested deeper than :data:`MAX_JSON_DEPTH` a 400 saying so."""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Any, TypeVar

from flask import current_app, request
from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from jobserver.exceptions import InvalidRequest, MalformedRequest
from jobserver.spec import field_path

#: Ids are BIGINT; a larger cursor matches nothing.
MAX_ID = 2**63 - 1
ID_CURSOR = r"^[1-9][0-9]{0,18}$"
#: How deep a JSON body may nest arrays and objects. Well below where the parsers give
#: up (pydantic at 200 levels, Python's json at its recursion limit), so a deeper body
#: is refused by name instead of as "not valid JSON" or an internal error.
MAX_JSON_DEPTH = 100

#: A JSON string; one never closed runs to the end (a parser stops there anyway), so
#: that no quote is scanned twice: the scan stays linear on any input.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes

Query = TypeVar("Query", bound=BaseModel)
View = TypeVar("View", bound=Callable[..., Any])


def body_limit(max_bytes: int) -> Callable[[View], View]:
    """Let a route take bodies of up to ``max_bytes`` (never less than
    ``api.max_body_bytes``); put it below the route decorator."""
    def mark(view: View) -> View:
        setattr(view, "max_body_bytes", max_bytes)
        return view
    return mark


def check_path() -> None:
    """Before every route: a path parameter holding NUL names nothing (and PostgreSQL
    refuses it in text), so it is a 422 naming the parameter, not a store error."""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and "\x00" in value:
            raise InvalidRequest(f"{name}: must not contain NUL characters",
                                 [{"field": name, "message": "NUL character in the path"}])


def check_body() -> None:
    """Before every route: refuse a body over the route's limit (413, even when the
    route would not read it) or a JSON body nested too deep (400). The body read here
    is cached, so the route reads it again for free."""
    view = current_app.view_functions.get(request.endpoint or "")
    limit = max(current_app.config["MAX_CONTENT_LENGTH"] or 0,
                getattr(view, "max_body_bytes", 0))
    request.max_content_length = limit
    if request.content_length is not None and request.content_length > limit:
        raise RequestEntityTooLarge()
    if request.content_length is None and request.environ.get("wsgi.input_terminated"):
        _read_streamed_body(limit)
    if request.is_json and json_depth(request.get_data()) > MAX_JSON_DEPTH:
        raise MalformedRequest(f"request body is nested deeper than {MAX_JSON_DEPTH} levels",
                               [{"field": "body", "message": "nested deeper than "
                                                            f"{MAX_JSON_DEPTH} levels"}])


def _read_streamed_body(limit: int) -> None:
    """A body without a length (chunked; the server ends the stream) is read now, up
    to one byte past ``limit``: werkzeug stops such a stream at the limit without a
    word, which left a truncated body for the route (a 400 "not valid JSON" instead
    of the 413). The body is cached, so the route reads it again for free; this is
    the stream's first read (no hook before this one reads the body). A body the
    server cannot read (a malformed chunk) is a 400 naming the body."""
    request.max_content_length = limit + 1
    try:
        size = len(request.get_data())
    except HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the server's reader raises
        raise MalformedRequest(f"request body: cannot be read ({type(exc).__name__})",
                               [{"field": "body", "message": "malformed or cut short"}]
                               ) from None
    finally:
        request.max_content_length = limit
    if size > limit:
        raise RequestEntityTooLarge()


def json_depth(raw: bytes) -> int:
    """How deeply ``raw`` nests arrays and objects, counting the brackets outside
    strings. Every step is a loop in C, linear in the body's size (a 1 MiB body of
    nothing but brackets takes 0.1 s), and on a malformed body it counts at least as
    deep as a parser gets before it fails."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(array("b", brackets.translate(_SIGNS))), default=0)


def parse_query(model: type[Query], blank_is_absent: bool = False, **extra: Any) -> Query:
    """The query string (each parameter once) as ``model``; ``extra``: values read
    otherwise (a repeated parameter), validated with the rest. ``blank_is_absent``:
    a parameter sent empty counts as not sent (an HTML form's empty fields)."""
    args = {name: value for name, value in request.args.to_dict().items()
            if value != "" or not blank_is_absent}
    try:
        return model.model_validate({**args, **extra})
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
    return parse_json(request.get_data(cache=False))


def parse_json(raw: bytes) -> Any:
    """``raw`` parsed, or :class:`MalformedRequest` naming what is wrong with it."""
    try:
        return json.loads(raw)
    except ValueError:  # also bytes that are not UTF-8
        raise MalformedRequest("request body is not valid JSON",
                               [{"field": "body", "message": "malformed JSON"}]) from None
    except RecursionError:  # check_body refuses these first; this is the backstop
        raise MalformedRequest(f"request body is nested deeper than {MAX_JSON_DEPTH} levels",
                               [{"field": "body", "message": "nested too deep"}]) from None


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
