"""A resumed step shows its new attempt's figures and output, not the last one's
(issue 36, item 1), on a real ``jobserver serve`` per store (SQLite and PostgreSQL:
each starts a step through its own claim statement).

As the issue reports it, shorter: a shell step ticks every 0.2 s, is paused after a
few ticks and resumed. Attempt 2 RUNNING has no wall time, CPU, peak memory, exit
code or output of its own yet, in the API and on the job page, and its live output
is its own ticks; attempt 1 is still there as history: its events, how long it ran,
and its log.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

import pytest

from tests.helpers import job_spec, wait_for
from tests.integration.attack import (AttackNode, attack_env, attack_node,  # noqa: F401
                                      unique)

TICKER = ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"]
#: What a step's new attempt must not carry over from its last one.
FIGURES = ("wall_seconds", "cpu_seconds", "peak_rss_kb", "exit_code", "output",
           "finished_at", "error")


def log_text(node: AttackNode, job_id: int, attempt: int | None = None) -> tuple[str, str]:
    """A step attempt's log as ``jobserver logs`` reads it: (attempt served, text);
    ("", "") before the step first runs."""
    query = f"?attempt={attempt}" if attempt else ""
    request = urllib.request.Request(f"{node.url}/api/v1/jobs/{job_id}/steps/tick/log{query}",
                                     headers={"Authorization": f"Bearer {node.tokens['admin']}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.headers["X-Log-Attempt"], response.read().decode()
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and attempt is None:
            return "", ""
        raise


def the_step(node: AttackNode, job_id: int) -> dict[str, Any]:
    return node.api().job(job_id)["steps"][0]


def ticks(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^tick (\d+)$", text, re.MULTILINE)]


@pytest.fixture
def resumed(attack_node: AttackNode) -> Any:  # noqa: F811
    """A ticking job paused after a few ticks and resumed: (node, job id, attempt 1's
    step as the API showed it once stopped). Discarded afterwards."""
    api = attack_node.api()
    job_id = api.submit(job_spec(unique("ticker-"), [{"name": "tick", "type": "shell",
                                                      "argv": TICKER}]))
    try:
        wait_for(lambda: len(ticks(log_text(attack_node, job_id)[1])) >= 4, 30,
                 what="attempt 1 to print four ticks")
        api.call("POST", f"/api/v1/jobs/{job_id}/pause")
        first = wait_for(lambda: (s := the_step(attack_node, job_id))["state"] == "STOPPED"
                         and s["wall_seconds"] is not None and s, 30,
                         what="the paused step to be recorded STOPPED")
        api.call("POST", f"/api/v1/jobs/{job_id}/resume")
        wait_for(lambda: (s := the_step(attack_node, job_id))["state"] == "RUNNING"
                 and s["attempt"] == 2, 30, what="attempt 2 to run")
        yield attack_node, job_id, first
    finally:
        api.call("POST", f"/api/v1/jobs/{job_id}/discard", expect=(200, 409))


def test_a_resumed_step_shows_its_own_attempt(resumed: Any) -> None:
    node, job_id, first = resumed
    assert first["attempt"] == 1 and first["wall_seconds"] >= 0.6
    assert "tick 3" in first["output"]

    step = the_step(node, job_id)
    assert step["attempt"] == 2 and step["state"] == "RUNNING"
    assert {name: step[name] for name in FIGURES} == dict.fromkeys(FIGURES)
    assert (datetime.fromisoformat(step["started_at"])
            > datetime.fromisoformat(first["started_at"]))

    # Its live output is its own: it starts again at tick 1.
    def two_ticks() -> tuple[str, str] | None:
        log = log_text(node, job_id)
        return log if len(ticks(log[1])) >= 2 else None

    found = wait_for(two_ticks, 30, what="attempt 2 to print two ticks")
    assert found is not None
    attempt, text = found
    assert attempt == "2" and ticks(text)[:2] == [1, 2]


def test_the_last_attempt_stays_in_the_history(resumed: Any) -> None:
    node, job_id, first = resumed
    attempt, text = log_text(node, job_id, attempt=1)
    assert attempt == "1" and ticks(text)[:4] == [1, 2, 3, 4]
    assert first["output"].rstrip().endswith(text.rstrip().splitlines()[-1])
    events = node.api().get(f"/api/v1/jobs/{job_id}/events")["events"]
    tried = [(e["attempt"], e["from_state"], e["to_state"]) for e in events
             if e["step"] == "tick" and e["from_state"] in ("READY", "RUNNING")]
    assert (1, "READY", "RUNNING") in tried and (1, "RUNNING", "STOPPED") in tried
    assert (2, "READY", "RUNNING") in tried


def test_the_job_page_shows_the_running_attempt(resumed: Any) -> None:
    node, job_id, first = resumed
    browser = node.browser("read")
    wait_for(lambda: len(ticks(log_text(node, job_id)[1])) >= 2, 30,
             what="attempt 2 to print two ticks")
    status, page = browser.open(f"/ui/jobs/{job_id}")
    assert status == 200
    card = page[page.index('data-step-card="tick"'):]
    card = card[:card.index("</details>")]
    assert "Running for" in card and "No output." not in card
    live = re.search(r'<pre class="output live-output"[^>]*>(.*?)</pre>', card, re.S)
    assert live and ticks(live.group(1))[:2] == [1, 2], card
    # Attempt 1's wall time is its history row's, not the running attempt's figure.
    ran = re.search(r'<td data-ran="1">([^<]*)</td>', card)
    assert ran and re.fullmatch(r"[\d.]+ (ms|s)", ran.group(1).strip()), card
    assert f"{first['wall_seconds']:.1f} s" not in card.split('<table class="attempts"')[0]
