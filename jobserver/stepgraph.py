"""Which steps of one job's run may start now, shared by its DAG loop and step threads.

A step that succeeds asks for its successors itself, so that its end and their start
are one write (``Completion.start_next``): a chain's step transition costs one group
commit rather than two transactions of its own. The loop still starts what is ready
at the beginning and after a failure. Every method holds one lock.

Invariant: a step is in exactly one of pending, running (counted) or ended; no more
than ``parallelism`` run at once; nothing new is taken once the graph is halted (a
step failed for good, or the run was cancelled).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from jobserver.states import State
from jobserver.store.records import StepOutcome, StepRecord, runnable_steps

#: A step taken to start, and whether it is the job's last (nothing else pending or
#: running): its final write then also ends the job.
Taken = tuple[StepRecord, bool]


@dataclass
class StepRun:
    """How a step's run ended, and the steps its final write started after it."""

    outcome: StepOutcome
    started: list[Taken] = field(default_factory=list)


class StepGraph:
    def __init__(self, steps: Iterable[StepRecord], parallelism: int) -> None:
        steps = list(steps)
        self._lock = threading.Lock()
        self._done = {step.name for step in steps if step.state is State.SUCCEED}
        self._pending = [step for step in steps if step.state is not State.SUCCEED]
        self._running = 0
        self._parallelism = parallelism
        self._halted = False

    @property
    def pending(self) -> list[StepRecord]:
        """The steps never started, in position order."""
        with self._lock:
            return list(self._pending)

    def take(self) -> list[Taken]:
        """The steps that may start now, up to the free parallelism; they count as
        running from here on."""
        with self._lock:
            return self._take()

    def succeeded(self, step: StepRecord, take_more: bool = True) -> list[Taken]:
        """``step`` succeeded: the steps that may start in its place (as :meth:`take`
        gives them), none unless ``take_more``."""
        with self._lock:
            self._done.add(step.name)
            self._running -= 1
            return self._take() if take_more else []

    def failed(self, step: StepRecord) -> None:
        """``step`` ended without success: it halts the graph."""
        with self._lock:
            self._running -= 1
            self._halted = True

    def give_back(self, taken: Iterable[Taken]) -> None:
        """Steps taken but not started after all (the write that would have started
        them was refused): pending again, and the graph halts."""
        with self._lock:
            for step, _last in taken:
                self._pending.append(step)
                self._running -= 1
            self._pending.sort(key=lambda step: step.position)
            self._halted = True

    def _take(self) -> list[Taken]:
        if self._halted:
            return []
        room = self._parallelism - self._running
        taken: list[Taken] = []
        for step in runnable_steps(self._pending, self._done)[:max(room, 0)]:
            self._pending.remove(step)
            self._running += 1
            taken.append((step, not self._pending and self._running == 1))
        return taken
