"""The planners' hooks into the engine's own transactions, as one holder.

The store builds its core repositories (runs, jobs, servers, retention) first, each
holding the one :class:`PlannerHooks` of the store, and the installed planners after
them, since a planner's parts are built from the store
(:meth:`~jobserver.planners.base.Planner.repositories`). :meth:`PlannerHooks.install`
then fills the holder, once, before the store is handed to anyone: the engine reads
an attribute per call and knows no planner by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobserver.exceptions import ConfigError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from jobserver.planners.base import Planner
    from jobserver.planners.hooks import (Deletion, DeletionGuard, JobInputs, JobOutputs,
                                          KeepRule)
    from jobserver.store import Store


@dataclass
class PlannerHooks:
    """``inputs``: how the end of a run takes, gives back or consumes the inputs its
    job declares (None: no installed planner owns inputs, and the engine skips the
    call). ``outputs``: how what a successful step outputs is added (None: no
    installed planner takes it). ``keep_rules``: every planner's reasons retention
    keeps an old job. ``deletion_guards``: every planner's say over deleting another
    planner's resources its rows name (:meth:`refuse_deletion`)."""

    inputs: JobInputs | None = None
    outputs: JobOutputs | None = None
    keep_rules: tuple[KeepRule, ...] = ()
    deletion_guards: tuple[DeletionGuard, ...] = ()

    def install(self, planners: Sequence[Planner], store: Store) -> None:
        """Fill the holder from ``planners``, after their repositories are built."""
        owners: dict[str, list[str]] = {"inputs": [], "outputs": []}
        for planner in planners:
            inputs = planner.job_inputs(store)
            if inputs is not None:
                owners["inputs"].append(planner.name)
                self.inputs = inputs
            outputs = planner.job_outputs(store)
            if outputs is not None:
                owners["outputs"].append(planner.name)
                self.outputs = outputs
            self.keep_rules += tuple(planner.retention_rules())
            self.deletion_guards += tuple(planner.deletion_guards())
        for what, names in owners.items():
            if len(names) > 1:
                raise ConfigError(f"planners {', '.join(names)} all take job {what}; "
                                  "at most one may")

    def refuse_deletion(self, conn: Connection, deletion: Deletion) -> None:
        """Ask every installed planner's guard, in the order the planners are
        installed, whether ``deletion`` may go ahead; the first refusal (a
        :class:`~jobserver.exceptions.Conflict`) is raised as it is. The owner of the
        resource calls it in its deleting transaction, after locking the resource's
        row exclusively (:class:`~jobserver.planners.hooks.DeletionGuard`)."""
        for guard in self.deletion_guards:
            guard.refuse(conn, deletion)
