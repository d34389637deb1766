"""Deletion guards (``Planner.deletion_guards``), on SQLite and PostgreSQL: a plug-in
planner refuses the deletion of a dataset or a consumer its rows name, with its own
message, asked inside the deleting transaction; without a guard, the deletion goes.
The schedules planner's guard, over HTTP, is test_schedule_references.py's."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import Connection, select

from jobserver.datasets.consumer_spec import parse_consumer
from jobserver.datasets.spec import parse_dataset
from jobserver.datasets.tables import datasets
from jobserver.exceptions import Conflict, NotFound
from jobserver.planners import installed
from jobserver.planners.base import Planner
from jobserver.planners.hooks import Deletion, DeletionGuard
from jobserver.store import Store
from tests.integration.test_planner_hooks import store_with


class LegalHold(DeletionGuard):
    """Refuses deleting what is on hold; notes whether the dataset's row was there
    to read in the deleting transaction when it was asked."""

    def __init__(self, held: set[Deletion]) -> None:
        self.held = held
        self.saw_row: list[bool] = []

    def refuse(self, conn: Connection, deletion: Deletion) -> None:
        dataset = deletion.parent or deletion.name
        self.saw_row.append(conn.execute(select(datasets.c.id).where(
            datasets.c.namespace == deletion.namespace,
            datasets.c.name == dataset)).first() is not None)
        if deletion in self.held:
            raise Conflict(f"{deletion.kind} {deletion.name} is on legal hold",
                           {"field": "name", "hold": "case 7"})


class HoldsPlanner(Planner):
    name = "holds"

    def __init__(self, guard: LegalHold) -> None:
        self.guard = guard

    def deletion_guards(self) -> Sequence[DeletionGuard]:
        return [self.guard]


def declare(store: Store, dataset: str, consumers: Sequence[str]) -> None:
    store.datasets.create(parse_dataset({"name": dataset, "key": [
        {"name": "day", "type": "date"}]}))
    for name in consumers:
        store.consumers.put(parse_consumer({"dataset": dataset, "name": name}))


def consumer_names(store: Store, dataset: str) -> list[str]:
    return sorted(view.spec.name for view in store.consumers.list("default", dataset))


def test_a_plug_in_guard_refuses_a_deletion_with_its_own_message(store: Store) -> None:
    guard = LegalHold({Deletion("dataset", "default", "audit"),
                       Deletion("consumer", "default", "billing", parent="audit")})
    with store_with(store, [*installed(), HoldsPlanner(guard)]) as holding:
        declare(holding, "audit", ["billing", "free"])

        with pytest.raises(Conflict) as consumer_refused:
            holding.consumers.delete("default", "audit", "billing")
        assert consumer_refused.value.message == "consumer billing is on legal hold"
        assert consumer_refused.value.details == {"field": "name", "hold": "case 7"}
        with pytest.raises(Conflict, match="^dataset audit is on legal hold$"):
            holding.datasets.delete("default", "audit")
        assert consumer_names(holding, "audit") == ["billing", "free"]
        assert holding.datasets.get("default", "audit").name == "audit"

        holding.consumers.delete("default", "audit", "free")  # not held: it goes
        assert consumer_names(holding, "audit") == ["billing"]
        assert guard.saw_row == [True, True, True]


def test_without_a_guard_a_deletion_goes(store: Store) -> None:
    only = [planner for planner in installed() if planner.name == "datasets"]
    with store_with(store, only) as bare:
        assert bare.hooks.deletion_guards == ()
        declare(bare, "scratch", ["reader"])
        bare.consumers.delete("default", "scratch", "reader")
        bare.datasets.delete("default", "scratch")
        with pytest.raises(NotFound):
            bare.datasets.get("default", "scratch")
