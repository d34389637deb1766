"""Signing in, and the cluster page of a real three-node cluster."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from jobserver import __version__
from tests.browser.conftest import NODES, UiCluster, expect, shot, sign_in
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


def test_the_cluster_page_shows_each_nodes_health_and_the_last_hour(
        page: Any, cluster: UiCluster) -> None:
    """Per node: heartbeat age, busy slots of its capacity and its version; below,
    the jobs by state and the jobs finished in the last hour, a job just run among
    them."""
    job_id = cluster.api.submit({"name": "counted", "steps": [{"name": "s", "type": "noop"}]})
    cluster.api.wait_job(job_id)
    sign_in(page, TOKEN, "/ui/cluster")
    for node in NODES:
        cells = page.locator(f"table.nodes tr[data-node='{node}'] td").all_inner_texts()
        _, _, state, heartbeat, running, version, host, _ = cells
        assert state == "alive", cells
        assert re.fullmatch(r"\d+(\.\d+)? ?(ms|s) ago", heartbeat), cells
        busy, capacity = (int(n) for n in re.findall(r"\d+", running))
        assert 0 <= busy <= capacity and capacity > 0, cells
        assert version == __version__, cells
        assert re.search(r"pid \d+", host), cells
    assert int(page.inner_text("[data-count=SUCCEED]").replace(",", "").rstrip("+")) >= 1
    assert int(page.get_attribute("[data-finished]", "data-finished")) >= 1
    assert page.locator("svg.chart rect.bar").count() >= 1
    shot(page, "cluster-health")


def test_the_pages_read_on_a_phone_in_the_dark(new_page: Callable[..., Any],
                                               cluster: UiCluster) -> None:
    phone = new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                     has_touch=True, color_scheme="dark", timezone_id="Asia/Tokyo",
                     locale="en-GB")
    job_id = cluster.api.submit({"name": "phone", "steps": [{"name": "s", "type": "noop"}]})
    cluster.api.wait_job(job_id)
    sign_in(phone, TOKEN, "/ui/cluster")
    for path in ("/ui/cluster", "/ui/jobs", f"/ui/jobs/{job_id}"):
        phone.goto(path)
        # Nothing wider than the screen: tables scroll inside their cards.
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390, path
        shot(phone, path.strip("/").replace("/", "-") + "-phone-dark")
    background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 19, 24)", "the dark scheme follows the system setting"
    # Times show in the viewer's zone (Tokyo, UTC+9), with UTC on hover.
    created = phone.locator("dl.props time").first
    utc = created.get_attribute("datetime")
    # Shown to the second; the title holds the stored precision.
    assert created.get_attribute("title") == utc.rstrip("Z").replace("T", " ") + " UTC"
    hour = (int(utc[11:13]) + 9) % 24
    expect(created).to_have_text(re.compile(rf"\b{hour:02d}:{utc[14:16]}:{utc[17:19]}\b"))
