"""The batches pages' data, through the real store (SQLite and PostgreSQL): the
control table as a grid of stage statuses, paged by business date, and one batch's
runtime audit, with real stage jobs run in-process (the config of ``test_batches``)."""

from __future__ import annotations

import pytest

from jobserver.batches.page_grid import batch_audit, batch_grid
from jobserver.exceptions import NotFound
from tests.integration.test_batches import (DAY0, FAIL, day, harness, put,  # noqa: F401
                                            run)
from tests.integration.test_runner import Harness


def statuses(cell: object) -> list[tuple[str, str]]:
    return [(s.stage, s.status.value) for s in cell.stages]  # type: ignore[attr-defined]


def three_days(harness: Harness) -> None:
    """ORDER/IN: days 1 and 2 through every stage; day 3's FND fails."""
    put(harness.store)
    run(harness, "STG", watermark=day(2))
    run(harness, "FND")
    run(harness, "STG", watermark=day(3))
    FAIL.add(("FND", "fnd4"))
    run(harness, "FND")


def test_the_grid_is_systems_by_business_dates_with_stage_statuses(harness: Harness) -> None:
    three_days(harness)
    grid = batch_grid(harness.store)
    assert [d.isoformat() for d in grid.dates] == [day(1), day(2), day(3)]
    (row,) = grid.rows
    assert (row.system, row.location, row.context) == ("ORDER", "IN", "")
    first, _, third = (row.cells[d] for d in grid.dates)
    assert first.status.value == "SUCCESS"
    assert statuses(first) == [("STG", "SUCCESS"), ("FND", "SUCCESS"), ("SNAPSHOT", "SUCCESS")]
    assert statuses(third) == [("STG", "SUCCESS"), ("FND", "FAILED"),
                               ("SNAPSHOT", "NOT_STARTED")]
    assert third.status.value == "FAILED" and "fnd4 failed" in (third.stage("FND").message or "")
    assert grid.older is None and not grid.truncated


def test_the_grid_pages_to_older_dates(harness: Harness) -> None:
    put(harness.store)
    run(harness, "STG", watermark=day(3))
    newest = batch_grid(harness.store, columns=2)
    assert [d.isoformat() for d in newest.dates] == [day(2), day(3)]
    assert newest.older is not None
    older = batch_grid(harness.store, before=newest.older, columns=2)
    assert [d.isoformat() for d in older.dates] == [day(1)] and older.older is None
    assert batch_grid(harness.store, system="HR").rows == []


def test_a_batchs_audit_is_it_its_stages_and_their_jobs(harness: Harness) -> None:
    three_days(harness)
    third = batch_grid(harness.store).rows[0].cells[DAY0.replace(day=3)]
    page = batch_audit(harness.store, third.id)
    assert page.batch.id == third.id
    units = [(u.work_unit, u.work_unit_name, u.status) for u in page.units]
    assert units[:4] == [("batch", f"ORDER/IN/{day(3)}", "FAILED"), ("stage", "STG", "SUCCESS"),
                         ("job", "stg1", "SUCCESS"), ("job", "stg2", "SUCCESS")]
    fnd = [u for u in page.units if u.parent_id == f"{third.id}-FND-1"]
    assert [u.status for u in fnd][:5] == ["SUCCESS"] * 3 + ["FAILED", "NOT_STARTED"]
    assert fnd[0].metrics["records_out"] == 10 and "wall_milliseconds" in fnd[0].metrics
    with pytest.raises(NotFound):
        batch_audit(harness.store, third.id + 1000)
