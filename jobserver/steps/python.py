"""Python steps: callables registered by name, never imported from a request.

Callables come from code (:meth:`PythonSteps.register`) or from installed packages
through the ``jobserver.steps`` entry-point group. A job names one; a name that is not
registered is refused at submit time. A callable is called as ``fn(ctx, **args)`` and
may return a dict of metrics (for instance ``{"records_written": 1200}``), or a
:class:`~jobserver.steps.StepResult` with metrics and the partitions it adds.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from jobserver.exceptions import StepFailed
from jobserver.states import State
from jobserver.steps import StepResult
from jobserver.store.records import StepOutcome

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "jobserver.steps"


class PythonSteps:
    def __init__(self) -> None:
        self._callables: dict[str, Callable[..., Any]] = {}
        self._entry_points: dict[str, Any] = {}

    @classmethod
    def with_entry_points(cls) -> PythonSteps:
        registry = cls()
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            registry._entry_points[entry.name] = entry
        return registry

    def register(self, name: str, fn: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Register ``fn`` under ``name``; usable as a decorator."""
        def add(function: Callable[..., Any]) -> Callable[..., Any]:
            self._callables[name] = function
            return function
        return add(fn) if fn is not None else add

    def is_registered(self, name: str) -> bool:
        return name in self._callables or name in self._entry_points

    def names(self) -> list[str]:
        return sorted(set(self._callables) | set(self._entry_points))

    def resolve(self, name: str) -> Callable[..., Any]:
        if name not in self._callables:
            # Entry points were installed by the operator; loading is on first use.
            self._callables[name] = self._entry_points[name].load()
        return self._callables[name]

    def run(self, spec: dict[str, Any], ctx: Any) -> StepOutcome:
        started, cpu_before = time.monotonic(), _cpu()
        try:
            result = self.resolve(spec["callable"])(ctx, **spec.get("args", {}))
        except StepFailed as exc:
            return _failed(str(exc), started, cpu_before, retryable=exc.retryable)
        except Exception as exc:
            return _failed(f"{type(exc).__name__}: {exc}", started, cpu_before,
                           output=traceback.format_exc(limit=20))
        wall, cpu = time.monotonic() - started, _cpu() - cpu_before
        if ctx.cancelled.is_set():
            return StepOutcome(State.STOPPED, error="cancelled", wall_seconds=wall)
        partitions = None
        if isinstance(result, StepResult):
            partitions = list(result.partitions) or None
            result = result.metrics
        if result is not None and not _is_metrics(result):
            return StepOutcome(State.ERROR, wall_seconds=wall, cpu_seconds=cpu,
                               error="python step returned "
                                     f"{type(result).__name__}; expected a dict of metrics, "
                                     "a StepResult or None")
        return StepOutcome(State.SUCCEED, wall_seconds=wall, cpu_seconds=cpu,
                           metrics=result or None, partitions=partitions)


def _cpu() -> float:
    # Thread CPU time: other jobs' threads in this process are not charged to the step.
    return time.thread_time()


def _failed(error: str, started: float, cpu_before: float, output: str | None = None,
            retryable: bool = True) -> StepOutcome:
    return StepOutcome(State.ERROR, error=error[:4000], output=output,
                       wall_seconds=time.monotonic() - started,
                       cpu_seconds=_cpu() - cpu_before, retryable=retryable)


def _is_metrics(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    try:
        return len(json.dumps(value)) <= 64 * 1024
    except (TypeError, ValueError):
        return False


__all__ = ["ENTRY_POINT_GROUP", "PythonSteps"]
