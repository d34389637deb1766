"""The planner: one test per rule of the design, each mode, and job rendering.

The lattice: ``t.v/Src`` and ``t.v/Other`` (noop sources) ← ``t.v/Day`` (reads both,
same day) ← ``t.v/Top`` (reads Day, same day), for one day.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from jobserver.views.checksums import version_checksum
from jobserver.views.lattice import instantiate
from jobserver.views.model import (Action, Decision, Mode, StoredPartition, ViewAddress,
                                   ViewState)
from jobserver.views.planner import plan
from jobserver.views.spec import ViewSpec, parse_view, validate_views
from jobserver.views.templates import render_job

T0 = datetime(2015, 5, 4, 1, 0, tzinfo=timezone.utc)
NOW = datetime(2015, 6, 1, tzinfo=timezone.utc)
DAY = [{"name": "day", "type": "string"}]
SAME = {"day": "$day"}


def _views() -> dict[str, ViewSpec]:
    job = {"job": {"steps": [{"name": "t", "type": "shell",
                              "argv": ["sh", "-c", "echo $JOBSERVER_PARAM_DAY"]}],
                   "params": {"day": "${day}"}}}
    bodies: list[dict[str, Any]] = [
        {"name": "t.v/Src", "transformation": "noop", "location": "/data/src/${day}/"},
        {"name": "t.v/Other", "transformation": "noop"},
        {"name": "t.v/Day", "transformation": job, "dependencies": [
            {"view": "t.v/Src", "map": SAME}, {"view": "t.v/Other", "map": SAME}]},
        {"name": "t.v/Top", "transformation": job,
         "dependencies": [{"view": "t.v/Day", "map": SAME}]}]
    specs = [parse_view({"parameters": DAY, "structure": {"fields": [
        {"name": "x", "type": "int"}]}, **body}) for body in bodies]
    validate_views(specs)
    return {spec.name: spec for spec in specs}


VIEWS = _views()
SRC, OTHER, DAY_, TOP = (ViewAddress("t.v", name, ("01",))
                         for name in ("Src", "Other", "Day", "Top"))
CURRENT = {name: version_checksum(spec) for name, spec in VIEWS.items()}


def done(address: ViewAddress, at: datetime, **changes: Any) -> StoredPartition:
    """Materialized at ``at`` with the current checksum, unless ``changes`` say else."""
    fields: dict[str, Any] = {"state": ViewState.MATERIALIZED, "transformed_at": at,
                              "version_checksum": CURRENT[address.name], "job_id": None,
                              "retries": 0, "row_version": 1}
    fields.update(changes)
    return StoredPartition(**fields)


def settled() -> dict[ViewAddress, StoredPartition]:
    """Everything materialized, each after what it reads."""
    return {SRC: done(SRC, T0), OTHER: done(OTHER, T0), DAY_: done(DAY_, T0 + timedelta(hours=1)),
            TOP: done(TOP, T0 + timedelta(hours=2))}


def decide(stored: dict[ViewAddress, StoredPartition], mode: Mode = Mode.DEFAULT,
           data: dict[ViewAddress, datetime | None] | None = None,
           wanted: ViewAddress = TOP) -> dict[str, Decision]:
    data = {SRC: T0, OTHER: T0} if data is None else data
    recursive = mode not in (Mode.TRANSFORM_ONLY, Mode.SET_ONLY)
    lattice = instantiate(VIEWS, [wanted], recursive=recursive)
    decisions = plan(lattice, VIEWS, stored, mode, NOW, lambda a: data.get(a))
    assert [d.address for d in decisions] == [a for a in lattice.order
                                              if recursive or a in lattice.addressed]
    return {d.address.view: d for d in decisions}


def summary(decisions: dict[str, Decision]) -> dict[str, str]:
    return {view: d.action.value for view, d in decisions.items()}


def test_rule_1_in_flight_joins_its_job() -> None:
    stored = settled()
    stored[DAY_] = done(DAY_, T0, state=ViewState.TRANSFORMING, job_id=41)
    got = decide(stored)
    assert (got["Day"].action, got["Day"].reason) == (Action.JOIN, "being transformed by job 41")
    assert got["Top"].action is Action.TRANSFORM and got["Top"].upstream == (DAY_,)


def test_rule_2_noop_view_follows_its_data() -> None:
    later = T0 + timedelta(days=1)
    got = decide(settled(), data={SRC: later, OTHER: T0})
    assert (got["Src"].action, got["Src"].reason) == (Action.SET, "data at 2015-05-05T01:00:00Z")
    assert got["Src"].transformed_at == later and got["Src"].version_checksum == CURRENT["t.v/Src"]
    assert (got["Other"].action, got["Other"].reason) == (Action.SKIP,
                                                          "data at 2015-05-04T01:00:00Z unchanged")
    got = decide(settled(), data={OTHER: T0})
    assert (got["Src"].action, got["Src"].reason) == (Action.NO_DATA,
                                                      "no _SUCCESS flag at /data/src/01/_SUCCESS")
    unmaterialized = {**settled(), OTHER: done(OTHER, T0, state=ViewState.NO_DATA)}
    assert decide(unmaterialized)["Other"].action is Action.SET


def test_rule_2_an_invalidated_noop_view_is_set_anew_and_its_dependents_transform() -> None:
    stored = {**settled(), SRC: done(SRC, T0, state=ViewState.RECEIVE)}  # invalidated
    got = decide(stored)
    assert (got["Src"].action, got["Src"].reason, got["Src"].transformed_at) == (
        Action.SET, "invalidated; data at 2015-05-04T01:00:00Z; set at 2015-06-01T00:00:00Z",
        NOW)
    assert summary(got) == {"Src": "set", "Other": "skip", "Day": "transform",
                            "Top": "transform"}
    assert got["Day"].reason == "dependency t.v/Src/01 is transformed by this request"
    # Data stamped later than the planner's clock: the data's time, never older.
    ahead = NOW + timedelta(minutes=5)
    assert decide(stored, data={SRC: ahead, OTHER: T0})["Src"].transformed_at == ahead
    # Set at NOW, its data still of T0: the next plan has nothing to do.
    got = decide({**settled(), SRC: done(SRC, NOW)})
    assert (got["Src"].action, got["Src"].reason) == (
        Action.SKIP, "data at 2015-05-04T01:00:00Z, set at 2015-06-01T00:00:00Z")
    assert got["Day"].action is Action.TRANSFORM  # its own timestamp is older than NOW
    # Newer data than that timestamp is a change again.
    assert decide({**settled(), SRC: done(SRC, NOW)},
                  data={SRC: NOW + timedelta(days=1), OTHER: T0})["Src"].action is Action.SET


def test_rule_3_all_dependencies_without_data_is_no_data() -> None:
    got = decide({}, data={})
    assert summary(got) == {"Src": "no-data", "Other": "no-data", "Day": "no-data",
                            "Top": "no-data"}
    assert got["Day"].reason == "all dependencies have no data"
    # One dependency with data is enough: materialized on incomplete data.
    assert decide({}, data={OTHER: T0})["Day"].action is Action.TRANSFORM


def test_rule_4_never_transformed_or_invalidated() -> None:
    got = decide({SRC: done(SRC, T0), OTHER: done(OTHER, T0)})
    assert (got["Day"].action, got["Day"].reason) == (Action.TRANSFORM, "never transformed")
    assert got["Day"].version_checksum == CURRENT["t.v/Day"] and got["Day"].upstream == ()
    stored = settled()
    stored[DAY_] = done(DAY_, T0 + timedelta(hours=1), state=ViewState.RECEIVE)
    assert decide(stored)["Day"].reason == "invalidated"


def test_rule_5_a_dependency_transformed_by_this_request() -> None:
    stored = settled()
    stored[DAY_] = done(DAY_, T0, state=ViewState.RECEIVE)
    got = decide(stored)
    assert (got["Top"].action, got["Top"].reason) == (
        Action.TRANSFORM, "dependency t.v/Day/01 is transformed by this request")
    assert got["Top"].upstream == (DAY_,)
    # New data at a source counts as well (a SET with a new timestamp).
    got = decide(settled(), data={SRC: NOW, OTHER: T0})
    assert got["Day"].reason == "dependency t.v/Src/01 is transformed by this request"
    assert got["Day"].upstream == ()


def test_rule_6_a_dependency_newer_than_own() -> None:
    stored = settled()
    stored[TOP] = done(TOP, T0)
    got = decide(stored)
    assert (got["Top"].action, got["Top"].reason) == (
        Action.TRANSFORM,
        "dependency t.v/Day/01 newer (2015-05-04T02:00:00Z) than own (2015-05-04T01:00:00Z)")


def test_rule_7_version_checksum_changed() -> None:
    stored = settled()
    stored[TOP] = done(TOP, T0 + timedelta(hours=2), version_checksum="ab" * 32)
    got = decide(stored)
    new = CURRENT["t.v/Top"]
    assert (got["Top"].action, got["Top"].reason) == (
        Action.TRANSFORM, f"transformation version changed (abababab… → {new[:8]}…)")


def test_rule_8_failed_last_time() -> None:
    stored = settled()
    stored[TOP] = done(TOP, T0 + timedelta(hours=2), state=ViewState.FAILED)
    assert decide(stored)["Top"].reason == "failed last time"


def test_rule_9_else_skip() -> None:
    got = decide(settled())
    assert summary(got) == {"Src": "skip", "Other": "skip", "Day": "skip", "Top": "skip"}
    assert got["Top"].reason == ("materialized at 2015-05-04T03:00:00Z; dependencies older; "
                                 "version unchanged")


def test_a_failed_dependency_does_not_stop_its_dependents() -> None:
    stored = settled()
    stored[DAY_] = done(DAY_, T0 + timedelta(hours=1), state=ViewState.FAILED)
    got = decide(stored)
    assert got["Day"].action is Action.TRANSFORM
    assert got["Top"].action is Action.TRANSFORM and got["Top"].upstream == (DAY_,)


def test_mode_reset_transformation_checksums_stores_changed_checksums() -> None:
    stored = settled()
    stored[TOP] = done(TOP, T0 + timedelta(hours=2), version_checksum="ab" * 32)
    got = decide(stored, Mode.RESET_TRANSFORMATION_CHECKSUMS)
    assert got["Top"].action is Action.SET
    assert got["Top"].version_checksum == CURRENT["t.v/Top"]
    assert got["Top"].transformed_at == T0 + timedelta(hours=2)
    assert got["Top"].reason.startswith("transformation version checksum reset (abababab… → ")
    stored[TOP] = done(TOP, T0, state=ViewState.RECEIVE)  # anything else: as DEFAULT
    assert decide(stored, Mode.RESET_TRANSFORMATION_CHECKSUMS)["Top"].action is Action.TRANSFORM


def test_mode_reset_checksums_and_timestamps_runs_nothing_and_settles() -> None:
    stored: dict[ViewAddress, StoredPartition] = {
        DAY_: done(DAY_, T0 - timedelta(days=1), version_checksum="ab" * 32)}
    got = decide(stored, Mode.RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS)
    assert summary(got) == {"Src": "set", "Other": "set", "Day": "set", "Top": "set"}
    assert got["Day"].transformed_at == T0 and got["Top"].transformed_at == T0
    assert got["Top"].reason == ("never transformed; set to 2015-05-04T01:00:00Z without "
                                 "transforming")
    after = {d.address: done(d.address, d.transformed_at, version_checksum=d.version_checksum)
             for d in got.values() if d.transformed_at is not None}
    assert set(summary(decide(after)).values()) == {"skip"}


def test_mode_transform_only_ignores_dependencies() -> None:
    got = decide({}, Mode.TRANSFORM_ONLY)
    assert list(got) == ["Top"]
    assert (got["Top"].action, got["Top"].reason, got["Top"].upstream) == (
        Action.TRANSFORM, "TRANSFORM_ONLY", ())
    in_flight = {TOP: done(TOP, T0, state=ViewState.WAITING, job_id=7)}
    assert decide(in_flight, Mode.TRANSFORM_ONLY)["Top"].action is Action.JOIN


def test_mode_set_only_sets_the_addressed_partition_now() -> None:
    got = decide({}, Mode.SET_ONLY)
    assert list(got) == ["Top"]
    assert (got["Top"].action, got["Top"].reason, got["Top"].transformed_at,
            got["Top"].version_checksum) == (Action.SET, "SET_ONLY", NOW, CURRENT["t.v/Top"])


def test_render_job_fills_the_template_for_one_partition() -> None:
    job = render_job(VIEWS["t.v/Day"], DAY_)
    assert job.name == "view t.v/Day/01"
    # The value reaches the step as data: in its params (the shell step's
    # $JOBSERVER_PARAM_DAY), never pasted into the shell text.
    assert job.steps[0].argv == ["sh", "-c", "echo $JOBSERVER_PARAM_DAY"]  # type: ignore[union-attr]
    assert job.params == {"day": "01", "view": "t.v/Day", "partition": "01",
                          "parameters": {"day": "01"}, "version_checksum": CURRENT["t.v/Day"]}


def test_render_job_refuses_a_noop_view() -> None:
    with pytest.raises(Exception, match="noop"):
        render_job(VIEWS["t.v/Src"], SRC)
