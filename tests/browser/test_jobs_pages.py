"""The jobs and job pages on a real cluster: live updates, the step graph, operator
actions with their confirmations, and what a session may and may not do."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from tests.browser.conftest import (PageWatch, UiCluster, expect, forced_post, shot,
                                    sign_in)
from tests.helpers import job_spec, wait_for
from tests.integration.nodes import TOKEN

#: The example job of docs/jobs.md: a DAG of four steps, one of them printing.
DAG = job_spec("nightly-etl", [
    {"name": "extract", "type": "shell", "argv": ["echo", "extracted 42 rows"]},
    {"name": "count", "type": "noop", "depends_on": ["extract"]},
    {"name": "pause", "type": "sleep", "seconds": 0.2, "depends_on": ["extract"]},
    {"name": "load", "type": "noop", "depends_on": ["count", "pause"]}])
LONG = job_spec("long-sleep", [{"name": "prepare", "type": "noop"},
                               {"name": "wait", "type": "sleep", "seconds": 120}])


def confirm(page: Any, button: str) -> None:
    """Click an action's button and accept the page's confirmation dialog."""
    page.click(f".actions button:text-is('{button}')")
    dialog = page.locator("#confirm")
    expect(dialog).to_be_visible()
    dialog.locator("button[value=ok]").click()


def test_a_job_turns_succeed_on_the_jobs_page_without_a_reload(page: Any,
                                                               cluster: UiCluster) -> None:
    sign_in(page, TOKEN, "/ui/jobs")
    page.evaluate("window.notReloaded = true")
    job_id = cluster.api.submit(job_spec("watched", [{"name": "nap", "type": "sleep",
                                                      "seconds": 2}]))
    row = page.locator(f"tr[data-job='{job_id}']")
    expect(row.locator(".badge")).to_have_text(re.compile("READY|RUNNING"))
    expect(row.locator(".badge")).to_have_text("SUCCEED", timeout=20_000)
    assert page.evaluate("window.notReloaded") is True
    assert row.locator("td").nth(3).inner_text() == "1/1"
    succeeded = int(page.inner_text("[data-count=SUCCEED]").replace(",", "").rstrip("+"))
    assert succeeded >= 1
    shot(page, "jobs")
    # The filter and the cursor are the page's own: a filter on another state hides it.
    page.select_option("#f-state", "ERROR")
    page.click("form.filters button[type=submit]")
    expect(page.locator(f"tr[data-job='{job_id}']")).to_have_count(0)


def test_a_job_page_draws_its_step_graph(page: Any, cluster: UiCluster) -> None:
    job_id = cluster.api.submit(DAG)
    cluster.api.wait_job(job_id)
    sign_in(page, TOKEN, f"/ui/jobs/{job_id}")
    boxes = page.locator("svg.dag [data-step]")
    assert boxes.evaluate_all("bs => bs.map(b => [b.dataset.step, b.dataset.state])") == [
        ["extract", "SUCCEED"], ["count", "SUCCEED"], ["pause", "SUCCEED"],
        ["load", "SUCCEED"]]
    edges = page.locator("svg.dag [data-edge]").evaluate_all(
        "es => es.map(e => e.dataset.edge)")
    assert sorted(edges) == ["count->load", "extract->count", "extract->pause",
                             "pause->load"]
    columns = {name: float(page.get_attribute(f"[data-step={name}] rect", "x"))
               for name in ("extract", "count", "pause", "load")}
    assert columns["extract"] < columns["count"] == columns["pause"] < columns["load"]
    card = page.locator("[data-step-card=extract]")
    card.locator("summary").click()
    expect(card.locator("pre.output")).to_contain_text("extracted 42 rows")
    assert "exit 0" in card.locator("summary").inner_text()
    assert page.locator("table.events .actor").first.inner_text() == "config token #1"
    shot(page, "job-dag")

    chain = cluster.api.submit(job_spec("chain", [{"name": f"s{i}", "type": "noop"}
                                                  for i in range(4)]))
    cluster.api.wait_job(chain)
    page.goto(f"/ui/jobs/{chain}")
    rows = {page.get_attribute(f"[data-step=s{i}] rect", "y") for i in range(4)}
    assert len(rows) == 1, "a chain is drawn as one line"
    assert page.locator("svg.dag [data-edge]").count() == 3


def test_pause_and_resume_a_running_job(page: Any, cluster: UiCluster,
                                        make_token: Callable[..., str]) -> None:
    operator = make_token("read", "operate", name="night-operator")
    job_id = cluster.api.submit(LONG)
    try:
        sign_in(page, operator, f"/ui/jobs/{job_id}")
        expect(page.locator("#job-state .badge")).to_have_text("RUNNING", timeout=20_000)
        confirm(page, "Pause")
        expect(page.locator(".notice")).to_have_text("Paused.")
        expect(page.locator("#job-state .badge")).to_have_text("STOPPED")
        assert cluster.api.job(job_id)["state"] == "STOPPED"
        # The running step is stopped a moment later; the page shows that too.
        expect(page.locator("svg.dag [data-step=wait]")).to_have_attribute(
            "data-state", "STOPPED")
        assert page.locator(".actions button").all_inner_texts() == [
            "Resume", "Rerun", "Discard"]
        shot(page, "paused")
        confirm(page, "Resume")
        expect(page.locator("#job-state .badge")).to_have_text(
            re.compile("READY|RUNNING"))
        expect(page.locator("#job-state .badge")).to_have_text("RUNNING", timeout=20_000)
        actors = [event["actor"] for event in
                  cluster.api.get(f"/api/v1/jobs/{job_id}/events")["events"]
                  if event["step"] is None and event["message"] in ("pause", "resume")]
        assert [actor["name"] for actor in actors] == ["night-operator", "night-operator"]
    finally:
        cluster.api.call("POST", f"/api/v1/jobs/{job_id}/discard", expect=(200, 409))


def test_a_post_without_the_csrf_token_is_refused(page: Any, cluster: UiCluster,
                                                  page_watch: PageWatch) -> None:
    page_watch.allow(r"status of 403")
    job_id = cluster.api.submit(job_spec("guarded", not_before="2999-01-01T00:00:00Z"))
    sign_in(page, TOKEN, f"/ui/jobs/{job_id}")
    status = page.evaluate("""url => fetch(url, {method: "POST", credentials: "same-origin",
                                                  body: new URLSearchParams()})
                                     .then(answer => answer.status)""",
                           f"/ui/jobs/{job_id}/discard")
    assert status == 403
    assert cluster.api.job(job_id)["state"] == "READY"
    confirm(page, "Discard")
    expect(page.locator("#job-state .badge")).to_have_text("DISCARDED")
    shot(page, "discarded-with-the-csrf-token")


def test_a_read_only_token_is_offered_no_action(page: Any, cluster: UiCluster,
                                                make_token: Callable[..., str],
                                                page_watch: PageWatch) -> None:
    page_watch.allow(r"status of 403")
    job_id = cluster.api.submit(job_spec("look-only", not_before="2999-01-01T00:00:00Z"))
    sign_in(page, make_token("read"), f"/ui/jobs/{job_id}")
    expect(page.locator("#job-state .badge")).to_have_text("READY")
    expect(page.locator("[data-not-running=not_due]")).to_be_visible()
    assert page.locator(".actions form, form.action").count() == 0
    shot(page, "read-only")
    assert forced_post(page, f"/ui/jobs/{job_id}/pause") == 403
    assert cluster.api.job(job_id)["state"] == "READY"
    cluster.api.call("POST", f"/api/v1/jobs/{job_id}/discard")


def test_sign_out(page: Any, cluster: UiCluster) -> None:
    sign_in(page, TOKEN, "/ui/jobs")
    page.click(".who button")
    expect(page.locator(".notice")).to_have_text("Signed out.")
    page.goto("/ui/jobs")
    assert page.url.endswith("/ui/sign-in?next=/ui/jobs")
    shot(page, "signed-out")


def test_a_revoked_token_ends_its_session(page: Any, cluster: UiCluster,
                                          page_watch: PageWatch) -> None:
    page_watch.allow(r"status of 401")
    token, secret = cluster.store.tokens.create("leaked", ["read"])
    sign_in(page, secret, "/ui/cluster")
    expect(page.locator("[data-fact=alive]")).to_have_text("3 / 3")
    cluster.store.tokens.revoke(token.id)
    # The page's next refresh is refused and sends the browser to sign in again.
    page.wait_for_url(re.compile(r".*/ui/sign-in\?next=%2Fui%2Fcluster$"), timeout=10_000)
    expect(page.locator(".notice")).to_contain_text("session has ended")
    shot(page, "session-ended")


def test_a_retried_step_shows_its_attempts_and_figures_and_the_job_reruns(
        page: Any, cluster: UiCluster) -> None:
    """A shell step that failed once and succeeded on its retry: both attempts with
    their states, its wall, CPU and peak RSS, and its exit code. Rerun (confirmed)
    runs the whole job again to SUCCEED under a new attempt."""
    marker = cluster.harness.tmp_path / f"flaky-{uuid.uuid4().hex}"
    job_id = cluster.api.submit(job_spec("flaky", [{
        "name": "flaky", "type": "shell", "retries": 1, "retry_backoff": 0,
        "argv": ["sh", "-c", f"if [ -e {marker} ]; then echo second time lucky; "
                             f"else touch {marker}; echo first try fails >&2; exit 7; fi"]}]))
    cluster.api.wait_job(job_id)
    sign_in(page, TOKEN, f"/ui/jobs/{job_id}")
    card = page.locator("[data-step-card=flaky]")
    card.locator("summary").click()
    attempts = card.locator("table.attempts tbody tr")
    expect(attempts).to_have_count(2)
    first, second = attempts.nth(0).inner_text(), attempts.nth(1).inner_text()
    assert "attempt 1 failed: exit status 7; retrying" in first, first
    assert "SUCCEED" in second, second
    figures = dict(zip(card.locator("dl.props dt").all_inner_texts(),
                       card.locator("dl.props dd").all_inner_texts()))
    assert re.fullmatch(r"\d+(\.\d+)? (ms|s)", figures["Wall"]), figures
    assert re.fullmatch(r"\d+(\.\d+)? (ms|s)", figures["CPU"]), figures
    assert re.fullmatch(r"[\d,]+\.\d MB", figures["Peak RSS"]), figures
    assert figures["Exit code"] == "0", figures
    expect(card.locator("pre.output")).to_contain_text("second time lucky")
    shot(page, "attempts")

    confirm(page, "Rerun")

    def succeeded_runs() -> int:
        events = cluster.api.get(f"/api/v1/jobs/{job_id}/events")["events"]
        return sum(1 for e in events if e["step"] is None and e["to_state"] == "SUCCEED")

    wait_for(lambda: succeeded_runs() == 2, 20, 0.1, "the rerun to succeed")
    expect(page.locator("#job-state .badge")).to_have_text("SUCCEED", timeout=20_000)
    shot(page, "rerun")
