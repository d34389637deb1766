"""The planners' pages in Chromium against the real three-node cluster: schedules,
datasets, views and batches put in through its API (the examples' definitions), what
a user sees on each page, and each page's action."""

from __future__ import annotations

import io
import re
from pathlib import Path
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from jobserver.apply import apply_documents, load
from jobserver.client import Client
from tests.browser.conftest import PageWatch, UiCluster, expect, forced_post, shot, sign_in
from tests.helpers import wait_for
from tests.integration.nodes import TOKEN

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def apply(cluster: UiCluster, name: str) -> None:
    """An example file, applied as ``jobserver apply`` does."""
    documents = load((EXAMPLES / name).read_text())
    assert apply_documents(Client(cluster.url, TOKEN), documents, out=io.StringIO()) == 0


def test_schedules_in_words_and_the_enabled_switch(page: Any, cluster: UiCluster) -> None:
    apply(cluster, "schedules.yaml")
    cluster.api.call("PUT", "/api/v1/schedules/default/ui-ticker", {
        "enabled": True, "template": {"name": "ui-tick", "steps": [{"name": "t", "type": "noop"}]},
        "trigger": {"type": "time", "interval": 2}}, expect=(200, 201))
    sign_in(page, TOKEN, "/ui/schedules")
    nightly = page.locator("tr[data-schedule='default/nightly-extract']")
    assert nightly.locator("[data-trigger]").inner_text() == "every day at 02:30 Europe/Berlin"
    assert nightly.locator("time").get_attribute("datetime").endswith(":30:00Z")
    hourly = page.locator("tr[data-schedule='default/hourly-compaction'] button.switch")
    assert hourly.get_attribute("aria-checked") == "false"
    hourly.click()  # enabling asks nothing
    page.wait_for_selector("tr[data-schedule='default/hourly-compaction'] "
                           "button.switch[aria-checked=true]")
    assert cluster.store.schedules.get("default", "hourly-compaction").enabled
    shot(page, "schedules")

    page.goto("/ui/schedules/default/ui-ticker")
    assert page.inner_text("[data-trigger]") == "every 2 seconds"
    page.locator("tr[data-outcome=launched]").first.wait_for()  # the page is live
    page.locator("table.schedule-jobs .badge", has_text="SUCCEED").first.wait_for()
    shot(page, "schedule")
    page.click(".page-head button.switch")  # disabling asks first
    page.click("#confirm button[value=ok]")
    page.wait_for_selector(".page-head button.switch[aria-checked=false]")
    assert not cluster.store.schedules.get("default", "ui-ticker").enabled


def test_a_datasets_partitions_filtered_and_its_failed_partitions(
        page: Any, cluster: UiCluster, page_watch: PageWatch) -> None:
    apply(cluster, "datasets.yaml")
    api = cluster.api
    api.call("PUT", "/api/v1/datasets/default/raw/consumers/ui-audit",
             {"filter": ["hour >= 22"], "processing_limit": 5, "max_retries": 0},
             expect=(200, 201))
    api.call("POST", "/api/v1/datasets/default/raw/partitions", {"if_absent": True, "partitions": [
        {"key": {"date": day, "hour": hour}, "location": f"s3://raw/{day}/{hour:02d}",
         "metadata": {"rows": hour * 100}}
        for day, hours in (("2026-11-01", 24), ("2026-11-02", 4)) for hour in range(hours)]},
        expect=(200, 201))
    job = api.submit({"name": "ui-audit", "inputs": [{"dataset": "raw", "consumer": "ui-audit"}],
                      "steps": [{"name": "read", "type": "shell",
                                 "argv": ["sh", "-c", "echo unreadable >&2; exit 3"]}]})
    api.wait_job(job, ("ERROR",))

    sign_in(page, TOKEN, "/ui/datasets/default/raw")
    page.fill("#where-1", "hour >= 20")
    page.select_option("#range-field", "date")
    page.fill("#range-from", "2026-11-01")
    page.fill("#range-to", "2026-11-01")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r".*where=hour.*"))
    hours = page.locator("table.partitions tbody tr td:nth-child(2)").all_inner_texts()
    assert hours == ["23", "22", "21", "20"]
    audit = page.locator("[data-consumer=ui-audit]")
    assert audit.locator("[data-count=FAILED]").inner_text() == "2"
    failed = audit.locator("table.failed tbody tr")
    assert failed.count() == 2 and "hour=22" in failed.first.inner_text().replace("\n", "")
    assert failed.first.locator(".reason").inner_text().strip()  # the run's error
    shot(page, "dataset")

    page_watch.allow(r"status of 422")  # a refused filter is a 422 page
    page.fill("#where-1", "shop = berlin")
    page.click("form.filters button[type=submit]")
    assert "'shop' is not a key field" in page.inner_text(".problems")


def _flag(root: Path, *parts: str) -> None:
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_SUCCESS").touch()


def test_the_views_grid_and_materialize_after_the_plan(page: Any, cluster: UiCluster,
                                                       page_watch: PageWatch) -> None:
    apply(cluster, "views.yaml")
    root = cluster.harness.tmp_path / "data" / "views"
    for day in ("01", "02"):  # the week before has no data: its sources are no-data
        _flag(root, "source", "search", "SHOP10", f"201505{day}")
    for env in ("prod", "staging"):
        _flag(root, "source", "shops", env)
    pattern = "app.eci.stage/e(Search,SearchWeekly)/SHOP10/rymd(20150501-20150502)"
    sign_in(page, TOKEN, f"/ui/views?pattern={quote(pattern)}")
    rows = page.locator("table.views-grid tbody tr")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.row)") == [
        "app.eci.stage/Search/SHOP10", "app.eci.stage/SearchWeekly/SHOP10"]
    cells = page.locator("a.cell")
    assert cells.evaluate_all("cells => cells.map(c => c.dataset.state + ' ' + "
                              "c.dataset.action)") == ["receive transform"] * 4
    cell = "a.cell[data-path='app.eci.stage/{}/SHOP10/2015/05/0{}']"
    assert "never transformed" in page.get_attribute(cell.format("SearchWeekly", 2), "title")

    page.click("a[data-action=materialize]")
    # The plan is computed as the page is served: wait for it, not for the URL.
    plan = page.locator("table.plan tbody tr")
    expect(plan.filter(has=page.locator("[data-state=transform]"))).to_have_count(10)
    expect(plan.filter(has_text="no _SUCCESS flag")).to_have_count(6)  # 2015-04-25 … 30
    shot(page, "plan")
    page.click("[data-confirm-plan]")
    expect(page.locator("section.card h2")).to_have_text(re.compile(r"^Done: 10 jobs"))
    page.click("text=Back to the grid")
    for view, day in (("Search", 1), ("Search", 2), ("SearchWeekly", 1), ("SearchWeekly", 2)):
        page.wait_for_selector(cell.format(view, day) + "[data-state=materialized]",
                               timeout=30_000)  # live: the grid follows the jobs
    assert page.get_attribute(cell.format("SearchWeekly", 2), "data-action") == "skip"
    shot(page, "views")

    page_watch.allow(r"status of 422")
    page.fill("#pattern", "app.eci.stage/Search/SHOP10/rymd(2015")
    page.click("form.filters button[type=submit]")
    assert "unbalanced parenthesis" in page.inner_text("[data-problem]")


BATCH_CONFIG = {
    "valid_systems": ["ORDER"], "valid_stages": ["STG", "FND", "SNAPSHOT"],
    "valid_locations": ["IN"],
    "system_stage_mapping": [{"system": "ORDER", "stages": ["STG", "FND", "SNAPSHOT"],
                              "start_date": "2024-01-01"}],
    "job_group_mapping": [{"system": "ORDER", "stage": stage, "job_group": [f"{stage}_G"]}
                          for stage in ("STG", "FND", "SNAPSHOT")],
    "job_groups": [{"name": "STG_G", "jobs": [{"name": "extract", "type": "noop"},
                                             {"name": "load", "type": "noop"}]},
                   {"name": "FND_G", "jobs": [{"name": "dedup", "type": "noop"}]},
                   {"name": "SNAPSHOT_G", "jobs": [{"name": "snapshot", "type": "shell",
                                                    "argv": ["sh", "-c", "exit 1"]}]}],
    "stage_pairs": [["FND", "SNAPSHOT"]], "catch_up_limit": 2}


def _run(cluster: UiCluster, **fields: Any) -> dict[str, Any]:
    run = cluster.api.call("POST", "/api/v1/batches/run", {
        "system": "ORDER", "location": "IN", **fields}, expect=(200, 201))
    return wait_for(lambda: (found := cluster.api.get(f"/api/v1/batches/runs/{run['id']}"))
                    ["status"] != "RUNNING" and found, 30, 0.2, "the batch run to end")


def test_the_control_table_grid_and_a_batchs_audit(page: Any, cluster: UiCluster) -> None:
    cluster.api.call("PUT", "/api/v1/batches/configs/ui-orders", BATCH_CONFIG, expect=(200, 201))
    assert _run(cluster, stage="STG", watermark="2024-01-02")["status"] == "SUCCESS"
    assert _run(cluster, stage="FND")["status"] == "FAILED"  # SNAPSHOT's job fails
    sign_in(page, TOKEN, "/ui/batches?system=ORDER")
    first = page.locator("tr[data-row='ORDER/IN'] a.stages[data-date='2024-01-01']")
    statuses = first.locator("[data-stage]").evaluate_all(
        "bars => bars.map(b => b.dataset.stage + ' ' + b.dataset.stageStatus)")
    assert statuses == ["STG SUCCESS", "FND SUCCESS", "SNAPSHOT FAILED"]
    second = page.locator("tr[data-row='ORDER/IN'] a.stages[data-date='2024-01-02']")
    assert second.get_attribute("data-status") == "RUNNING"  # STG done, FND not started
    shot(page, "batches")
    first.click()
    audit = page.locator("table.audit tbody tr")
    assert audit.first.get_attribute("data-instance") == page.url.rsplit("/", 1)[1]
    snapshot = audit.filter(has_text="snapshot").last
    assert "FAILED" in snapshot.inner_text()
    assert page.locator("tr[data-stage=SNAPSHOT] .reason").inner_text().strip()
    shot(page, "batch")


def test_the_planner_pages_fit_a_phone_in_dark_mode(new_page: Callable[..., Any],
                                                    cluster: UiCluster) -> None:
    """At 390 px nothing is wider than the screen: tables become cards, the grids
    scroll inside their card; the system's dark scheme is followed."""
    apply(cluster, "schedules.yaml")
    apply(cluster, "views.yaml")
    phone = new_page(viewport={"width": 390, "height": 844}, color_scheme="dark",
                     is_mobile=True, has_touch=True)
    sign_in(phone, TOKEN, "/ui/schedules")
    background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 19, 24)"  # ui.css's dark --bg
    pattern = quote("app.eci.stage/Search/SHOP10/rymd(20150501-20150531)")
    for name, path in (("schedules", "/ui/schedules"), ("views", f"/ui/views?pattern={pattern}"),
                       ("datasets", "/ui/datasets"), ("batches", "/ui/batches")):
        phone.goto(path)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide"
        shot(phone, f"phone-{name}")


def test_a_read_only_token_sees_the_planners_and_is_offered_no_action(
        page: Any, cluster: UiCluster, make_token: Callable[..., str],
        page_watch: PageWatch) -> None:
    """A ``read`` token sees every planner page with its data, gets a badge where an
    operator gets the enabled switch and no materialize or invalidate, and a forced
    POST changes nothing."""
    apply(cluster, "schedules.yaml")
    apply(cluster, "datasets.yaml")
    apply(cluster, "views.yaml")
    page_watch.allow(r"status of 403")
    sign_in(page, make_token("read"), "/ui/schedules")
    nightly = page.locator("tr[data-schedule='default/nightly-extract']")
    assert nightly.locator("[data-trigger]").inner_text() == "every day at 02:30 Europe/Berlin"
    assert page.locator("form.switch-form, button.switch").count() == 0
    enabled = nightly.locator("[data-enabled]").get_attribute("data-enabled")
    action = "disable" if enabled == "true" else "enable"
    assert forced_post(page, f"/ui/schedules/default/nightly-extract/{action}") == 403
    assert cluster.store.schedules.get("default", "nightly-extract").enabled == (enabled == "true")
    shot(page, "schedules-read-only")

    page.goto("/ui/datasets")
    names = page.locator("table.datasets tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.dataset)")
    assert "default/raw" in names, names
    shot(page, "datasets-read-only")

    page.goto(f"/ui/views?pattern={quote('app.eci.stage/Search/SHOP10/rymd(20150501-20150502)')}")
    assert page.locator("a.cell").count() == 2
    assert page.locator("[data-action=materialize], [data-action=invalidate]").count() == 0
    shot(page, "views-read-only")
