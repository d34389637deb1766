"""The built-in planners' sections (``schedules``, ``views``, ``datasets``, ``batches``):
plain settings the planners read; nothing here imports a planner."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from jobserver.config.sections import _Section


class SchedulesConfig(_Section):
    """The schedule evaluator (jobserver.schedules.evaluator)."""

    enabled: bool = True
    # The longest the evaluator sleeps without looking for schedules changed by
    # another node's API or for new job events; it wakes earlier for fire times.
    poll_interval: float = Field(default=1.0, gt=0, le=60)
    # Schedules (and schedule-jobs) handled per transaction.
    batch: int = Field(default=500, ge=1, le=10000)
    # How long evaluation records are kept.
    evaluation_retention: float = Field(default=7 * 86400, ge=60, le=365 * 86400)
    # How long before its fire time a firing that depends on the clock alone (time
    # triggers only, no run constraints) is launched, as a job that may not start
    # before the fire time: the job is in the store when its time comes, however many
    # schedules fire at once (the evaluator starts earlier, up to 60 s, when firing
    # takes longer than half of this). 0 launches every firing when it is due.
    lead_time: float = Field(default=10.0, ge=0, le=300)


class ViewsConfig(_Section):
    """Views (jobserver.views): the tracker of view jobs and the view listeners."""

    enabled: bool = True
    # How many times a failed transformation is submitted again (RETRYING) before the
    # view partition is FAILED (Schedoscope's schedoscope.action.retry).
    retries: int = Field(default=2, ge=0, le=100)
    # The longest the tracker sleeps between looks at view jobs' events.
    poll_interval: float = Field(default=1.0, gt=0, le=60)
    # View scheduling listeners, "module:Class" (on_event(ViewSchedulingEvent)).
    listeners: list[str] = Field(default_factory=list)
    # Restarts of a failing listener before it is disabled (-1: no limit).
    listener_max_retries: int = Field(default=-1, ge=-1)
    # Where a noop view's relative `location` lies (its _SUCCESS flags); None:
    # <data_dir>/views. An absolute location is read as written.
    data_root: Path | None = None
    # View partitions one request (views query, materialize, invalidate) may expand,
    # its dependencies included, counted before they are built (jobserver.views.limits).
    max_partitions: int = Field(default=100_000, ge=1, le=10_000_000)


class DatasetsConfig(_Section):
    """Datasets (jobserver.datasets)."""

    # Consumers a dataset may have; a request adding one more is a 409 naming it.
    max_consumers: int = Field(default=20, ge=1, le=10_000)


class BatchesConfig(_Section):
    """Batches (jobserver.batches)."""

    # The one directory file watermarks ({file: PATH}) are read under: a relative
    # PATH is taken from it, and a PATH that resolves outside it (through '..' or a
    # symlink) is refused when saved and when read. None: <data_dir>/watermarks.
    watermark_dir: Path | None = None
