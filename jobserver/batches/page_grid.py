"""What the batches pages show: the control table as a grid, and one batch's runtime
audit.

The grid's rows are (system, location, context), its columns the newest ``COLUMNS``
business dates that have a batch (older ones a page further), and each cell a
batch's overall status with its stages' statuses in the system's stage order.

Bounded reads: the distinct business dates, newest first, ``LIMIT COLUMNS``; the
batches of those dates (at most ``MAX_CELLS``, newest first) with their stage rows
by primary key; for the audit, the batch by id, its stage rows and the steps of
its stages' engine jobs by job id (:class:`~jobserver.batches.audit.BatchAudit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from jobserver.batches.audit import AuditRow
from jobserver.batches.records import BatchRecord
from jobserver.batches.repos import audit_repository, batch_store
from jobserver.batches.store import MAX_PAGE, BatchFilter
from jobserver.store import Store

#: Business dates one grid shows.
COLUMNS = 14
#: Batches one grid reads at most (the control table's page).
MAX_CELLS = MAX_PAGE


@dataclass
class GridRow:
    system: str
    location: str
    context: str
    cells: dict[date, BatchRecord] = field(default_factory=dict)


@dataclass
class BatchGrid:
    dates: list[date] = field(default_factory=list)
    rows: list[GridRow] = field(default_factory=list)
    older: date | None = None
    truncated: bool = False


def context_text(context: dict[str, str]) -> str:
    """``sub_system=SHIPMENT,custom1=x`` sorted by key; '' for no context."""
    return ",".join(f"{key}={value}" for key, value in sorted(context.items()))


def batch_grid(store: Store, system: str | None = None, location: str | None = None,
               before: date | None = None, columns: int = COLUMNS) -> BatchGrid:
    """The grid of the ``columns`` newest business dates before ``before`` (all
    when None), oldest on the left; ``older`` is the ``before`` of the next page."""
    newest_first = batch_store(store).business_dates(system, location, before, columns + 1)
    dates = sorted(newest_first[:columns])
    grid = BatchGrid(dates, older=dates[0] if len(newest_first) > columns else None)
    if not dates:
        return grid
    found = batch_store(store).list(BatchFilter(system, location, None, dates[0], dates[-1],
                                                MAX_CELLS))
    grid.truncated = len(found) >= MAX_CELLS
    rows: dict[tuple[str, str, str], GridRow] = {}
    for batch in found:
        key = (batch.system, batch.location, context_text(batch.context))
        rows.setdefault(key, GridRow(*key)).cells[batch.business_date] = batch
    grid.rows = [rows[key] for key in sorted(rows)]
    return grid


@dataclass(frozen=True)
class BatchAuditPage:
    batch: BatchRecord
    units: list[AuditRow]


def batch_audit(store: Store, batch_id: int) -> BatchAuditPage:
    """One batch and its work units (it, its stages, their jobs); :class:`NotFound`
    if there is no such batch."""
    batch = batch_store(store).get(batch_id)
    return BatchAuditPage(batch, audit_repository(store).of_batch(batch))
