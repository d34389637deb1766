"""Views end to end, one test per rule of Schedoscope's scheduling: the real planner,
real view definitions, real jobs run by an in-process runner, and the tracker of view
jobs turning their ends into view states (its rounds driven by the test).

The lattice (small, so that each test takes a second or two)::

    t.src/Raw (noop: a _SUCCESS flag per shop and day)
       │ the same partition
    t.stage/Clean (a python step; fails while its partition is in FAILING)
       │ the last 3 days up to this day
    t.mart/Weekly (a python step)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobserver.config import ViewsConfig
from jobserver.spec import Policy
from jobserver.states import State
from jobserver.store import Store
from jobserver.views.catalog import ViewCatalog
from jobserver.views.listeners import ViewSchedulingEvent
from jobserver.views.materialize import Materializer, Outcome
from jobserver.views.model import Action, Mode, ViewState
from jobserver.views.tracker import ViewTracker
from tests.helpers import wait_for
from tests.integration.test_runner import PYTHON_STEPS, Harness
from tests.integration.test_views_run import SeatOf

FAILING: set[str] = set()
RELEASE: dict[str, threading.Event] = {}
WEEKLY = "t.mart/Weekly/S1/2015/05/03"
DAYS = ("01", "02", "03")


def _step(ctx: Any, view: str = "", extra: str = "") -> dict[str, Any]:
    gate = RELEASE.get(view)
    if gate is not None and not gate.wait(10):
        raise RuntimeError("never released")
    if view in FAILING:
        raise RuntimeError(f"{view} cannot be transformed")
    return {"view": view}


PYTHON_STEPS.register("test.views_step", _step)
PARAMS = [{"name": n} for n in ("shop", "year", "month", "day")]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}


def _job(view: str, extra: str = "") -> dict[str, Any]:
    return {"job": {"steps": [{"name": "t", "type": "python", "callable": "test.views_step",
                               "retries": 0,
                               "args": {"view": f"{view}/${{shop}}/${{year}}/${{month}}/${{day}}",
                                        **({"extra": extra} if extra else {})}}]}}


def raw(root: Path) -> dict[str, Any]:
    return {"name": "t.src/Raw", "parameters": PARAMS, "structure": FIELDS,
            "transformation": "noop", "location": f"{root}/raw/${{shop}}/${{year}}${{month}}${{day}}"}


def clean(extra: str = "", **more: Any) -> dict[str, Any]:
    return {"name": "t.stage/Clean", "parameters": PARAMS, "structure": FIELDS,
            "dependencies": [{"view": "t.src/Raw", "map": {
                "shop": "$shop", "year": "$year", "month": "$month", "day": "$day"}}],
            "transformation": _job("t.stage/Clean", extra), **more}


def weekly() -> dict[str, Any]:
    return {"name": "t.mart/Weekly", "parameters": PARAMS, "structure": FIELDS,
            "dependencies": [{"view": "t.stage/Clean", "map": {"shop": "$shop"},
                              "days": {"last": 3}}],
            "transformation": _job("t.mart/Weekly")}


class World:
    """The store, the definitions, a runner, and the tracker driven by hand."""

    def __init__(self, store: Store, root: Path, retries: int = 0,
                 track_first: bool = True) -> None:
        self.store, self.root = store, root
        self.policy = Policy(PYTHON_STEPS.is_registered, None)
        self.catalog = ViewCatalog(store, self.policy)
        self.materializer = Materializer(store, self.policy)
        self.events: list[ViewSchedulingEvent] = []
        self.seat = SeatOf(store)
        self.tracker = ViewTracker(store, self.seat, ViewsConfig(retries=retries),  # type: ignore[arg-type]
                                   self.materializer, publish=self.events.append)
        self.harness = Harness(store)
        if track_first:
            self.track()  # the feeds start here
        for body in (raw(root), clean(), weekly()):
            self.define(body)

    def define(self, body: dict[str, Any]) -> Any:
        return self.catalog.put(self.catalog.parse(body))

    def data(self, day: str, shop: str = "S1", at: float | None = None) -> None:
        """The outside ETL delivers a Raw partition (its flag's time: ``at``)."""
        folder = self.root / "raw" / shop / f"201505{day}"
        folder.mkdir(parents=True, exist_ok=True)
        flag = folder / "_SUCCESS"
        flag.touch()
        stamp = at if at is not None else time.time()
        os.utime(flag, (stamp, stamp))

    def materialize(self, pattern: str = WEEKLY, mode: Mode = Mode.DEFAULT,
                    plan: bool = False) -> dict[str, tuple[Action, str]]:
        outcome = self.materializer.materialize(pattern, mode, plan)
        return decided(outcome)

    def track(self) -> None:
        self.tracker.track(self.seat.lease_.key, self.seat.lease_.fence)

    def settle(self) -> None:
        """Run every view job to its end, dependencies first, tracking as it goes."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            self.track()
            if not any(row.stored.state.in_flight for row in self.store.views.listing()):
                return
            self.harness.claim()
            wait_for(lambda: not self.store.jobs.count_by_state().get("RUNNING"),
                     what="view jobs to end")
        raise AssertionError("view partitions still in flight")

    def state(self, path: str) -> Any:
        [address] = self.materializer.addresses(path)
        return self.store.views.read([address]).get(address)

    def transitions(self, path: str) -> list[tuple[str, str]]:
        return [(e.previous.value, e.new.value) for e in self.events if e.view.path == path]

    def close(self) -> None:
        for gate in RELEASE.values():
            gate.set()
        self.harness.close()


def decided(outcome: Outcome) -> dict[str, tuple[Action, str]]:
    return {d.address.path: (d.action, d.reason) for d in outcome.decisions}


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'jobserver.db'}")
    store.upgrade()
    yield store
    store.dispose()


@pytest.fixture
def world(lite: Store, tmp_path: Path) -> Iterator[World]:
    FAILING.clear()
    RELEASE.clear()
    w = World(lite, tmp_path / "data")
    yield w
    w.close()


def everything(w: World) -> None:
    for day in DAYS:
        w.data(day, at=time.time() - 3600)
    w.materialize()
    w.settle()


def test_instantiation_takes_the_dependencies_recursively_dependencies_first(
        world: World) -> None:
    plan = list(world.materialize(plan=True))
    assert plan == [*(f"t.src/Raw/S1/2015/05/{d}" for d in ("01",)),
                    "t.stage/Clean/S1/2015/05/01", "t.src/Raw/S1/2015/05/02",
                    "t.stage/Clean/S1/2015/05/02", "t.src/Raw/S1/2015/05/03",
                    "t.stage/Clean/S1/2015/05/03", WEEKLY]
    assert world.store.views.listing() == []  # a plan writes nothing
    assert world.store.jobs.count_by_state() == {}


def test_view_jobs_that_end_before_the_tracker_first_runs_are_tracked(
        store: Store, tmp_path: Path) -> None:
    w = World(store, tmp_path / "data", track_first=False)
    try:
        w.data("01")
        path = "t.stage/Clean/S1/2015/05/01"
        assert w.materialize(path)[path][0] is Action.TRANSFORM
        w.harness.claim()
        wait_for(lambda: w.store.jobs.count_by_state() == {"SUCCEED": 1},
                 what="the view job to succeed")
        w.track()  # the tracker's first round
        assert w.state(path).state is ViewState.MATERIALIZED
    finally:
        w.close()


def test_states_receive_waiting_transforming_materialized(world: World) -> None:
    world.data("01")
    path = "t.stage/Clean/S1/2015/05/01"
    RELEASE[path] = threading.Event()
    assert world.materialize(path)[path][0] is Action.TRANSFORM
    assert world.state(path).state is ViewState.WAITING
    world.harness.claim()
    wait_for(lambda: world.store.jobs.count_by_state().get("RUNNING"), what="the job to run")
    world.track()
    assert world.state(path).state is ViewState.TRANSFORMING
    RELEASE[path].set()
    world.settle()
    row = world.state(path)
    assert row.state is ViewState.MATERIALIZED and row.transformed_at is not None
    assert world.transitions(path) == [("receive", "waiting"), ("waiting", "transforming"),
                                       ("transforming", "materialized")]
    assert world.transitions("t.src/Raw/S1/2015/05/01") == [("receive", "materialized")]
    # Materialized and nothing changed: the next request does nothing.
    assert world.materialize(path)[path] == (
        Action.SKIP, f"materialized at {_iso(row.transformed_at)}; dependencies older; "
                     "version unchanged")


def _iso(moment: Any) -> str:
    from jobserver.views.planner import iso

    return iso(moment)


def test_retrying_then_failed(lite: Store, tmp_path: Path) -> None:
    FAILING.clear()
    w = World(lite, tmp_path / "data", retries=1)
    try:
        w.data("01")
        path = "t.stage/Clean/S1/2015/05/01"
        FAILING.add(path)
        w.materialize(path)
        w.settle()
        row = w.state(path)
        assert (row.state, row.retries) == (ViewState.FAILED, 1)
        assert ("waiting", "retrying") in w.transitions(path) or \
            ("transforming", "retrying") in w.transitions(path)
        assert w.transitions(path)[-1][1] == "failed"
        assert lite.jobs.count_by_state() == {"ERROR": 2}
    finally:
        w.close()


def test_a_noop_view_without_its_flag_is_no_data_and_so_are_its_dependents(
        world: World) -> None:
    path = "t.stage/Clean/S1/2015/05/01"
    plan = world.materialize(path)
    assert plan["t.src/Raw/S1/2015/05/01"][0] is Action.NO_DATA
    assert "no _SUCCESS flag at" in plan["t.src/Raw/S1/2015/05/01"][1]
    assert plan[path] == (Action.NO_DATA, "all dependencies have no data")
    assert world.state(path).state is ViewState.NO_DATA
    assert world.store.jobs.count_by_state() == {}


def test_one_dependency_with_data_materializes_on_incomplete_data_then_again(
        world: World) -> None:
    world.data("03", at=time.time() - 60)
    plan = world.materialize()
    assert [plan[f"t.stage/Clean/S1/2015/05/{d}"][0] for d in DAYS] == [
        Action.NO_DATA, Action.NO_DATA, Action.TRANSFORM]
    assert plan[WEEKLY][0] is Action.TRANSFORM
    world.settle()
    assert world.state(WEEKLY).state is ViewState.MATERIALIZED
    world.data("01")  # the late delivery
    plan = world.materialize()
    assert plan["t.stage/Clean/S1/2015/05/01"][0] is Action.TRANSFORM
    assert plan[WEEKLY] == (Action.TRANSFORM, "dependency t.stage/Clean/S1/2015/05/01 is "
                                              "transformed by this request")


def test_a_rematerialized_dependency_rematerializes_its_dependents_next_time(
        world: World) -> None:
    everything(world)
    first = world.state(WEEKLY).transformed_at
    day = "t.stage/Clean/S1/2015/05/02"
    world.store.views.invalidate(world.materializer.addresses(day))
    world.materialize(day)
    world.settle()
    newer = world.state(day).transformed_at
    assert newer > first
    assert world.materialize(plan=True)[WEEKLY] == (
        Action.TRANSFORM, f"dependency {day} newer ({_iso(newer)}) than own ({_iso(first)})")


def test_a_changed_transformation_is_transformed_again(world: World) -> None:
    everything(world)
    world.define(clean(extra="v2"))
    plan = world.materialize()
    assert plan["t.stage/Clean/S1/2015/05/01"][1].startswith("transformation version changed")
    assert plan[WEEKLY][0] is Action.TRANSFORM
    world.settle()
    assert world.materialize(plan=True)[WEEKLY][0] is Action.SKIP


def test_a_version_overrides_the_transformations_checksum(world: World) -> None:
    world.define(clean(version="1.0.0"))
    everything(world)
    path = "t.stage/Clean/S1/2015/05/01"
    world.define(clean(extra="reformatted", version="1.0.0"))
    assert world.materialize(plan=True)[path][0] is Action.SKIP
    world.define(clean(extra="reformatted", version="1.0.1"))
    assert world.materialize(plan=True)[path][1].startswith("transformation version changed")


def test_a_structure_change_puts_every_partition_back_to_receive(world: World) -> None:
    everything(world)
    changed = clean()
    changed["structure"] = {"fields": [{"name": "id", "type": "string"}]}
    result = world.define(changed)
    assert (result.change, result.reset, result.structure_changed) == ("updated", 3, True)
    world.track()
    for day in DAYS:
        path = f"t.stage/Clean/S1/2015/05/{day}"
        row = world.state(path)
        assert (row.state, row.transformed_at, row.version_checksum) == (
            ViewState.RECEIVE, None, None)
        assert world.transitions(path)[-1] == ("materialized", "receive")
        assert world.materialize(path, plan=True)[path] == (Action.TRANSFORM,
                                                            "never transformed")


def test_reset_transformation_checksums_stores_them_and_runs_nothing(world: World) -> None:
    everything(world)
    jobs = sum(world.store.jobs.count_by_state().values())
    world.define(clean(extra="new jar"))
    plan = world.materialize(mode=Mode.RESET_TRANSFORMATION_CHECKSUMS)
    assert {plan[f"t.stage/Clean/S1/2015/05/{d}"][0] for d in DAYS} == {Action.SET}
    assert sum(world.store.jobs.count_by_state().values()) == jobs
    assert set(a for a, _ in world.materialize(plan=True).values()) == {Action.SKIP}


def test_reset_checksums_and_timestamps_makes_the_lattice_consistent(world: World) -> None:
    everything(world)
    jobs = sum(world.store.jobs.count_by_state().values())
    world.define(clean(extra="v2"))
    world.data("02")  # newer data too
    plan = world.materialize(mode=Mode.RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS)
    assert plan[WEEKLY][0] is Action.SET and "without transforming" in plan[WEEKLY][1]
    assert sum(world.store.jobs.count_by_state().values()) == jobs
    assert set(a for a, _ in world.materialize(plan=True).values()) == {Action.SKIP}


def test_transform_only_runs_the_addressed_partition_alone(world: World) -> None:
    plan = world.materialize(mode=Mode.TRANSFORM_ONLY)
    assert plan == {WEEKLY: (Action.TRANSFORM, "TRANSFORM_ONLY")}
    world.settle()
    assert world.state(WEEKLY).state is ViewState.MATERIALIZED
    assert world.state("t.stage/Clean/S1/2015/05/01") is None  # never instantiated


def test_set_only_materializes_without_a_job(world: World) -> None:
    before = time.time()
    plan = world.materialize(mode=Mode.SET_ONLY)
    assert plan == {WEEKLY: (Action.SET, "SET_ONLY")}
    row = world.state(WEEKLY)
    assert row.state is ViewState.MATERIALIZED and row.transformed_at.timestamp() >= before - 1
    assert world.store.jobs.count_by_state() == {}


def test_invalidate_makes_the_next_materialize_transform(world: World) -> None:
    everything(world)
    assert world.store.views.invalidate(world.materializer.addresses(WEEKLY)) == 1
    world.track()
    assert world.state(WEEKLY).state is ViewState.RECEIVE
    assert world.transitions(WEEKLY)[-1] == ("materialized", "receive")
    assert world.materialize(plan=True)[WEEKLY] == (Action.TRANSFORM, "invalidated")


def test_a_failed_dependency_does_not_stop_dependents_and_success_later_reruns_them(
        world: World) -> None:
    failing = "t.stage/Clean/S1/2015/05/02"
    everything(world)
    FAILING.add(failing)
    world.store.views.invalidate(world.materializer.addresses(failing))
    world.materialize()
    world.settle()
    assert world.state(failing).state is ViewState.FAILED
    assert world.state(WEEKLY).state is ViewState.MATERIALIZED  # on incomplete data
    FAILING.clear()
    plan = world.materialize()
    assert plan[failing] == (Action.TRANSFORM, "failed last time")
    assert plan[WEEKLY] == (Action.TRANSFORM,
                            f"dependency {failing} is transformed by this request")
    world.settle()
    assert world.state(failing).state is ViewState.MATERIALIZED
    assert world.state(WEEKLY).transformed_at > world.state(failing).transformed_at


def test_jobs_wait_for_their_dependencies_jobs(world: World) -> None:
    for day in DAYS:
        world.data(day)
    outcome = world.materializer.materialize(WEEKLY, Mode.DEFAULT)
    weekly_job = world.store.jobs.get(outcome.jobs[next(a for a in outcome.jobs
                                                       if a.path == WEEKLY)])
    upstream = {a.path for a in outcome.jobs if a.path != WEEKLY}
    # Not the upstream jobs themselves (a failed one would let it start during the
    # retry): each upstream partition's gate, held until the tracker settles it.
    links = weekly_job.after or []
    gates = [world.store.jobs.get(link.job) for link in links]
    assert {gate.name.removeprefix("view gate ") for gate in gates} == upstream
    assert {gate.state.value for gate in gates} == {"READY"}
    assert {link.when for link in links} == {"done"}
    world.settle()
    assert {world.store.jobs.get(gate.id).state.value for gate in gates} == {"DISCARDED"}
    assert world.state(WEEKLY).state is ViewState.MATERIALIZED


@pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)
def test_two_nodes_materializing_overlapping_patterns_make_one_job_per_partition(
        store: Store, tmp_path: Path) -> None:
    FAILING.clear()
    w = World(store, tmp_path / "data")
    try:
        for day in DAYS:
            w.data(day)
        other = Materializer(store, w.policy)  # a second node's
        barrier = threading.Barrier(2)
        outcomes: list[Any] = []

        def request(m: Materializer, pattern: str) -> None:
            barrier.wait()
            outcomes.append(m.materialize(pattern, Mode.DEFAULT))

        threads = [threading.Thread(target=request, args=(w.materializer, WEEKLY)),
                   threading.Thread(target=request, args=(
                       other, "t.stage/Clean/S1/2015/05/e(02,03)"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(outcomes) == 2
        # 3 Clean + Weekly, and the gates of the 3 Clean partitions Weekly waits for.
        assert store.jobs.count_by_state() == {"READY": 7}
        shared = [a for a in outcomes[0].jobs if a in outcomes[1].jobs]
        assert len(shared) == 2 and all(outcomes[0].jobs[a] == outcomes[1].jobs[a]
                                        for a in shared)
        w.settle()
        assert w.state(WEEKLY).state is ViewState.MATERIALIZED
    finally:
        w.close()


def test_the_metrics_count_view_partitions_by_state(world: World) -> None:
    from jobserver.metrics import StoreCollector

    world.materialize("t.stage/Clean/S1/2015/05/01")  # no data: two no-data partitions
    [family] = [f for f in StoreCollector(world.store, 10.0).collect()
                if f.name == "jobserver_view_partitions"]
    values = {sample.labels["state"]: sample.value for sample in family.samples}
    assert values["no-data"] == 2 and values["materialized"] == 0


def _jobs_named(store: Store, name: str) -> list[Any]:
    return sorted(store.jobs.list(name=name)[0], key=lambda job: job.id)


def test_a_dependent_joining_a_retrying_partition_waits_for_its_retry(
        lite: Store, tmp_path: Path) -> None:
    FAILING.clear()
    w = World(lite, tmp_path / "data", retries=1)
    try:
        for day in DAYS:
            w.data(day, at=time.time() - 3600)
        clean = "t.stage/Clean/S1/2015/05/01"
        FAILING.add(clean)
        assert w.materialize(clean)[clean][0] is Action.TRANSFORM  # alone: no gate
        assert w.materialize()[clean][0] is Action.JOIN  # Weekly joins its job
        [gate] = _jobs_named(lite, f"view gate {clean}")
        weekly = lite.jobs.get(w.state(WEEKLY).job_id)
        assert gate.id in {link.job for link in weekly.after or []}
        w.harness.claim()  # Clean's three jobs; Weekly's waits for their gates
        wait_for(lambda: set(lite.jobs.count_by_state()) == {"READY", "SUCCEED", "ERROR"},
                 what="the Clean jobs to end")
        w.track()
        assert w.state(clean).state is ViewState.RETRYING
        assert lite.jobs.get(weekly.id).state.value == "READY"
        FAILING.clear()
        w.settle()
        first, retry = _jobs_named(lite, f"view {clean}")
        weekly = lite.jobs.get(weekly.id)
        assert (first.state.value, retry.state.value, weekly.state.value) == (
            "ERROR", "SUCCEED", "SUCCEED")
        assert weekly.started_at >= retry.finished_at
        assert lite.jobs.get(gate.id).state.value == "DISCARDED"
    finally:
        w.close()


def test_a_partition_leaving_flight_without_its_job_lets_its_dependents_go(
        world: World) -> None:
    for day in DAYS:
        world.data(day)
    world.materialize()
    gates = {path: _jobs_named(world.store, f"view gate {path}")[0].id
             for path in (f"t.stage/Clean/S1/2015/05/{day}" for day in DAYS)}
    # Forced materialized while its job waits: its gate goes with the row's change.
    world.materialize("t.stage/Clean/S1/2015/05/01", Mode.SET_ONLY)
    states = world.store.jobs.states(list(gates.values()))
    assert [states[gates[path]].value for path in sorted(gates)] == [
        "DISCARDED", "READY", "READY"]
    # A deleted view is no longer tracked: its partitions' gates go with it.
    world.catalog.delete("t.mart/Weekly")
    world.catalog.delete("t.stage/Clean")
    assert set(world.store.jobs.states(list(gates.values())).values()) == {State.DISCARDED}
