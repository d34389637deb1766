"""What a user scans on the dashboard, checked as they would check it in Chromium on
the real cluster: a long step name inside its box, a killed step's signal named, the
why-not-running sentence once with links, a search by part of a job's name, a month's
views grid inside the page, the schedules' last runs, the datasets' partition counts
and one word per outcome."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.browser.conftest import UiCluster, shot, sign_in
from tests.browser.test_planner_pages import apply
from tests.helpers import job_spec, wait_for
from tests.integration.nodes import TOKEN

LONG_NAME = "extract-WWWWWWWW-MMMMMMMM-warehouse-into-parquet-files-for-the-whole-month"


def test_a_killed_step_with_a_long_name_on_its_job_page(page: Any, cluster: UiCluster) -> None:
    job_id = cluster.api.submit(job_spec("scan-killed", [
        {"name": "prepare", "type": "noop"},
        {"name": LONG_NAME, "type": "shell", "argv": ["sh", "-c", "kill -TERM $$"]}]))
    cluster.api.wait_job(job_id, ("ERROR",))
    sign_in(page, TOKEN, f"/ui/jobs/{job_id}")
    box = page.locator(f"svg.dag a[data-step='{LONG_NAME}']")
    inside = box.evaluate("""box => {
        const rect = box.querySelector('rect').getBBox();
        return [...box.querySelectorAll('text')].every(text => {
            const t = text.getBBox();
            return t.x >= rect.x && t.x + t.width <= rect.x + rect.width; });
    }""")
    assert inside, "a label runs out of its box"
    assert LONG_NAME in box.locator("title").text_content()  # the whole name on hover
    card = page.locator(f"[data-step-card='{LONG_NAME}']")
    assert card.locator("[data-exit-code]").inner_text() == "-15 (SIGTERM)"
    shot(page, "killed-long-name")


def test_why_not_running_is_said_once_with_a_link_to_the_job_it_waits_for(
        page: Any, cluster: UiCluster) -> None:
    upstream = cluster.api.submit(job_spec("scan-upstream", [
        {"name": "wait", "type": "sleep", "seconds": 60}]))
    waiting = cluster.api.submit({**job_spec("scan-downstream", [
        {"name": "s", "type": "noop"}]), "after": [{"job": upstream, "when": "done"}]})
    try:
        sign_in(page, TOKEN, f"/ui/jobs/{waiting}")
        section = page.locator("[data-not-running=waiting_upstream]")
        assert section.locator("pre").count() == 0  # no raw JSON twin
        section.locator(f"a[data-blocking-job='{upstream}']").click()
        page.wait_for_url(f"**/ui/jobs/{upstream}")
    finally:
        cluster.api.call("POST", f"/api/v1/jobs/{upstream}/discard", {}, expect=(200, 409))


def test_a_search_by_part_of_a_name_finds_the_job(page: Any, cluster: UiCluster) -> None:
    found = cluster.api.submit(job_spec("Nightly-Revenue_Rollup", [{"name": "s", "type": "noop"}]))
    cluster.api.submit(job_spec("nightly-costs", [{"name": "s", "type": "noop"}]))
    sign_in(page, TOKEN, "/ui/jobs")
    page.fill("#f-name", "revenue_")  # any case; "_" is itself, not a wildcard
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**name_contains=revenue_*")
    ids = page.locator("#jobs-live tbody tr a").evaluate_all(
        "links => links.map(a => a.getAttribute('href').split('/').pop())")
    assert set(ids) == {str(found)}
    api = cluster.api.get("/api/v1/jobs?name_contains=REVENUE")
    assert [job["id"] for job in api["jobs"]] == [found]


def test_a_months_views_grid_stays_inside_the_page(page: Any, cluster: UiCluster) -> None:
    apply(cluster, "views.yaml")
    pattern = quote("app.eci.stage/e(Search,SearchWeekly)/SHOP10/rymd(20150501-20150531)")
    sign_in(page, TOKEN, f"/ui/views?pattern={pattern}")
    assert page.locator("table.views-grid thead tr").nth(1).locator("th").count() == 32
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width} px wide"
    card = page.locator("section.card", has=page.locator("table.views-grid"))
    assert card.evaluate("card => card.querySelector('.grid-wrap').getBoundingClientRect()"
                         ".right <= card.getBoundingClientRect().right")
    legend = page.locator("[data-vocabulary=materialized]").inner_text()
    assert legend == "materialized (its job SUCCEED)"
    shot(page, "views-month")


def test_the_schedules_last_runs_and_the_datasets_partition_counts(
        page: Any, cluster: UiCluster) -> None:
    cluster.api.call("PUT", "/api/v1/schedules/default/scan-ticker", {
        "enabled": True, "template": {"name": "scan-tick", "steps": [{"name": "t", "type": "noop"}]},
        "trigger": {"type": "time", "interval": 2}}, expect=(200, 201))
    apply(cluster, "datasets.yaml")
    cluster.api.call("POST", "/api/v1/datasets/default/raw/partitions", {"partitions": [
        {"key": {"date": "2026-11-01", "hour": hour}, "location": f"s3://raw/{hour}"}
        for hour in range(3)]}, expect=(200, 201))
    sign_in(page, TOKEN, "/ui/schedules")

    def last_run() -> str | None:
        page.reload()
        cell = page.locator("tr[data-schedule='default/scan-ticker'] [data-last-run]")
        return cell.inner_text() if cell.locator("a[data-job]").count() else None
    text = wait_for(last_run, 30, 0.5, "the ticker's last run on the list")
    assert any(word in text for word in ("READY", "RUNNING", "SUCCEED"))
    cluster.api.call("POST", "/api/v1/schedules/default/scan-ticker/disable", {},
                     expect=(200,))
    page.goto("/ui/datasets")
    assert page.get_attribute("tr[data-dataset='default/raw'] [data-partitions]",
                              "data-partitions") == "3"
