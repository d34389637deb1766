"""What the datasets pages show, read through the dataset repositories.

A dataset's page lists a page of its partitions that match the ``where`` conditions
(the filter grammar of :mod:`jobserver.datasets.filters`, as ``?where=`` of the API)
and a key range (``from`` ≤ field ≤ ``to``, made into two more conditions), with its
consumers: lag, working-set counts and the FAILED partitions with their errors.
Conditions the grammar refuses answer the page itself (422) with the parser's
messages, naming the condition, and no partitions.

Bounded reads: a page of datasets by (namespace, name); the dataset by name; a page
of ``PAGE`` partitions by the (dataset_id, id) index with the conditions as WHERE
clauses (the API's query); per consumer the repository's view (counts by state on
its (consumer_id, state) index, the first 100 FAILED and IN_PROGRESS partitions, and
at most ``LAG_CAP`` + 1 partitions after its pointer through the commit-order index,
whatever its filter matches: the lag shown counts the matching ones among them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobserver.datasets.consumers import LAG_CAP as CONSUMERS_LAG_CAP
from jobserver.datasets.consumers import ConsumerView
from jobserver.datasets.filters import Filter
from sqlalchemy import func, literal, select

from jobserver.datasets.records import DatasetRecord, PartitionRecord
from jobserver.datasets.repos import consumer_catalog, dataset_catalog, partition_repository
from jobserver.datasets.tables import partitions
from jobserver.exceptions import InvalidRequest
from jobserver.store import Store

#: Datasets, and partitions, on one page.
PAGE = 50
#: Partitions after a consumer's pointer read at most to count its lag.
LAG_CAP = CONSUMERS_LAG_CAP
#: A dataset's partitions counted at most on the list ("100,000+" beyond).
COUNT_CAP = 100_000


def quoted(value: str) -> str:
    """A value as the filter grammar reads it back exactly: double-quoted, with
    ``\\`` and ``"`` escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class PartitionQuery:
    """The partitions a visitor asks for: conditions, a key range on one key field,
    the order and where the page starts."""

    where: tuple[str, ...] = ()
    key_field: str | None = None
    low: str | None = None
    high: str | None = None
    newest_first: bool = True
    cursor: int | None = None

    def bounds(self) -> list[tuple[str, str]]:
        """The key range as (form field, condition) pairs."""
        if not self.key_field:
            return []
        found = []
        for name, op, value in (("from", ">=", self.low), ("to", "<=", self.high)):
            if value:
                found.append((name, f"{self.key_field} {op} {quoted(value)}"))
        return found

    def conditions(self) -> list[str]:
        return [*self.where, *(condition for _, condition in self.bounds())]


@dataclass(frozen=True)
class DatasetPage:
    dataset: DatasetRecord
    partitions: list[PartitionRecord]
    next_cursor: int | None
    consumers: list[ConsumerView]
    problems: list[dict[str, str]] = field(default_factory=list)


def dataset_rows(store: Store, after: tuple[str, str] | None = None, limit: int = PAGE,
                 ) -> tuple[list[DatasetRecord], tuple[str, str] | None]:
    """A page of datasets by (namespace, name) and the ``after`` of the next page."""
    return dataset_catalog(store).list(None, limit, after)


def partition_counts(store: Store, dataset_ids: list[int],
                     cap: int = COUNT_CAP) -> dict[int, int]:
    """Each dataset's partitions, counted up to ``cap`` (a count of ``cap`` means at
    least that many): per dataset one range scan of at most ``cap`` entries of the
    (dataset_id, …) index."""
    counts: dict[int, int] = {}
    with store.tx.read() as conn:
        for dataset_id in dataset_ids:
            capped = (select(literal(1)).select_from(partitions)
                      .where(partitions.c.dataset_id == dataset_id).limit(cap).subquery())
            counts[dataset_id] = int(conn.execute(
                select(func.count()).select_from(capped)).scalar_one())
    return counts


def refused(dataset: DatasetRecord, query: PartitionQuery) -> list[dict[str, str]]:
    """What the filter grammar refuses in ``query`` (each problem naming ``where[i]``,
    ``from`` or ``to``); empty when it reads every condition."""
    problems: list[dict[str, str]] = []
    key = dataset.partition_key
    if query.key_field and key.field(query.key_field) is None:
        return [{"field": "field", "message": f"{query.key_field!r} is not a key field; the "
                 f"key is ({', '.join(key.names)})"}]
    checks = [("where", list(query.where))] + [(name, [text]) for name, text in query.bounds()]
    for where, texts in checks:
        try:
            Filter.parse(texts, key, where)
        except InvalidRequest as exc:
            problems += [{"field": item["field"] if where == "where" else where,
                          "message": item["message"]} for item in exc.details]
    return problems


def dataset_page(store: Store, namespace: str, name: str,
                 query: PartitionQuery = PartitionQuery()) -> DatasetPage:
    """The dataset's page; :class:`NotFound` if there is no such dataset."""
    dataset = dataset_catalog(store).get(namespace, name, count=False)
    consumers = consumer_catalog(store).list(namespace, name, lag_cap=LAG_CAP)
    problems = refused(dataset, query)
    if problems:
        return DatasetPage(dataset, [], None, consumers, problems)
    _, page, following = partition_repository(store).list(namespace, name, query.conditions(),
                                                          query.newest_first, PAGE, query.cursor)
    return DatasetPage(dataset, page, following, consumers)
