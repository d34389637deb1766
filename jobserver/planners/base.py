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
- **Engine hooks** (:meth:`Planner.job_inputs`, :meth:`Planner.retention_rules`) run
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

from jobserver.exceptions import JobServerError

if TYPE_CHECKING:
    from pathlib import Path

    from flask import Blueprint
    from prometheus_client.metrics_core import Metric
    from pydantic import BaseModel
    from sqlalchemy import Connection

    from jobserver.api.auth import Cost
    from jobserver.apply import ResourceFactory
    from jobserver.cli.parsing import ClientOptions, Commands
    from jobserver.config import Config
    from jobserver.loops import Loop
    from jobserver.metrics import NodeMetrics
    from jobserver.planner import PlannerSeat
    from jobserver.spec import Policy
    from jobserver.store import Store
    from jobserver.store.records import ClaimToken


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


class InputsTaken(Protocol):
    """What a run took at its start (:meth:`JobInputs.take`): ``outcome`` is ``run``
    (``inputs``: per input, by position, what its steps are handed), ``succeeded``
    or ``waiting`` (nothing to consume: the job is SUCCEED, or READY again, as
    ``message`` says), ``stopped`` (the run no longer holds the job) or ``failed``
    (the job is ERROR: ``error`` says why). ``count``: how many items the run took."""

    @property
    def outcome(self) -> str: ...

    @property
    def inputs(self) -> list[dict[str, Any]]: ...

    @property
    def error(self) -> str | None: ...

    @property
    def message(self) -> str | None: ...

    @property
    def count(self) -> int: ...


class JobInputs(Protocol):
    """The engine's calls for the inputs a job declares (``JobSpec.inputs``, the
    datasets planner's consumer partitions): taken when a run starts, and given
    back or consumed as the run ends, whatever ends it.

    Invariants: :meth:`consumed` and :meth:`settle` run inside the engine's own
    write transaction, the one that writes the run's end (a SUCCEED, an operator's
    pause or discard, a release, a rescue after a node died), after that write; they
    must not commit, open another transaction or take a lock the engine would wait
    on. The engine calls them wherever a run ends, for jobs with and without inputs,
    so each must cost one indexed statement at most and nothing more for a job
    without inputs (they touch no row of it)."""

    def take(self, token: ClaimToken, inputs: list[dict[str, Any]]) -> InputsTaken:
        """The start of a run that declares ``inputs``, before its first step, in
        transactions of its own fenced by the run's claim ``token``."""
        ...

    def consumed(self, conn: Connection, runs: Sequence[tuple[int, int]]) -> None:
        """Runs (``(job_id, attempt)``) that just SUCCEEDed: what they took is used up."""
        ...

    def settle(self, conn: Connection, job_ids: Sequence[int], *, error: str | None = None,
               count: bool = True) -> int:
        """What the runs of ``job_ids`` took and that are no longer RUNNING goes back
        (``count``: as a failed attempt; ``error``: the reason it keeps, when the
        job has none). Returns how many items went back."""
        ...

    def check(self, inputs: list[Any]) -> None:
        """A submitted job's ``inputs`` (``JobSpec.inputs``, not empty) against the
        store, before the job is stored: what they name must exist and fit, else an
        :class:`~jobserver.exceptions.InvalidRequest` naming ``inputs[i].<field>``.
        Reads only, in a transaction of its own."""
        ...


class OutputRefused(JobServerError):
    """A step's output that cannot be added (:meth:`JobOutputs.add`,
    :meth:`OutputFormat.read`); the message says which item and why. The step fails,
    and is not retried: the same output would be refused again."""


class OutputFormat(Protocol):
    """How a shell step hands over what it outputs: it writes a file, one JSON value a
    line, at the path the environment variable :attr:`env` names. A step sees only
    this part of :class:`JobOutputs`; it never writes to the store."""

    @property
    def env(self) -> str:
        """The name of the variable (``JOBSERVER_PARTITIONS_OUT``)."""
        ...

    def read(self, path: Path) -> list[Any]:
        """What a step wrote to ``path``, none if it wrote no file;
        :class:`OutputRefused` for a file that cannot be read as the format says."""
        ...


class JobOutputs(OutputFormat, Protocol):
    """The engine's call for what a successful step outputs (a shell step's file, a
    python step's ``StepResult.partitions``; the datasets planner's partitions).

    Invariants: :meth:`add` runs after the step succeeded and before its SUCCEED is
    written, in one write transaction of its own that first checks the run still holds
    its job (a run fenced off adds nothing); it adds all the items or none. Adding the
    same items for the same job's same step again is not an error (a step run again
    after its node died finds its own). The engine retries it while the store is
    unreachable; a step with no output costs nothing."""

    def add(self, token: ClaimToken, step: str, items: list[Any]) -> int:
        """Add the items ``step`` of the run of ``token`` output; returns how many
        were new. :class:`OutputRefused` when they cannot be (nothing is added)."""
        ...


class KeepRule:
    """One reason retention keeps an old finished job: a planner's rows still refer
    to it (a batch stage's job, a view partition's, a job a schedule waits for).

    Retention (:mod:`jobserver.store.keep`) asks every installed planner's rules,
    inside its delete transaction and after the candidates' rows are locked, which
    candidates must stay. Invariants: :meth:`kept` only reads, in the caller's
    transaction, and never commits; it costs a bounded number of statements per
    batch, whatever the number of candidates (``IN (ids)`` on an indexed column).
    """

    def read(self, conn: Connection) -> Any:
        """What the rule reads once every few batches, in a read transaction of its
        own, rather than per batch (parsing every schedule's spec): handed back to
        :meth:`kept`. Nothing by default."""
        return None

    def kept(self, conn: Connection, ids: Sequence[int], read: Any) -> Iterable[int]:
        """Those of ``ids`` (old, final, locked) that must stay; ``read``: what
        :meth:`read` returned last."""
        raise NotImplementedError


@dataclass(frozen=True)
class Deletion:
    """A resource about to be deleted, as its owner names it to the deletion guards:
    its ``kind`` (``dataset``, ``consumer``), ``namespace`` and ``name``, and for a
    resource that lives inside another (a consumer inside its dataset) the name of that
    ``parent``, in the same namespace."""

    kind: str
    namespace: str
    name: str
    parent: str | None = None


class DeletionGuard:
    """One planner's say over deleting another's resource that its rows name (the
    schedules planner's: a dataset or consumer a schedule names).

    The owner asks every guard (``PlannerHooks.refuse_deletion``) in its deleting
    transaction, after locking the resource's row exclusively; a planner saving a row
    that names the resource reads that row in share mode, so a save and a delete
    running together cannot both pass. :meth:`refuse` only reads, in the caller's
    transaction, never commits, and costs nothing for a ``kind`` it does not guard."""

    def refuse(self, conn: Connection, deletion: Deletion) -> None:
        """Raise :class:`~jobserver.exceptions.Conflict` (409) naming each of the
        planner's rows that name ``deletion``'s resource; return when none does."""
        raise NotImplementedError


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
        :class:`~jobserver.store.Store` gives them."""
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
