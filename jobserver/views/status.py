"""Schedoscope's ``views`` query: the state of the view partitions a pattern addresses.

A partition the store has never seen is listed in ``receive`` (Schedoscope
instantiates it on the query). With ``dependencies``, the partitions the addressed
ones read, recursively, are listed too, each with its dependencies' paths; the
``overview`` counts partitions per state over everything matched, however many are
listed (``limit``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from jobserver.views.lattice import instantiate
from jobserver.views.patterns import parse_pattern
from jobserver.views.materialize import Materializer
from jobserver.views.model import StoredPartition, ViewAddress, ViewState
from jobserver.views.store import PartitionRow, ViewRepository


@dataclass(frozen=True)
class PartitionStatus:
    address: ViewAddress
    state: ViewState
    stored: StoredPartition | None
    dependencies: tuple[ViewAddress, ...] | None = None


@dataclass
class ViewsReport:
    partitions: list[PartitionStatus] = field(default_factory=list)
    overview: dict[str, int] = field(default_factory=dict)
    truncated: bool = False


def view_status(materializer: Materializer, repo: ViewRepository, pattern: str | None,
                state: ViewState | None = None, dependencies: bool = False,
                limit: int = 1000) -> ViewsReport:
    """The partitions ``pattern`` addresses (every stored one without a pattern), in
    lattice order (dependencies first), those in ``state`` only when given."""
    if pattern is None:
        return _stored_only(repo, state, limit)
    views = materializer.definitions()
    lattice = instantiate(views, parse_pattern(pattern), recursive=dependencies)
    stored = repo.read(lattice.order)
    report = ViewsReport()
    counts: Counter[str] = Counter()
    for address in lattice.order:
        row = stored.get(address)
        current = row.state if row is not None else ViewState.RECEIVE
        if state is not None and current is not state:
            continue
        counts[current.value] += 1
        if len(report.partitions) >= limit:
            report.truncated = True
            continue
        report.partitions.append(PartitionStatus(
            address, current, row,
            lattice.dependencies.get(address, ()) if dependencies else None))
    report.overview = dict(counts)
    return report


def _stored_only(repo: ViewRepository, state: ViewState | None, limit: int) -> ViewsReport:
    rows: list[PartitionRow] = repo.listing(state=state, limit=limit + 1)
    counts = repo.counts_by_state()
    overview = ({state.value: counts.get(state.value, 0)} if state is not None
                else {name: count for name, count in counts.items() if count})
    return ViewsReport([PartitionStatus(row.address, row.stored.state, row.stored)
                        for row in rows[:limit]], overview, len(rows) > limit)
