"""A planner from another package plugs in through the seam alone.

``tests/data/tiny_planner`` is a package with an entry point in the group
``jobserver.planners`` (a ``.dist-info`` beside it, as ``pip install`` leaves one).
A real ``jobserver serve`` with it on ``PYTHONPATH`` serves its route under the scope
it declares, shows its page in the dashboard's navigation, and runs its loop under
the planner seat; the core names it nowhere.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import wait_for
from tests.integration.attack import AttackNode, unique
from tests.integration.attack import attack_node  # noqa: F401 - the fixture
from tests.docs_examples import ROOT

TINY = ROOT / "tests" / "data" / "tiny_planner"


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(TINY),
                                                        os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)
def test_a_planner_installed_by_entry_point_has_its_route_page_and_loop(
        attack_node: AttackNode) -> None:
    node = attack_node
    # Its loop acts under the planner seat; its route reads what the loop did.
    rounds = wait_for(lambda: node.call("GET", "/api/v1/tiny", token="read")[1]["rounds"] >= 3
                      and node.call("GET", "/api/v1/tiny", token="read")[1]["rounds"],
                      20, 0.1, "the tiny planner's loop to make rounds")
    assert rounds >= 3
    # The scope it declared is enforced like any route's.
    node.tokens["fence"] = node.store.tokens.create(unique("fence-only"), ["fence"])[1]
    status, body = node.call("GET", "/api/v1/tiny", token="fence")
    assert status == 403 and body["error"]["details"]["required_scope"] == "read", body
    # Its page is on the dashboard, behind sign-in, and in the navigation.
    status, page = node.browser("read").open("/ui/tiny")
    assert status == 200 and "The tiny planner" in page
    assert 'href="/ui/tiny"' in page and 'href="/ui/schedules"' in page
