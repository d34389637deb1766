"""What one request may expand, tried as an attacker would against a real ``jobserver
serve`` on each store (issue 33, items 5, 9 and 10).

* A read token's ``views?dependencies=true`` of a wide pattern grew a worker to 866 MB:
  a request expands at most ``views.max_partitions`` view partitions, dependencies
  included, counted as they are made, and is otherwise a 422 naming ``pattern`` and the
  limit; ``materialize`` is bound by the same count and creates nothing.
* A NUL in a pattern was a 500 on PostgreSQL: the pattern parser refuses control
  characters, for every route that takes a pattern.
* Consumers: a dataset has at most ``datasets.max_consumers`` (default 20).

The node runs the shipped ``examples/views.yaml`` with ``views.max_partitions`` = 500,
so that a small pattern proves the bound (a year of ten shops' exports, 120 partitions,
reads 11,072 more).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from jobserver.datasets.tables import consumers
from jobserver.store.tables import jobs
from jobserver.views.tables import view_partitions
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "views.yaml"
LIMIT = 500
SHOPS = "e(" + ",".join(f"SHOP{n:02d}" for n in range(1, 11)) + ")"
#: The issue's pattern: ten shops over a hundred years, 1.1 M partitions with dependencies.
CENTURY = f"app.eci.datamart/SearchExport/{SHOPS}/rym(191501-201412)"
#: 120 partitions addressed, 11,192 with their dependencies.
A_YEAR = f"app.eci.datamart/SearchExport/{SHOPS}/rym(201401-201412)"
#: The issue's pattern, of a view whose parameter takes any text of its own pattern.
NUL = "app.demo/Many/a\x00b"
MANY = {"name": "app.demo/Many", "transformation": "noop", "location": "many/${p}",
        "parameters": [{"name": "p", "type": "string", "pattern": ".+"}],
        "structure": {"fields": [{"name": "id", "type": "bigint"}]}}


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_VIEWS__MAX_PARTITIONS": str(LIMIT)}


@pytest.fixture(scope="module")
def node(attack_node: AttackNode) -> AttackNode:  # noqa: F811
    for document in [*yaml.safe_load_all(EXAMPLES.read_text()), MANY]:
        status, reply = attack_node.call("PUT", f"/api/v1/view-definitions/{document['name']}",
                                         document)
        assert status in (200, 201), reply
    return attack_node


def refused(status: int, reply: Any, expected: int = 422) -> dict[str, Any]:
    """The error of a refused request: JSON, never a traceback."""
    assert status == expected, (status, reply)
    assert isinstance(reply, dict) and "Traceback" not in str(reply), reply
    return reply["error"]


def nothing_made(node: AttackNode) -> None:
    with node.store.tx.read() as conn:
        assert conn.execute(select(func.count()).select_from(jobs)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(view_partitions)
                            ).scalar_one() == 0


def views(pattern: str, **query: str) -> str:
    return "/api/v1/views?" + urllib.parse.urlencode({"pattern": pattern, **query})


# -- 5. what one request expands ----------------------------------------------------------
def test_the_dependencies_of_a_wide_pattern_are_refused_naming_the_limit(
        node: AttackNode) -> None:
    failure = refused(*node.call("GET", views(A_YEAR, dependencies="true"), token="read"))
    [detail] = failure["details"]
    assert detail["field"] == "pattern" and detail["limit"] == LIMIT
    assert (f"more than {LIMIT} view partitions with their dependencies; at most {LIMIT} "
            "per request (views.max_partitions)") in detail["message"]
    # The issue's own pattern: counted before anything is built.
    failure = refused(*node.call("GET", views(CENTURY, dependencies="true"), token="read"))
    assert "12,000 view partitions, more than the limit of 500 per request " \
           "(views.max_partitions)" in failure["message"]
    # The addressed partitions alone fit, and are listed a page at a time.
    status, page = node.call("GET", views(A_YEAR, limit="100"), token="read")
    assert status == 200 and len(page["views"]) == 100 and page["next_offset"] == 100
    status, rest = node.call("GET", views(A_YEAR, limit="100", offset="100"), token="read")
    assert status == 200 and len(rest["views"]) == 20 and rest["next_offset"] is None
    assert rest["overview"] == {"receive": 120}
    nothing_made(node)


@pytest.mark.parametrize("mode", ["DEFAULT", "RESET_TRANSFORMATION_CHECKSUMS"])
def test_materialize_of_the_same_pattern_is_refused_and_makes_nothing(
        node: AttackNode, mode: str) -> None:
    for plan in (True, False):
        failure = refused(*node.call("POST", "/api/v1/views/materialize",
                                     {"pattern": A_YEAR, "mode": mode, "plan": plan},
                                     "submit"))
        assert failure["details"][0]["field"] == "pattern"
        assert "(views.max_partitions)" in failure["message"]
    quoted = urllib.parse.quote(A_YEAR, safe="/")
    refused(*node.call("GET", f"/api/v1/materialize/{quoted}?mode={mode}", token="submit"))
    refused(*node.call("POST", "/api/v1/views/materialize", {"pattern": CENTURY}, "submit"))
    status, page = node.browser("submit").open(
        "/ui/views/materialize?" + urllib.parse.urlencode({"pattern": A_YEAR, "mode": mode}))
    assert status == 422 and "views.max_partitions" in page, (status, page[:300])
    nothing_made(node)


# -- 9. control characters in a pattern ---------------------------------------------------
def test_a_nul_in_a_pattern_is_a_422_naming_pattern_on_every_route(node: AttackNode) -> None:
    quoted = urllib.parse.quote(NUL, safe="/")  # a%00b
    attempts = [
        node.call("GET", f"/api/v1/views?pattern={quoted}", token="read"),
        node.call("GET", f"/api/v1/views?pattern={quoted}&dependencies=true", token="read"),
        node.call("POST", "/api/v1/views/materialize", {"pattern": NUL}, "submit"),
        node.call("POST", "/api/v1/views/materialize", {"pattern": NUL, "plan": True},
                  "submit"),
        node.call("GET", f"/api/v1/materialize/{quoted}?plan=true", token="submit"),
        node.call("POST", "/api/v1/views/invalidate", {"pattern": NUL}, "operate"),
        node.call("POST", "/api/v1/views/invalidate", {"pattern": quoted}, "operate"),
        node.call("POST", "/api/v1/views/materialize", {"pattern": quoted}, "submit"),
    ]
    for status, reply in attempts:
        failure = refused(status, reply)
        assert failure["details"][0]["field"] == "pattern"
        # The parser's words; a NUL in a URL path is refused before any route runs.
        assert "control character U+0000" in failure["message"] \
            or "must not contain NUL" in failure["message"]
        assert "\x00" not in failure["message"]
    nothing_made(node)


# -- 10. consumers per dataset ------------------------------------------------------------
def test_the_21st_consumer_of_a_dataset_is_refused(node: AttackNode) -> None:
    name = unique("raw")
    status, reply = node.call("POST", "/api/v1/datasets", {
        "name": name, "key": [{"name": "hour", "type": "int"}]}, "submit")
    assert status == 201, reply
    base = f"/api/v1/datasets/default/{name}/consumers"
    for index in range(20):
        status, reply = node.call("PUT", f"{base}/c{index:02d}",
                                  {"filter": ["meta.source = crawler"]}, "submit")
        assert status == 201, reply
    for dry_run in ("?dry_run=true", ""):
        failure = refused(*node.call("PUT", f"{base}/c20{dry_run}", {}, "submit"), 409)
        [detail] = failure["details"]
        assert detail["field"] == "name" and detail["limit"] == 20
        assert "datasets.max_consumers" in detail["message"]
    # A consumer there may still change.
    status, reply = node.call("PUT", f"{base}/c00", {"filter": ["meta.source = feed"]},
                              "submit")
    assert (status, reply["change"]) == (200, "updated")
    with node.store.tx.read() as conn:
        assert conn.execute(select(func.count()).select_from(consumers)
                            .where(consumers.c.name == "c20")).scalar_one() == 0
    status, listed = node.call("GET", base, token="read")
    assert status == 200 and len(listed["consumers"]) == 20
    assert all(item["lag_capped"] is False for item in listed["consumers"])
