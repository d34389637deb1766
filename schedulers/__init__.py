"""Scheduler modes, chosen by ``scheduler.mode``."""

from __future__ import annotations

from jobserver.config import SchedulerMode
from locks.base import election_key
from schedulers.base import Scheduler, SchedulerContext
from schedulers.distributed import DistributedScheduler
from schedulers.leader import ELECTION, LeaderScheduler
from schedulers.single import GLOBAL_LOCK, SingleScheduler

#: The lock whose newest holder is the cluster's active scheduler, per mode.
#: ``distributed`` has none: every node schedules.
ACTIVE_LOCK = {SchedulerMode.SINGLE: GLOBAL_LOCK,
               SchedulerMode.LEADER: election_key(ELECTION)}


def create_scheduler(ctx: SchedulerContext) -> Scheduler:
    modes: dict[SchedulerMode, type[Scheduler]] = {
        SchedulerMode.SINGLE: SingleScheduler,
        SchedulerMode.DISTRIBUTED: DistributedScheduler,
        SchedulerMode.LEADER: LeaderScheduler,
    }
    return modes[ctx.config.scheduler.mode](ctx)


__all__ = ["ACTIVE_LOCK", "Scheduler", "SchedulerContext", "create_scheduler"]
