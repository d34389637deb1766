"""The planners' pages' small pure parts: grid headings and state colours (which a
planner's page module places when imported, as the dashboard imports it)."""

from __future__ import annotations

import jobserver.schedules.pages  # noqa: F401 - places its states' colours
import jobserver.views.pages  # noqa: F401 - places its states' colours
from jobserver.batches.records import Status
from jobserver.ui.planners import column_groups, planner_tone
from jobserver.views.model import Action, ViewState


def test_dates_are_grouped_by_month_and_shown_by_day() -> None:
    assert column_groups(["2015-04-30", "2015-05-01", "2015-05-02"]) == [
        ("2015-04", [("2015-04-30", "30")]),
        ("2015-05", [("2015-05-01", "01"), ("2015-05-02", "02")])]
    assert column_groups(["2015-04", "2015-05"]) == [
        ("2015", [("2015-04", "04"), ("2015-05", "05")])]


def test_other_values_stand_as_they_are() -> None:
    assert column_groups(["prod", "staging"]) == [("", [("prod", "prod"),
                                                        ("staging", "staging")])]
    assert column_groups(["a-b", "2015-05-01"]) == [("", [("a-b", "a-b")]),
                                                    ("2015-05", [("2015-05-01", "01")])]


def test_a_view_waiting_for_its_job_is_in_flight_an_evaluation_waiting_is_not() -> None:
    assert planner_tone(ViewState.WAITING) == "running"
    assert planner_tone(ViewState.RECEIVE) == "waiting"
    assert planner_tone(ViewState.NO_DATA) == "gone"
    assert planner_tone("waiting") == "waiting"  # an evaluation's outcome


def test_planner_states_fall_back_to_the_job_states_colours() -> None:
    assert planner_tone("PENDING_CONSTRAINTS") == "waiting"
    assert planner_tone(Status.FAILED) == "failed"
    assert planner_tone("SUCCEED") == "ok" and planner_tone("launched") == "running"
    assert planner_tone(Action.TRANSFORM) == "running"
    assert planner_tone("something new") == "other"
