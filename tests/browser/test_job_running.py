"""A running step on its job page (issue 36, items 2, 5 and 7): it shows how long it
has run, counting up, and the end of its live log, the lines ``jobserver logs``
prints, as the page refreshes; its output is shown as text, never as markup; and
the page, a running job's with a graph, parameters and long output lines, is no
wider than a 390 px phone."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.browser.conftest import UiCluster, expect, shot, sign_in
from tests.helpers import job_spec
from tests.integration.nodes import TOKEN

#: Ticks every 0.2 s; each tenth line is long, and one line is markup.
TICKER = ["sh", "-c", "echo '<img src=x onerror=window.hacked=1>'; i=0; while true; "
          "do i=$((i+1)); echo tick $i; [ $((i % 10)) -eq 0 ] && "
          "printf 'wide-%.0s' $(seq 60) && echo; sleep 0.2; done"]


#: The live output overflows its box and shows its last line. Looked up on every
#: poll: each refresh of the page replaces the element.
AT_END = ("() => { const p = document.querySelector('[data-live-output=tick]'); "
          "return p !== null && p.scrollHeight > p.clientHeight && "
          "p.scrollTop + p.clientHeight >= p.scrollHeight - 4; }")


def running_job(cluster: UiCluster) -> int:
    return cluster.api.submit(job_spec(
        "a-running-job-with-a-rather-long-name-for-a-phone",
        [{"name": "prepare-the-warehouse-tables", "type": "noop"},
         {"name": "tick", "type": "shell", "argv": TICKER,
          "depends_on": ["prepare-the-warehouse-tables"]},
         {"name": "load-everything-afterwards", "type": "noop", "depends_on": ["tick"]}],
        params={"day": "2024-01-01", "a_long_parameter_name": "x" * 80}))


def latest_tick(text: str) -> int:
    found = re.findall(r"^tick (\d+)$", text, re.MULTILINE)
    return int(found[-1]) if found else 0


def test_a_running_step_shows_its_elapsed_time_and_live_output(page: Any,
                                                              cluster: UiCluster) -> None:
    job_id = running_job(cluster)
    try:
        sign_in(page, TOKEN, f"/ui/jobs/{job_id}")
        card = page.locator("[data-step-card=tick]")
        expect(card.locator(".badge").first).to_have_text("RUNNING", timeout=20_000)
        output = card.locator("[data-live-output=tick]")
        expect(output).to_contain_text("tick 3", timeout=20_000)
        assert "No output." not in card.inner_text()
        # The page refreshes by itself: later ticks arrive without a reload.
        page.evaluate("window.notReloaded = true")
        seen = latest_tick(output.inner_text())
        expect(output).to_contain_text(f"tick {seen + 5}", timeout=20_000)
        assert page.evaluate("window.notReloaded") is True
        # The elapsed time counts up, in the summary and in the card.
        elapsed = card.locator("dl.props [data-elapsed]")
        first = elapsed.inner_text()
        assert re.fullmatch(r"\d+ s|\d+ min \d+ s", first), first
        expect(elapsed).not_to_have_text(first, timeout=5_000)
        assert "running for" in card.locator("summary").inner_text()
        # The markup it printed is text.
        expect(output).to_contain_text("<img src=x onerror=window.hacked=1>")
        assert page.evaluate("window.hacked") is None
        assert card.locator("img").count() == 0
        shot(page, "job-running")
    finally:
        cluster.api.call("POST", f"/api/v1/jobs/{job_id}/discard", expect=(200, 409))


def test_a_running_job_page_fits_a_phone(new_page: Callable[..., Any],
                                        cluster: UiCluster) -> None:
    job_id = running_job(cluster)
    phone = new_page(viewport={"width": 390, "height": 844}, is_mobile=True,
                     has_touch=True, color_scheme="dark")
    try:
        sign_in(phone, TOKEN, f"/ui/jobs/{job_id}")
        output = phone.locator("[data-live-output=tick]")
        expect(output).to_contain_text("wide-wide", timeout=30_000)
        phone.locator("[data-step-card] summary").evaluate_all(
            "ss => ss.forEach(s => s.parentElement.open = true)")
        # Its newest lines are in view: the live output is scrolled to its end, and
        # stays there through the page's refreshes.
        for _ in range(2):
            seen = latest_tick(output.inner_text())
            expect(output).to_contain_text(f"tick {seen + 2}", timeout=20_000)
            phone.wait_for_function(AT_END, timeout=5_000)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the job page is {width} px wide"
        facts = phone.locator("section.facts").inner_text()
        assert "runs so far" in facts.lower() and "·" not in facts
        shot(phone, "job-running-phone-dark")
    finally:
        cluster.api.call("POST", f"/api/v1/jobs/{job_id}/discard", expect=(200, 409))

