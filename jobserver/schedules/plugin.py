"""Schedules as a planner (:mod:`jobserver.planners.base`): the schedule catalog, its
routes and page, and the evaluator that fires schedules on the node holding the
planner seat."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobserver.planners.base import NodeContext, NodeParts, OpenApiPart, Page, Planner, Route
from jobserver.scopes import OPERATE, READ, SUBMIT

if TYPE_CHECKING:
    from flask import Blueprint

    from jobserver.planners.hooks import DeletionGuard, KeepRule
    from jobserver.schedules.metrics import ScheduleMetrics
    from jobserver.apply import ResourceFactory
    from jobserver.cli.parsing import ClientOptions, Commands
    from jobserver.store import Store


class SchedulesPlanner(Planner):
    name = "schedules"

    def define_tables(self) -> None:
        from jobserver.schedules import tables  # noqa: F401 - declares them

    def repositories(self, store: Store) -> Mapping[str, Any]:
        from jobserver.schedules.catalog import ScheduleCatalog

        return {"schedules": ScheduleCatalog(store.tx)}

    def blueprints(self) -> Sequence[Blueprint]:
        from jobserver.schedules.api import blueprint

        return [blueprint]

    def routes(self) -> Mapping[str, Route]:
        from jobserver.api.auth import Cost  # the API, not the CLI, reads routes

        # Creating or changing a schedule submits its template, shell steps included
        # (checked like a job's: see check_step_types).
        return {
            "schedules.list_schedules": Route(READ),
            "schedules.get_schedule": Route(READ),
            "schedules.schedule_jobs": Route(READ),
            "schedules.schedule_evaluations": Route(READ),
            "schedules.create_schedule": Route(SUBMIT, Cost.ONE),
            "schedules.put_schedule": Route(SUBMIT, Cost.ONE),
            "schedules.operate_schedule": Route(OPERATE, Cost.FREE),
            "schedules.delete_schedule": Route(OPERATE, Cost.FREE),
            "ui.schedule_switch": Route(OPERATE, Cost.FREE),
        }

    def openapi(self) -> Sequence[OpenApiPart]:
        from jobserver.schedules import openapi
        from jobserver.schedules.spec import ScheduleSpec

        return [OpenApiPart([ScheduleSpec], openapi.schemas, openapi.paths)]

    def pages(self) -> Sequence[Page]:
        return [Page("jobserver.schedules.pages", "Schedules", "ui.schedules")]

    def add_commands(self, sub: Commands, client_options: ClientOptions) -> None:
        """``schedules`` (:mod:`jobserver.schedules.cli`)."""
        from jobserver.schedules import cli

        cli.add_parser(sub, client_options)

    def apply_kinds(self) -> Mapping[str, ResourceFactory]:
        from jobserver.schedules.cli import ScheduleResource

        return {"Schedule": ScheduleResource}

    def node_metrics(self, registry: Any) -> ScheduleMetrics:
        from jobserver.schedules.metrics import ScheduleMetrics

        return ScheduleMetrics(registry)

    def node_parts(self, node: NodeContext) -> NodeParts:
        """The evaluator, unless ``schedules.enabled`` is false; it stops at the start
        of a drain."""
        if not node.config.schedules.enabled:
            return NodeParts()
        from jobserver.datasets.feed import NewPartitions
        from jobserver.schedules.evaluator import ScheduleEvaluator
        from jobserver.schedules.launcher import owner_budget
        from jobserver.schedules.partitions import READER

        api = node.config.api
        evaluator = ScheduleEvaluator(node.store, node.seat, node.config.schedules,
                                      node.policy, node.metrics.planner(self.name),
                                      stopping=node.stopping, release=node.wake_schedulers,
                                      budget=owner_budget(api.submit_rate, api.submit_burst))
        # Read under the cursors the evaluator starts (jobserver.schedules.partitions).
        evaluator.partition_feeds.append(NewPartitions(node.store, READER))
        return NodeParts(planning=[evaluator])

    def retention_rules(self) -> Sequence[KeepRule]:
        """Jobs a template waits for (``after``), and each ``since_last_run``
        template's newest success."""
        from jobserver.schedules.keep import NamedBySchedules

        return [NamedBySchedules()]

    def deletion_guards(self) -> Sequence[DeletionGuard]:
        """A dataset or consumer that a schedule's trigger or job template names is
        not deleted (:mod:`jobserver.schedules.references`)."""
        from jobserver.schedules.references import NamedBySchedule

        return [NamedBySchedule()]
