"""Signing in, and the cluster page of a real three-node cluster."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import NODES, UiCluster, shot, sign_in
from tests.integration.nodes import TOKEN


def test_sign_in_and_see_three_live_nodes(page: Any, cluster: UiCluster) -> None:
    page.goto("/ui/cluster")
    assert page.url.endswith("/ui/sign-in?next=/ui/cluster")
    shot(page, "sign-in")
    sign_in(page, TOKEN, "/ui/cluster")
    assert page.url.endswith("/ui/cluster")
    assert page.inner_text(".who .token") == "config token #1"
    rows = page.locator("table.nodes tbody tr")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.node)")) == list(NODES)
    alive = page.locator("table.nodes [data-alive=true]")
    assert alive.count() == 3
    active = cluster.api.cluster()["active"]
    assert page.inner_text("[data-fact=active]") == active
    assert page.locator(f"tr[data-node='{active}'] .role-active").count() == 1
    assert page.inner_text("[data-fact=mode]") == "single"
    assert page.inner_text("[data-fact=lock]") == "postgres"
    assert page.inner_text("[data-fact=alive]") == "3 / 3"
    shot(page, "cluster")
