"""Schedoscope's ``views`` query: the state of the view partitions a pattern addresses.

A partition the store has never seen is listed in ``receive`` (Schedoscope
instantiates it on the query). With ``dependencies``, the partitions the addressed
ones read, recursively, are listed too, each with its dependencies' paths; the
``overview`` counts partitions per state over everything matched, however many are
listed.

Bounded: the lattice is at most ``views.max_partitions`` partitions, dependencies
included (:mod:`jobserver.views.limits`: a 422 before it is built); an answer is a
page of at most ``limit`` partitions and :data:`MAX_LISTED_LINKS` dependency paths
from ``offset`` on, and says where the next page starts (``next_offset``).
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


#: Dependency paths one answer lists at most; a page ends before the partition that
#: would pass it (a page holds at least one partition).
MAX_LISTED_LINKS = 100_000


@dataclass
class ViewsReport:
    partitions: list[PartitionStatus] = field(default_factory=list)
    overview: dict[str, int] = field(default_factory=dict)
    truncated: bool = False
    #: Where the next page starts (``offset``), when this one did not list the rest.
    next_offset: int | None = None
    #: Dependency paths listed.
    links: int = 0


def view_status(materializer: Materializer, repo: ViewRepository, pattern: str | None,
                state: ViewState | None = None, dependencies: bool = False,
                limit: int = 1000, offset: int = 0) -> ViewsReport:
    """The partitions ``pattern`` addresses (every stored one without a pattern), in
    lattice order (dependencies first), those in ``state`` only when given: a page of
    ``limit`` of them from the ``offset``-th on."""
    if pattern is None:
        return _stored_only(repo, state, limit)
    views = materializer.definitions()
    lattice = instantiate(views, parse_pattern(pattern), recursive=dependencies)
    stored = repo.read(lattice.order)
    report = ViewsReport()
    counts: Counter[str] = Counter()
    matched = 0
    for address in lattice.order:
        row = stored.get(address)
        current = row.state if row is not None else ViewState.RECEIVE
        if state is None or current is state:
            counts[current.value] += 1
            if matched >= offset and report.next_offset is None:
                reads = lattice.dependencies.get(address, ()) if dependencies else None
                _list(report, matched, limit, PartitionStatus(address, current, row, reads))
            matched += 1
    report.overview = dict(counts)
    report.truncated = report.next_offset is not None
    return report


def _list(report: ViewsReport, index: int, limit: int, item: PartitionStatus) -> None:
    """List the ``index``-th matching partition, from the page's offset on; the first
    one past the page's end (``limit`` partitions, or :data:`MAX_LISTED_LINKS`
    dependency paths) is where the next page starts."""
    links = report.links + len(item.dependencies or ())
    if len(report.partitions) >= limit or (report.partitions and links > MAX_LISTED_LINKS):
        report.next_offset = index
        return
    report.links = links
    report.partitions.append(item)


def _stored_only(repo: ViewRepository, state: ViewState | None, limit: int) -> ViewsReport:
    rows: list[PartitionRow] = repo.listing(state=state, limit=limit + 1)
    counts = repo.counts_by_state()
    overview = ({state.value: counts.get(state.value, 0)} if state is not None
                else {name: count for name, count in counts.items() if count})
    return ViewsReport([PartitionStatus(row.address, row.stored.state, row.stored)
                        for row in rows[:limit]], overview, len(rows) > limit)
