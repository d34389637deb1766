"""Views as a planner (:mod:`jobserver.planners.base`): view definitions and
partitions, their routes and page, and on the node the tracker of view jobs with the
scheduling listeners it feeds."""

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


class ViewsPlanner(Planner):
    name = "views"

    def define_tables(self) -> None:
        from jobserver.views import tables  # noqa: F401 - declares them

    def repositories(self, store: Store) -> Mapping[str, Any]:
        from jobserver.views.store import ViewRepository

        return {"views": ViewRepository(store.tx)}

    def blueprints(self) -> Sequence[Blueprint]:
        from jobserver.views.api import blueprint

        return [blueprint]

    def routes(self) -> Mapping[str, Route]:
        # Saving a definition submits its job template (shell steps need 'shell' too);
        # materializing submits the templates' jobs, charged per job by the requester.
        from jobserver.api.auth import Cost  # the API, not the CLI, reads routes

        return {
            "views.list_view_definitions": Route(READ),
            "views.get_view_definition": Route(READ),
            "views.list_views": Route(READ),
            "views.put_view_definition": Route(SUBMIT, Cost.ONE),
            "views.materialize": Route(SUBMIT, Cost.PER_JOB),
            "views.materialize_path": Route(SUBMIT, Cost.PER_JOB),
            "views.delete_view_definition": Route(OPERATE, Cost.FREE),
            "views.invalidate": Route(OPERATE, Cost.FREE),
            "ui.views_materialize": Route(SUBMIT, Cost.PER_JOB),
            "ui.views_invalidate": Route(OPERATE, Cost.FREE),
        }

    def openapi(self) -> Sequence[OpenApiPart]:
        from jobserver.views import openapi
        from jobserver.views.spec import ViewSpec

        return [OpenApiPart([ViewSpec], openapi.schemas, openapi.paths)]

    def pages(self) -> Sequence[Page]:
        return [Page("jobserver.views.pages", "Views", "ui.views")]

    def add_commands(self, sub: Commands, client_options: ClientOptions) -> None:
        """``materialize``, ``invalidate`` and ``views`` (:mod:`jobserver.views.cli`)."""
        from jobserver.views import cli

        cli.add_parser(sub, client_options)

    def apply_kinds(self) -> Mapping[str, ResourceFactory]:
        from jobserver.views.cli import ViewResource

        return {"View": ViewResource}

    def collect(self, store: Store) -> Iterable[Metric]:
        from jobserver.views.metrics import view_metrics

        return view_metrics(store)

    def node_parts(self, node: NodeContext) -> NodeParts:
        """The tracker (it stops at the start of a drain) and the listeners it feeds
        (they stop last, having seen every view job the node ended); nothing unless
        ``views.enabled``."""
        if not node.config.views.enabled:
            return NodeParts()
        from jobserver.views.listeners import ViewListeners
        from jobserver.views.materialize import Materializer
        from jobserver.views.tracker import ViewTracker

        listeners = ViewListeners.from_config(node.config, node.metrics)
        tracker = ViewTracker(node.store, node.seat, node.config.views,
                              Materializer(node.store, node.policy,
                                           data_root=node.config.views_root),
                              publish=listeners.publish, stopping=node.stopping)
        return NodeParts(planning=[tracker], services=[listeners])

    def retention_rules(self) -> Sequence[KeepRule]:
        """A view partition's job: the tracker settles the partition from it."""
        from jobserver.store.keep import ReferencedBy
        from jobserver.views.tables import view_partitions

        return [ReferencedBy(view_partitions.c.job_id)]
