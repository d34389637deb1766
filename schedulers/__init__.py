"""Scheduler modes, chosen by ``scheduler.mode``."""

from __future__ import annotations

from jobserver.config import SchedulerMode
from schedulers.base import Scheduler, SchedulerContext


#: The lock whose newest holder is the cluster's active scheduler, per mode.
#: ``distributed`` has none: every node schedules.
ACTIVE_LOCK = {SchedulerMode.SINGLE: "scheduler/global",
               SchedulerMode.LEADER: "election/scheduler"}


def create_scheduler(ctx: SchedulerContext) -> Scheduler:
    from schedulers.distributed import DistributedScheduler
    from schedulers.leader import LeaderScheduler
    from schedulers.single import SingleScheduler

    modes: dict[SchedulerMode, type[Scheduler]] = {
        SchedulerMode.SINGLE: SingleScheduler,
        SchedulerMode.DISTRIBUTED: DistributedScheduler,
        SchedulerMode.LEADER: LeaderScheduler,
    }
    return modes[ctx.config.scheduler.mode](ctx)


__all__ = ["ACTIVE_LOCK", "Scheduler", "SchedulerContext", "create_scheduler"]
