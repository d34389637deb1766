"""The views page's data, through the real store (SQLite and PostgreSQL): the status
grid of a pattern with each cell's state, last transformation and the planner's
decision, and materialize and invalidate shown before they run. Real view jobs run
in-process (the lattice of ``test_views``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.requester import PLANNER_ITSELF
from jobserver.store import Store
from jobserver.views.model import Action, Mode, ViewAddress, ViewState
from jobserver.views.page_grid import (MAX_CELLS, invalidate, invalidation_of, materialize,
                                       place, plan_of, view_grid)
from tests.integration.test_views import FAILING, RELEASE, World

CLEAN_MAY = "t.stage/Clean/S1/rymd(20150501-20150504)"


@pytest.fixture
def world(store: Store, tmp_path: Path) -> Iterator[World]:
    FAILING.clear()
    RELEASE.clear()
    w = World(store, tmp_path / "data")
    yield w
    w.close()
    FAILING.clear()


def built(w: World) -> None:
    """Clean of May 1 and 2 materialized, May 3 failed, May 4 without data."""
    for day in ("01", "02", "03"):
        w.data(day, at=time.time() - 3600)
    FAILING.add("t.stage/Clean/S1/2015/05/03")
    w.materialize("t.stage/Clean/S1/rymd(20150501-20150503)")
    w.settle()


def test_the_grid_has_a_row_per_view_and_a_column_per_day(world: World) -> None:
    built(world)
    grid = view_grid(world.materializer, world.store, CLEAN_MAY)
    assert grid.problem is None
    assert grid.columns == ["2015-05-01", "2015-05-02", "2015-05-03", "2015-05-04"]
    (row,) = grid.rows
    assert (row.view, row.label) == ("t.stage/Clean", "S1")
    cells = [row.cells[day] for day in grid.columns]
    assert [cell.state for cell in cells] == [ViewState.MATERIALIZED, ViewState.MATERIALIZED,
                                             ViewState.FAILED, ViewState.RECEIVE]
    assert cells[0].transformed_at is not None and cells[3].transformed_at is None
    assert [cell.action for cell in cells] == [Action.SKIP, Action.SKIP, Action.TRANSFORM,
                                              Action.NO_DATA]
    assert cells[2].reason == "never transformed"  # its only run failed
    assert cells[3].reason == "all dependencies have no data"
    assert grid.counts == {"materialized": 2, "failed": 1, "receive": 1}


def test_views_of_a_pattern_are_rows(world: World) -> None:
    built(world)
    grid = view_grid(world.materializer, world.store,
                     "t.src/Raw/e(S1,S2)/rymd(20150501-20150502)")
    assert [(row.view, row.label) for row in grid.rows] == [("t.src/Raw", "S1"),
                                                            ("t.src/Raw", "S2")]
    assert grid.rows[0].cells["2015-05-01"].state is ViewState.MATERIALIZED
    assert grid.rows[1].cells["2015-05-01"].action is Action.NO_DATA


@pytest.mark.parametrize("pattern, words", [
    ("t.stage/Clean/S1/rymd(2015", "unbalanced parenthesis"),
    ("t.stage/Nope/S1/2015/05/01", "t.stage/Nope"),
    ("t.stage/Clean/S1/rymd(20150101-20171231)", f"limit of {MAX_CELLS:,}"),
    ("  ", "give a pattern"),
])
def test_a_refused_pattern_is_the_refusals_message(world: World, pattern: str,
                                                   words: str) -> None:
    grid = view_grid(world.materializer, world.store, pattern)
    assert grid.problem is not None and words in grid.problem and grid.rows == []


def test_place_without_a_date_uses_the_last_value() -> None:
    assert place(ViewAddress("p", "Shops", ("prod",)), ["env"]) == ("", "prod")
    assert place(ViewAddress("p", "M", ("S1", "2015", "05")), ["shop", "year", "month"]) == \
        ("S1", "2015-05")
    assert place(ViewAddress("p", "X", ("a", "b")), ["x", "y"]) == ("a", "b")


def test_materialize_runs_the_plan_that_was_shown(world: World) -> None:
    world.data("01", at=time.time() - 3600)
    pattern = "t.stage/Clean/S1/2015/05/01"
    shown = plan_of(world.materializer, pattern, Mode.DEFAULT)
    assert shown.counts == {"set": 1, "transform": 1}
    assert world.store.views.listing() == []  # showing writes nothing
    world.data("02", at=time.time() - 3600)  # not addressed: the plan stays the same
    again, outcome = materialize(world.materializer, pattern, Mode.DEFAULT, shown.digest,
                                 PLANNER_ITSELF)
    assert outcome is not None and again.digest == shown.digest
    assert len(outcome.jobs) == 1
    world.settle()
    assert world.state(pattern).state is ViewState.MATERIALIZED


def test_a_plan_changed_since_shown_is_shown_again_not_run(world: World) -> None:
    world.data("01", at=time.time() - 3600)
    pattern = "t.stage/Clean/S1/2015/05/01"
    shown = plan_of(world.materializer, pattern, Mode.DEFAULT)
    world.materialize(pattern)  # someone else ran it meanwhile: now it is being transformed
    again, outcome = materialize(world.materializer, pattern, Mode.DEFAULT, shown.digest,
                                 PLANNER_ITSELF)
    assert outcome is None and again.digest != shown.digest
    assert again.counts == {"skip": 1, "join": 1}


def test_invalidate_says_what_changes_then_changes_it(world: World) -> None:
    built(world)
    preview = invalidation_of(world.materializer, world.store, CLEAN_MAY)
    assert preview.addressed == 4
    assert [a.path for a in preview.changing] == [
        "t.stage/Clean/S1/2015/05/01", "t.stage/Clean/S1/2015/05/02",
        "t.stage/Clean/S1/2015/05/03"]
    assert invalidate(world.materializer, world.store, CLEAN_MAY) == 3
    grid = view_grid(world.materializer, world.store, CLEAN_MAY)
    assert {cell.state for cell in grid.rows[0].cells.values()} == {ViewState.RECEIVE}
    assert grid.rows[0].cells["2015-05-01"].reason == "invalidated"
