"""Schemathesis against the OpenAPI document the app serves, on SQLite and PostgreSQL.

Every operation of ``/api/v1/openapi.json`` is called with generated requests, valid
and invalid (schemathesis' examples, coverage and fuzzing phases), under a token with
every scope; then its stateful phase follows the document's links from submitted jobs
to their pages, events and operations. No response may be a 5xx, and every response
must match the document: a documented status code and content type, the documented
headers, and a body matching the (exact) schema. Examples are bounded so that both
stores finish in about a minute (:data:`EXAMPLES`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.generation.modes import GenerationMode
from schemathesis.checks import (content_type_conformance, not_a_server_error,
                                 response_headers_conformance, response_schema_conformance,
                                 status_code_conformance)

from jobserver.api import create_app
from jobserver.config import load_config
from jobserver.store import Store
from tests.conftest import _empty

TOKEN = "fuzz-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance,
          content_type_conformance, response_headers_conformance]


def _app(store: Store, data_dir: Path):
    environ = {"JOBSERVER_DATA_DIR": str(data_dir), "JOBSERVER_API__TOKENS": TOKEN,
               # the fuzzer submits as fast as it can; the limiter has tests of its own
               "JOBSERVER_API__SUBMIT_RATE": "1000000", "JOBSERVER_API__SUBMIT_BURST": "1000000"}
    return create_app(load_config(environ=environ), store=store)


def _served_schema():
    """The document as the app serves it (fetching it touches no database)."""
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(f"sqlite:///{scratch}/never-used.db")
        try:
            return schemathesis.openapi.from_wsgi("/api/v1/openapi.json",
                                                  _app(store, Path(scratch)), headers=AUTH)
        finally:
            store.dispose()


#: The schedules' create and replace bodies, fuzzed with valid bodies only (below).
RECURSIVE_BODIES = [("POST", "/api/v1/schedules"), ("PUT", "/api/v1/schedules/{namespace}/{name}")]
schema = _served_schema()
for _method, _path in RECURSIVE_BODIES:
    schema = schema.exclude(method=_method, path=_path)


@pytest.fixture
def app(store: Store, tmp_path: Path):
    return _app(store, tmp_path / "data")


#: Generated examples per operation, beside schemathesis' deterministic coverage cases
#: (boundary and invalid values of every field), which each run has whole. They are
#: derandomized, so SQLite's are PostgreSQL's first 12: the rest would replay the same
#: requests on the second store, where PostgreSQL (the production store) runs them all.
EXAMPLES = {"postgres": 30, "sqlite": 12}


@schema.parametrize()
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
@settings(max_examples=EXAMPLES["postgres"], deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(app, case) -> None:
    case.call_and_validate(app=app, headers=AUTH, checks=CHECKS)


@schema.parametrize()
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@settings(max_examples=EXAMPLES["sqlite"], deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document_on_sqlite_too(app, case) -> None:
    case.call_and_validate(app=app, headers=AUTH, checks=CHECKS)


def _recursive_bodies():
    """The operations whose body holds the recursive trigger schema, generated with
    valid bodies only. Schemathesis' negative mode failed to build such a body
    ("Cannot generate an array with 1 demanded elements", in its syntax fuzzing)
    deterministically in CI's full two-worker run and never in a run of this file; its
    invalid bodies are covered by tests/unit/test_schedule_spec.py (each 422 with its
    field) and tests/integration/test_schedules_api.py."""
    served = _served_schema()
    served.config.generation.update(modes=[GenerationMode.POSITIVE])
    return served.include(path_regex=r"^/api/v1/schedules(/\{namespace\}/\{name\})?$",
                          method=["POST", "PUT"])


recursive = _recursive_bodies()


@recursive.parametrize()
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_schedule_bodies_conform_to_the_openapi_document(app, case) -> None:
    case.call_and_validate(app=app, headers=AUTH, checks=CHECKS)


def test_workflows_following_links_conform(app, store: Store) -> None:
    """Schemathesis' stateful phase: submit, then follow the document's links to the
    job's page, events and operator actions with the real job ids."""

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            _empty(store)  # every scenario from the same empty store: Hypothesis replays

        def get_call_kwargs(self, case):
            return {"app": app, "headers": AUTH}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

    Workflow.run(settings=settings(max_examples=40, stateful_step_count=10, deadline=None,
                                   derandomize=True, suppress_health_check=list(HealthCheck)))
