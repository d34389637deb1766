"""Datasets as a planner (:mod:`jobserver.planners.base`): datasets, their partitions
and consumers, with their routes and page. Consumers plan nothing on their own: the
engine fills a job's inputs when it starts it, and partition triggers are the
schedules planner's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobserver.planners.base import OpenApiPart, Page, Planner, Route
from jobserver.scopes import OPERATE, READ, SUBMIT

if TYPE_CHECKING:
    from flask import Blueprint
    from prometheus_client.metrics_core import Metric

    from jobserver.planners.hooks import JobInputs, JobOutputs, KeepRule
    from jobserver.apply import ResourceFactory
    from jobserver.cli.parsing import ClientOptions, Commands
    from jobserver.store import Store


class DatasetsPlanner(Planner):
    name = "datasets"

    def define_tables(self) -> None:
        from jobserver.datasets import tables  # noqa: F401 - declares them

    def repositories(self, store: Store) -> Mapping[str, Any]:
        from jobserver.datasets.catalog import DatasetCatalog
        from jobserver.datasets.consumers import ConsumerCatalog
        from jobserver.datasets.partitions import PartitionRepository

        datasets = DatasetCatalog(store.tx, store.hooks)
        return {"datasets": datasets, "partitions": PartitionRepository(store.tx, datasets),
                "consumers": ConsumerCatalog(store.tx, datasets)}

    def blueprints(self) -> Sequence[Blueprint]:
        from jobserver.datasets.api import blueprint

        return [blueprint]

    def routes(self) -> Mapping[str, Route]:
        from jobserver.api.auth import Cost  # the API, not the CLI, reads routes

        return {
            "datasets.list_datasets": Route(READ),
            "datasets.get_dataset": Route(READ),
            "datasets.list_partitions": Route(READ),
            "datasets.create_dataset": Route(SUBMIT, Cost.ONE),
            "datasets.put_dataset": Route(SUBMIT, Cost.ONE),
            "datasets.add_partitions": Route(SUBMIT, Cost.ONE),
            "datasets.delete_dataset": Route(OPERATE, Cost.FREE),
            "datasets.delete_partitions": Route(OPERATE, Cost.FREE),
            "datasets.list_consumers": Route(READ),
            "datasets.get_consumer": Route(READ),
            "datasets.put_consumer": Route(SUBMIT, Cost.ONE),
            "datasets.delete_consumer": Route(OPERATE, Cost.FREE),
            "datasets.reset_failed": Route(OPERATE, Cost.FREE),
        }

    def openapi(self) -> Sequence[OpenApiPart]:
        from jobserver.datasets import consumer_openapi, openapi
        from jobserver.datasets.consumer_spec import ConsumerSpec
        from jobserver.datasets.spec import DatasetSpec

        return [OpenApiPart([DatasetSpec], openapi.schemas, openapi.paths),
                OpenApiPart([ConsumerSpec], consumer_openapi.schemas, consumer_openapi.paths)]

    def pages(self) -> Sequence[Page]:
        return [Page("jobserver.datasets.pages", "Datasets", "ui.datasets")]

    def add_commands(self, sub: Commands, client_options: ClientOptions) -> None:
        """``datasets``, ``partitions`` and ``consumers`` (:mod:`jobserver.datasets.cli`)."""
        from jobserver.datasets import cli

        cli.add_parser(sub, client_options)

    def apply_kinds(self) -> Mapping[str, ResourceFactory]:
        from jobserver.datasets.cli import ConsumerResource, DatasetResource

        return {"Dataset": DatasetResource, "Consumer": ConsumerResource}

    def collect(self, store: Store) -> Iterable[Metric]:
        from jobserver.datasets.metrics import consumer_metrics

        return consumer_metrics(store)

    def job_inputs(self, store: Store) -> JobInputs | None:
        """A job's ``inputs`` are consumers' partitions, taken when it starts."""
        from jobserver.datasets.inputs import ConsumerInputs

        return ConsumerInputs(store.consumers)

    def job_outputs(self, store: Store) -> JobOutputs | None:
        """Steps add partitions to datasets (:mod:`jobserver.datasets.outputs`)."""
        from jobserver.datasets.outputs import PartitionOutputs

        return PartitionOutputs(store)

    def retention_rules(self) -> Sequence[KeepRule]:
        """A consumer partition's job while the partition is IN_PROGRESS."""
        from jobserver.datasets.tables import working_sets
        from jobserver.datasets.working_set import IN_PROGRESS
        from jobserver.store.keep import ReferencedBy

        return [ReferencedBy(working_sets.c.job_id, working_sets.c.state == IN_PROGRESS)]
