"""The schedules pages' data, through the real store (SQLite and PostgreSQL), with
schedule-jobs and evaluations made by the real evaluator on a controlled clock."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from jobserver.schedules.page_board import schedule_detail, schedule_rows
from jobserver.schedules.spec import parse_schedule
from jobserver.states import Operation, State
from jobserver.store import Store
from tests.integration.test_schedule_evaluator import POLICY, TEMPLATE, Harness


def test_rows_say_the_trigger_in_words_and_when_it_fires_next(store: Store) -> None:
    store.schedules.create(parse_schedule({
        "name": "nightly", "template": TEMPLATE, "description": "the nightly load",
        "trigger": {"type": "time", "cron": "0 4 * * *", "timezone": "Europe/Berlin"}},
        POLICY), enabled=True)
    store.schedules.create(parse_schedule({
        "name": "after", "template": TEMPLATE,
        "trigger": {"type": "job_status", "schedule": "nightly"}}, POLICY))
    rows, following = schedule_rows(store)
    assert following is None
    after, nightly = rows  # by name
    assert nightly.trigger == "every day at 04:00 Europe/Berlin"
    assert nightly.description == "the nightly load" and nightly.record.enabled
    assert nightly.next_fire is not None and nightly.next_fire > datetime.now(timezone.utc)
    assert nightly.next_fire.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "04:00"
    assert after.trigger == "when a run of schedule nightly succeeds"
    assert not after.record.enabled and after.next_fire is None


def test_rows_page_by_name(store: Store) -> None:
    for index in range(5):
        store.schedules.create(parse_schedule({
            "name": f"s{index}", "template": TEMPLATE,
            "trigger": {"type": "time", "interval": "1h"}}, POLICY))
    first, following = schedule_rows(store, limit=3)
    assert [row.record.name for row in first] == ["s0", "s1", "s2"]
    second, last = schedule_rows(store, after=following, limit=3)
    assert [row.record.name for row in second] == ["s3", "s4"] and last is None


def test_detail_shows_the_pending_job_launches_and_evaluations(store: Store) -> None:
    h = Harness(store)
    waiting = h.add("waiting", {"type": "time", "cron": "*/5 * * * *"},
                    constraints=[{"type": "delay", "duration": "1h"}])
    launching = h.add("launching", {"type": "time", "cron": "*/5 * * * *"})
    h.round(minutes=5, seconds=1)
    assert waiting and launching

    detail = schedule_detail(store, "default", "waiting")
    pending = detail.row.record.pending
    assert pending is not None and pending.state == "PENDING_CONSTRAINTS"
    assert detail.constraints == ["1 hour after it fires, else wait"]
    assert detail.timeout == "1 day" and detail.catchup == "latest"
    newest = detail.evaluations[0]
    assert newest.outcome == "waiting" and "delay" in newest.reason, newest.reason

    detail = schedule_detail(store, "default", "launching")
    (job,) = detail.jobs
    assert job.state == "LAUNCHED" and job.job_id is not None
    assert detail.job_states == {job.job_id: State.READY.value}
    assert detail.evaluations[0].outcome == "launched"
    store.jobs.apply(job.job_id, Operation.DISCARD)
    assert schedule_detail(store, "default", "launching").job_states == {
        job.job_id: State.DISCARDED.value}


def test_disabling_aborts_the_pending_job_the_page_showed(store: Store) -> None:
    """The page's switch calls the catalog's disable, as the API does."""
    h = Harness(store)
    h.add("waiting", {"type": "time", "cron": "*/5 * * * *"},
          constraints=[{"type": "delay", "duration": "1h"}])
    h.round(minutes=5, seconds=1)
    store.schedules.disable("default", "waiting")
    detail = schedule_detail(store, "default", "waiting")
    assert not detail.row.record.enabled and detail.row.record.pending is None
    assert detail.jobs[0].state == "ABORTED" and detail.jobs[0].reason == "schedule disabled"
    assert detail.evaluations[0].outcome == "aborted"
    assert detail.row.next_fire is None
