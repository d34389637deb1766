"""The planner interface: what a planner plugs into the job server.

A planner turns something a user declares (a schedule, a dataset's consumer, a view,
a batch) into jobs the engine runs. The engine does not know any planner by name:
the store, the API, the dashboard and the node ask each installed planner
(:func:`jobserver.planners.installed`) for its part, through this one interface.

Every method has a default that contributes nothing, so a planner implements only the
parts it has. The invariants the core keeps for every part, whoever wrote it:

- **Tables** (:meth:`Planner.define_tables`) are declared on the store's one
  ``MetaData`` (``jobserver.store.models.Base``), so that the schema stays one Alembic
  history; a planner's migrations live with the others.
- **Repositories** (:meth:`Planner.repositories`) are built from the store's
  ``Transactions`` and reached as attributes of the :class:`~jobserver.store.Store`
  by the names given here; two planners may not give the same name.
- **Routes** (:meth:`Planner.blueprints`) go through the API's hooks like every
  other: authentication, the scope and the cost each route declares
  (``jobserver.api.auth``), body and path checks, the change history. A route without
  a declared scope needs ``admin``.
- **Dashboard pages** (:meth:`Planner.pages`) add routes to the dashboard's blueprint
  with ``@ui_page(scope)`` / ``@ui_action(scope)`` and appear in its navigation.
- **Commands** (:meth:`Planner.add_commands`) are client commands of ``jobserver``,
  over the API: bad usage exits 2 having sent nothing, a refused request 1, and
  neither prints a traceback. **Apply kinds** (:meth:`Planner.apply_kinds`) are the
  ``kind:`` values of ``jobserver apply`` documents; a kind belongs to one planner.
- **Node parts** (:meth:`Planner.node_parts`) act under the node's planner seat: one
  node at a time plans, and every write is fenced by the seat's lease.
- **Metrics** keep their names, labels and help texts across releases (operators'
  dashboards and alerts read them) and bounded label values: a node's own
  (:meth:`Planner.node_metrics`) are built once per node, every labelled child created
  at 0 when it starts; the store's (:meth:`Planner.collect`) are read at each scrape
  with bounded reads.
- **Engine hooks** (:meth:`Planner.job_inputs`, :meth:`Planner.retention_rules`; the
  protocols the engine calls them through are in :mod:`jobserver.planners.hooks`) run
  inside the engine's own transactions (a run's end, retention's delete): they never
  commit, and cost nothing more for a job that has nothing of theirs.
  :meth:`Planner.job_outputs` adds what a successful step outputs in a transaction of
  its own, fenced by the run's claim, before the step's SUCCEED is written.
- **Deletion guards** (:meth:`Planner.deletion_guards`) refuse deleting another
  planner's resource that the planner's rows name (a schedule naming a dataset) with a
  ``Conflict``; asked in the deleting transaction, the resource's row locked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from flask import Blueprint
    from prometheus_client.metrics_core import Metric
    from pydantic import BaseModel

    from jobserver.api.auth import Cost
    from jobserver.apply import ResourceFactory
    from jobserver.cli.parsing import ClientOptions, Commands
    from jobserver.config import Config
    from jobserver.loops import Loop
    from jobserver.metrics import NodeMetrics
    from jobserver.planner import PlannerSeat
    from jobserver.planners.hooks import DeletionGuard, JobInputs, JobOutputs, KeepRule
    from jobserver.spec import Policy
    from jobserver.store import Store


@dataclass(frozen=True)
class Route:
    """What the API enforces for one of a planner's endpoints: the scope a caller
    needs, and for a route that changes something its cost against the caller's
    submit budget (``jobserver.api.auth.Cost``; None for a read). An endpoint the
    planner does not declare needs ``admin``."""

    scope: str
    cost: Cost | None = None


@dataclass(frozen=True)
class OpenApiPart:
    """A planner's share of the OpenAPI document: the pydantic models whose JSON
    schemas it needs among the components (request bodies), the schemas it adds
    given those components, and its paths."""

    models: Sequence[type[BaseModel]] = ()
    schemas: Callable[[dict[str, Any]], dict[str, Any]] = lambda components: {}
    paths: Callable[[], dict[str, Any]] = dict


@dataclass(frozen=True)
class Page:
    """A dashboard page: the module that adds its routes to the dashboard's blueprint
    when imported, and the navigation entry of its list page (``ui.<view>``)."""

    module: str
    label: str
    endpoint: str


@dataclass(frozen=True)
class NodeContext:
    """What a node hands a planner's background parts."""

    config: Config
    store: Store
    seat: PlannerSeat
    policy: Policy
    metrics: NodeMetrics
    #: Set at the start of a drain: planning stops.
    stopping: threading.Event
    #: Jobs may start now: wake this node's scheduler and the other nodes'.
    wake_schedulers: Callable[[], None]


class Service(Protocol):
    """A part with threads of its own that is not a :class:`~jobserver.loops.Loop`
    (a set of listener workers): started before the node's loops, stopped after its
    runner, so that it sees every job the node ends."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def loops(self) -> list[Loop]: ...


@dataclass
class NodeParts:
    """A planner's background parts on one node.

    ``planning`` loops stop at the start of a drain (a draining node plans nothing);
    ``tracking`` loops go on until the node stops, as they record what the jobs it
    still runs end with; ``services`` start first and stop last.
    """

    planning: list[Loop] = field(default_factory=list)
    tracking: list[Loop] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)

    def loops(self) -> list[Loop]:
        return [*self.planning, *self.tracking,
                *(loop for service in self.services for loop in service.loops())]


class PlannerMetrics(Protocol):
    """A planner's node-local metrics (:meth:`Planner.node_metrics`): prometheus-client
    objects its background parts move, whatever attributes it gives them."""

    def start_at_zero(self) -> None:
        """Create every labelled child whose label values are known now, at 0: called
        once when the node starts, so that a dashboard reads 0, not "No data", and a
        ``rate()`` alert counts the first event."""


class Planner:
    """A plug-in that plans jobs. Subclasses set :attr:`name` and override the parts
    they contribute; built once per process by :func:`jobserver.planners.installed`."""

    #: Unique among installed planners: how logs, errors and the registry name it.
    name: ClassVar[str] = ""

    def define_tables(self) -> None:
        """Declare the planner's tables on ``jobserver.store.models.Base.metadata``
        (typically: import its ``tables`` module)."""

    def repositories(self, store: Store) -> Mapping[str, Any]:
        """The planner's repositories over ``store.tx``, by the attribute name the
        :class:`~jobserver.store.Store` gives them. The store types them ``Any``; a
        planner's own code reaches them through typed accessors of its own (the
        built-in planners' ``repos`` modules), so that its calls are type-checked."""
        return {}

    def blueprints(self) -> Sequence[Blueprint]:
        """The planner's API routes (under ``/api/v1``)."""
        return ()

    def routes(self) -> Mapping[str, Route]:
        """The scope and cost of each endpoint of :meth:`blueprints` and of the
        dashboard forms of :meth:`pages` (``blueprint.view`` names)."""
        return {}

    def openapi(self) -> Sequence[OpenApiPart]:
        """The planner's share of the OpenAPI document, one part per resource."""
        return ()

    def pages(self) -> Sequence[Page]:
        """The planner's dashboard pages, in navigation order."""
        return ()

    def add_commands(self, sub: Commands, client_options: ClientOptions) -> None:
        """Add the planner's ``jobserver`` commands to ``sub`` (the top-level
        subparsers), in the order ``jobserver --help`` lists them; nothing by default.

        Each is a client command: ``client_options(parser)`` gives it ``--url`` and
        ``--token``, and ``parser.set_defaults(run=...)`` says how it runs:
        ``run(args, client)`` (a :class:`~jobserver.client.Client` built from those
        options) returns the exit code. A command name is unique among all commands
        (argparse refuses a second one). Bad usage raises
        :class:`~jobserver.exceptions.ConfigError` before anything is sent (exit 2);
        an ``ApiError`` of the client is reported in one line (exit 1)."""

    def apply_kinds(self) -> Mapping[str, ResourceFactory]:
        """The ``kind:`` values of ``jobserver apply`` documents the planner handles,
        each with what reads such a document into a :class:`jobserver.apply.Resource`
        (refusing a bad one with :class:`~jobserver.exceptions.InvalidRequest` naming
        the field); the resource applies itself through the API, a dry run first.
        Nothing by default."""
        return {}

    def node_parts(self, node: NodeContext) -> NodeParts:
        """The planner's background parts on a node; nothing by default."""
        return NodeParts()

    def node_metrics(self, registry: Any) -> PlannerMetrics | None:
        """The planner's own metrics on a node, built once per node on ``registry``
        (None in multiprocess mode, where values go to the node's metrics files) when its
        :class:`~jobserver.metrics.NodeMetrics` is; its background parts reach them as
        ``node.metrics.planner(name)``. None: the planner has none."""
        return None

    def collect(self, store: Store) -> Iterable[Metric]:
        """Cluster-wide figures read from ``store`` at every scrape of ``GET /metrics``
        (in whichever API worker answers it), after the engine's; nothing by
        default. Every read is bounded, since a scrape waits for it."""
        return ()

    def job_inputs(self, store: Store) -> JobInputs | None:
        """How the engine takes and gives back the inputs jobs declare, if this
        planner owns them (at most one installed planner does); built once per store,
        after every planner's repositories."""
        return None

    def job_outputs(self, store: Store) -> JobOutputs | None:
        """How the engine adds what successful steps output, if this planner takes it
        (at most one installed planner does); built once per store, after every
        planner's repositories. Without one, a shell step gets no output file to
        write, and a step that returns output anyway fails (not retried) saying so."""
        return None

    def retention_rules(self) -> Sequence[KeepRule]:
        """Why retention must keep an old finished job this planner's rows refer to."""
        return ()

    def deletion_guards(self) -> Sequence[DeletionGuard]:
        """Why another planner's resource that this planner's rows name may not be
        deleted yet; none by default."""
        return ()
