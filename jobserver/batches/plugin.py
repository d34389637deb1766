"""Batches as a planner (:mod:`jobserver.planners.base`): batch configs, batches and
their audit, their routes and page, and on the node the tracker that moves each
batch's stages on as their jobs end."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobserver.planners.base import NodeContext, NodeParts, OpenApiPart, Page, Planner, Route
from jobserver.scopes import OPERATE, READ, SUBMIT

if TYPE_CHECKING:
    from flask import Blueprint
    from prometheus_client.metrics_core import Metric

    from jobserver.planners.hooks import KeepRule
    from jobserver.apply import ResourceFactory
    from jobserver.cli.parsing import ClientOptions, Commands
    from jobserver.store import Store


class BatchesPlanner(Planner):
    name = "batches"

    def define_tables(self) -> None:
        from jobserver.batches import tables  # noqa: F401 - declares them

    def repositories(self, store: Store) -> Mapping[str, Any]:
        from jobserver.batches.audit import BatchAudit
        from jobserver.batches.catalog import BatchConfigCatalog
        from jobserver.batches.store import BatchStore

        batches = BatchStore(store.tx)
        return {"batch_configs": BatchConfigCatalog(store.tx), "batches": batches,
                "batch_audit": BatchAudit(store.tx, batches)}

    def blueprints(self) -> Sequence[Blueprint]:
        from jobserver.batches.api import blueprint

        return [blueprint]

    def routes(self) -> Mapping[str, Route]:
        # A run launches the config's stage jobs; the config's shell steps were checked
        # against the scopes of whoever put it (like a schedule's template).
        from jobserver.api.auth import Cost  # the API, not the CLI, reads routes

        return {
            "batches.list_batches": Route(READ),
            "batches.batch_audit": Route(READ),
            "batches.get_batch_run": Route(READ),
            "batches.list_batch_configs": Route(READ),
            "batches.get_batch_config": Route(READ),
            "batches.run_batches": Route(SUBMIT, Cost.PER_JOB),
            "batches.put_batch_config": Route(SUBMIT, Cost.ONE),
            "batches.delete_batch_config": Route(OPERATE, Cost.FREE),
        }

    def openapi(self) -> Sequence[OpenApiPart]:
        from jobserver.batches import openapi
        from jobserver.batches.planner import RunRequest
        from jobserver.batches.spec import BatchConfigSpec

        return [OpenApiPart([BatchConfigSpec, RunRequest], openapi.schemas, openapi.paths)]

    def pages(self) -> Sequence[Page]:
        return [Page("jobserver.batches.pages", "Batches", "ui.batches")]

    def add_commands(self, sub: Commands, client_options: ClientOptions) -> None:
        """``batch`` (:mod:`jobserver.batches.cli`)."""
        from jobserver.batches import cli

        cli.add_parser(sub, client_options)

    def apply_kinds(self) -> Mapping[str, ResourceFactory]:
        from jobserver.batches.cli import BatchConfigResource

        return {"BatchConfig": BatchConfigResource}

    def collect(self, store: Store) -> Iterable[Metric]:
        from jobserver.batches.metrics import batch_metrics

        return batch_metrics(store)

    def node_parts(self, node: NodeContext) -> NodeParts:
        """The tracker: it goes on through a drain, recording how the stages the
        node still runs end."""
        from jobserver.batches.tracker import BatchTracker

        return NodeParts(tracking=[BatchTracker(node.store, node.seat, node.policy,
                                                stopping=node.stopping)])

    def retention_rules(self) -> Sequence[KeepRule]:
        """A batch stage's job (its newest run): the batch audit reads its steps."""
        from jobserver.batches.tables import batch_stages
        from jobserver.store.keep import ReferencedBy

        return [ReferencedBy(batch_stages.c.job_id)]
