"""Scheduler modes, chosen by ``scheduler.mode``."""

from __future__ import annotations

from jobserver.config import SchedulerMode
from jobserver.exceptions import ConfigError
from schedulers.base import Scheduler, SchedulerContext


def create_scheduler(ctx: SchedulerContext) -> Scheduler:
    from schedulers.single import SingleScheduler

    modes: dict[SchedulerMode, type[Scheduler]] = {SchedulerMode.SINGLE: SingleScheduler}
    mode = ctx.config.scheduler.mode
    if mode not in modes:
        raise ConfigError(f"scheduler.mode: {mode.value} is not available in this build; "
                          f"available: {', '.join(m.value for m in modes)}")
    return modes[mode](ctx)


__all__ = ["Scheduler", "SchedulerContext", "create_scheduler"]
