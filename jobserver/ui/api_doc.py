"""The API's reference in the dashboard: ``/ui/api`` renders the OpenAPI document.

``GET /api/v1/openapi.json`` needs a bearer token (every API route but ``/healthz``
does), which a browser does not send; a signed-in browser reads the same document
here instead: every route with its method, summary (which names its scope),
parameters, request body and answers, and the document itself as JSON at
``/ui/api.json``. Both need a session whose token has ``read``, as the JSON route
needs that scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import jsonify, render_template
from flask.typing import ResponseReturnValue

from jobserver.api.openapi import document
from jobserver.store.tokens import READ
from jobserver.ui.blueprint import blueprint
from jobserver.ui.pages import ui_page

METHODS = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True)
class Operation:
    """One route and method of the document, as the page lists it."""

    method: str
    path: str
    summary: str
    parameters: list[str]
    body: str | None
    responses: list[str]


def operations(doc: dict[str, Any]) -> list[Operation]:
    """Every operation of ``doc``, by path, then in :data:`METHODS` order."""
    found = []
    for path, item in sorted(doc["paths"].items()):
        for method in METHODS:
            if method in item:
                found.append(_operation(method, path, item[method]))
    return found


def _operation(method: str, path: str, spec: dict[str, Any]) -> Operation:
    parameters = [f"{p['name']} ({p['in']}{'' if p.get('required') else ', optional'})"
                  for p in spec.get("parameters", [])]
    body = spec.get("requestBody")
    return Operation(method.upper(), path, spec.get("summary", ""), parameters,
                     _schema_name(body) if body else None, sorted(spec.get("responses", {})))


def _schema_name(body: dict[str, Any]) -> str:
    """A request body's schema: the component it names, or ``JSON``."""
    content: dict[str, Any] = next(iter(body.get("content", {}).values()), {})
    ref = str(content.get("schema", {}).get("$ref", ""))
    return ref.rsplit("/", 1)[-1] if ref else "JSON"


@blueprint.get("/api")
@ui_page(READ)
def api_reference() -> ResponseReturnValue:
    doc = document()
    return render_template("ui/api_doc.html", info=doc["info"],
                           operations=operations(doc))


@blueprint.get("/api.json")
@ui_page(READ)
def api_document() -> ResponseReturnValue:
    """The OpenAPI document itself, for a signed-in browser."""
    return jsonify(document())
