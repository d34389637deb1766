"""Consumer partitions as the inputs jobs declare: the datasets planner's
:class:`~jobserver.planners.hooks.JobInputs`, which the engine calls when a run starts
and in the transaction that writes its end (:mod:`jobserver.datasets.working_set`
says where each partition goes)."""

from __future__ import annotations

from typing import Any

from jobserver.datasets import working_set
from jobserver.datasets.consumers import ConsumerCatalog
from jobserver.datasets.working_set import Taken
from jobserver.store.records import ClaimToken


class ConsumerInputs:
    """A job's ``inputs`` are consumers' partitions. :meth:`consumed` and
    :meth:`settle` are the working set's own statements, called as they are: the
    engine's end of a run pays no more than one UPDATE, which matches no row of a
    job without inputs (``working_sets.job_id`` is indexed)."""

    #: SUCCEED: the runs' IN_PROGRESS partitions are DONE.
    consumed = staticmethod(working_set.consumed)
    #: Any other end: the runs' IN_PROGRESS partitions go back (NEW, or FAILED).
    settle = staticmethod(working_set.settle)

    def __init__(self, consumers: ConsumerCatalog) -> None:
        self._consumers = consumers

    def check(self, inputs: list[Any]) -> None:
        """A submitted job's inputs against the catalog
        (:meth:`ConsumerCatalog.check_inputs`)."""
        self._consumers.check_inputs(inputs)

    def take(self, token: ClaimToken, inputs: list[dict[str, Any]]) -> Taken:
        """Fill and claim for each input (:meth:`ConsumerCatalog.take`)."""
        return self._consumers.take(token, inputs)
