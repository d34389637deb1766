"""Schedule specifications as written by a user: parsed strictly and validated whole.

A schedule is a job template (the body of ``POST /api/v1/jobs``), one trigger (a tree
of ``and``/``or`` over ``time``, ``job_status`` and ``partition`` leaves), run
constraints and the timing of catch-up and timeouts. :func:`parse_schedule` turns a
body into a :class:`ScheduleSpec` or raises :class:`InvalidRequest` naming the field,
e.g. ``trigger.parts[0].cron`` or ``template.steps[0].argv[0]``; anything it accepts
the evaluator can run (every cron expression has been turned into fire times once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from annotated_types import Gt, Le
from pydantic import (AfterValidator, BeforeValidator, Field, StringConstraints,
                      WithJsonSchema, field_validator, model_validator)

from jobserver.exceptions import JobServerError
from jobserver.names import IDENT
from jobserver.resources import (Ident, Instant, NamespacedSpec, check_template, matching,
                                 model_digest, parse_resource)
from jobserver.spec import JobSpec, JsonObject, Policy, StrictModel, Text, refuse

#: "namespace/name", or "name" for the schedule's own namespace.
Ref = Annotated[str, *matching(rf"(?:{IDENT}/)?{IDENT}", "'namespace/name' or 'name', each "
                                "1 to 64 letters, digits, '_', '.' or '-'")]

MAX_DURATION = 3650 * 86400.0
MAX_NESTING = 5
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?")
_DURATION_HELP = "a number of seconds or a string like '90s', '15m', '2h', '1d', '1h30m'"


def _duration(value: Any) -> float:
    """Seconds from a number or a compact string; the range is checked afterwards."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected {_DURATION_HELP}")
    if not isinstance(value, str):
        return float(value)
    match = _DURATION.fullmatch(value.strip())
    if not value.strip() or match is None:
        raise ValueError(f"{value!r} is not a duration; expected {_DURATION_HELP}")
    return float(sum(float(amount) * _UNITS[unit]
                     for amount, unit in zip(match.groups(), _UNITS) if amount))


Duration = Annotated[
    float, BeforeValidator(_duration), Gt(0), Le(MAX_DURATION),
    WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                              {"type": "string", "pattern": f"^{_DURATION.pattern}$"}]})]


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r}; expected an IANA name such as "
                         "'Europe/Berlin' or 'UTC'") from None
    return value


TimeZone = Annotated[str, StringConstraints(max_length=64), AfterValidator(_zone)]
Properties = Annotated[JsonObject, Field(default_factory=dict)]


def _exactly_one(model: Any, names: Iterable[str]) -> None:
    names = list(names)
    given = [name for name in names if getattr(model, name) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {', '.join(names)}"
                         + (f" (got {', '.join(given)})" if given else ""))


class CalendarInterval(StrictModel):
    """Every so many years, months, weeks and days, at a time of day (wall clock)."""

    years: int = Field(default=0, ge=0, le=100)
    months: int = Field(default=0, ge=0, le=1200)
    weeks: int = Field(default=0, ge=0, le=5200)
    days: int = Field(default=0, ge=0, le=36500)
    hour: int = Field(default=0, ge=0, le=23)
    minute: int = Field(default=0, ge=0, le=59)
    second: int = Field(default=0, ge=0, le=59)

    @model_validator(mode="after")
    def _some_period(self) -> CalendarInterval:
        if not (self.years or self.months or self.weeks or self.days):
            raise ValueError("one of years, months, weeks, days must be more than 0")
        return self


class TimeTrigger(StrictModel):
    """Fires on a clock: a crontab line, a fixed interval or a calendar interval."""

    type: Literal["time"]
    cron: str | None = Field(default=None, max_length=200)
    interval: Duration | None = None
    calendar: CalendarInterval | None = None
    timezone: TimeZone = "UTC"
    start: Instant | None = Field(
        default=None, description="the anchor of an interval or calendar interval")
    properties: Properties

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            from jobserver.schedules.timing import parse_cron
            parse_cron(value, "UTC")  # raises ValueError naming the bad field
        return value

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: float | None) -> float | None:
        if value is not None and value < 1:
            raise ValueError("an interval must be at least 1 second")
        return value

    @model_validator(mode="after")
    def _one_clock(self) -> TimeTrigger:
        _exactly_one(self, ("cron", "interval", "calendar"))
        return self


JobState = Literal["SUCCEED", "ERROR", "DISCARDED", "STOPPED"]
DEFAULT_STATES: tuple[JobState, ...] = ("SUCCEED",)


class JobStatusTrigger(StrictModel):
    """Fires when a run of another schedule, or an engine job of a given name, ends in
    one of ``states``."""

    type: Literal["job_status"]
    schedule: Ref | None = None
    job: Text | None = None
    states: list[JobState] = Field(default_factory=lambda: list(DEFAULT_STATES), min_length=1,
                                   max_length=4)
    properties: Properties

    @model_validator(mode="after")
    def _one_target(self) -> JobStatusTrigger:
        _exactly_one(self, ("schedule", "job"))
        return self


def _condition(value: str) -> str:
    """A filter condition's syntax (``date >= 2026-11-01``, ``shop in (a, b)``,
    ``meta.source = x``); its field is checked against the dataset's key when the
    schedule is saved (:mod:`jobserver.schedules.references`, which needs the
    dataset) and again when the trigger is evaluated, since the dataset may have been
    declared again with another key since."""
    from jobserver.datasets.filters import split_condition

    split_condition(value)
    return value


class PartitionTrigger(StrictModel):
    """Fires once ``count`` new partitions of a dataset have arrived: only those that
    match ``filter`` (conditions in the datasets' filter grammar) when it is given,
    and only those ``consumer`` would take (its filter and window) when it is named
    (CDAP's ``triggerOnPartitions``; the launched job consumes them)."""

    type: Literal["partition"]
    dataset: Ref
    consumer: Ident | None = None
    count: int = Field(default=1, ge=1, le=1_000_000)
    filter: list[Annotated[str, AfterValidator(_condition)]] = Field(
        default_factory=list, max_length=16)
    properties: Properties


class AndTrigger(StrictModel):
    """Fires once every part has fired; what each part saw is kept until then."""

    type: Literal["and"]
    parts: list[Trigger] = Field(min_length=1, max_length=16)


class OrTrigger(StrictModel):
    """Fires as soon as any part fires."""

    type: Literal["or"]
    parts: list[Trigger] = Field(min_length=1, max_length=16)


Trigger = Annotated[Union[TimeTrigger, JobStatusTrigger, PartitionTrigger, AndTrigger,
                          OrTrigger], Field(discriminator="type")]
LeafTrigger = Union[TimeTrigger, JobStatusTrigger, PartitionTrigger]
AndTrigger.model_rebuild()
OrTrigger.model_rebuild()

OnUnmet = Literal["wait", "abort"]
_HHMM = re.compile(r"([01]\d|2[0-3]):[0-5]\d")


class ConcurrencyConstraint(StrictModel):
    """Met while fewer than ``limit`` runs of the template are READY or RUNNING."""

    type: Literal["concurrency"]
    limit: int = Field(ge=1, le=10_000)
    on_unmet: OnUnmet = "abort"


class DelayConstraint(StrictModel):
    """Met ``duration`` after the schedule-job was created; it can only wait."""

    type: Literal["delay"]
    duration: Duration
    on_unmet: OnUnmet = "wait"

    @field_validator("on_unmet")
    @classmethod
    def _wait_only(cls, value: str) -> str:
        if value != "wait":
            raise ValueError("a delay can only wait; 'abort' is not allowed")
        return value


class TimeWindowConstraint(StrictModel):
    """Met from ``start`` (inclusive) to ``end`` (exclusive) local time; a window
    whose end is earlier than its start crosses midnight."""

    type: Literal["time_window"]
    start: str
    end: str
    timezone: TimeZone = "UTC"
    on_unmet: OnUnmet = "wait"

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str) -> str:
        if not _HHMM.fullmatch(value):
            raise ValueError(f"{value!r} is not a time of day; expected HH:MM from 00:00 "
                             "to 23:59")
        return value

    @field_validator("end")
    @classmethod
    def _not_empty(cls, value: str, info: Any) -> str:
        if info.data.get("start") == value:
            raise ValueError("end equals start: the window would be empty")
        return value


class SinceLastRunConstraint(StrictModel):
    """Met ``duration`` after the start of the template's last successful run."""

    type: Literal["since_last_run"]
    duration: Duration
    on_unmet: OnUnmet = "abort"


Constraint = Annotated[Union[ConcurrencyConstraint, DelayConstraint, TimeWindowConstraint,
                             SinceLastRunConstraint], Field(discriminator="type")]


class ScheduleSpec(NamespacedSpec):
    """A schedule as submitted; its ``properties`` become each launched job's params."""

    description: str | None = Field(default=None, max_length=500)
    template: JobSpec
    properties: Properties
    trigger: Trigger
    constraints: list[Constraint] = Field(default_factory=list, max_length=16)
    timeout: Duration = Field(default=86400.0, description=(
        "how long a schedule-job may wait for its trigger and constraints"))
    catchup: Literal["latest", "all", "none"] = "latest"
    catchup_window: Duration = Field(default=86400.0, description=(
        "how far back missed fire times are launched with catchup 'all'"))
    misfire_grace: Duration = Field(default=60.0, description=(
        "how late a fire time may be seen and still count as on time"))


_TAGS = frozenset({"time", "job_status", "partition", "and", "or", "concurrency", "delay",
                   "time_window", "since_last_run"})


def parse_schedule(body: bytes | str | dict, policy: Policy) -> ScheduleSpec:
    """Parse and validate a schedule; raise :class:`InvalidRequest` (every problem in
    ``details``, the first in the message) or :class:`MalformedRequest` (not JSON)."""
    spec = parse_resource(ScheduleSpec, body, _TAGS)
    check_template(spec.template, policy, "template")
    refuse(_check_trigger(spec.trigger, "trigger", 0))
    return spec


def _check_trigger(trigger: Any, where: str, depth: int) -> list[dict[str, str]]:
    """Nesting depth, and fire times of every time leaf computed once."""
    if isinstance(trigger, (AndTrigger, OrTrigger)):
        if depth >= MAX_NESTING:
            return [{"field": where,
                     "message": f"and/or nested deeper than {MAX_NESTING} levels"}]
        return [problem for index, part in enumerate(trigger.parts)
                for problem in _check_trigger(part, f"{where}.parts[{index}]", depth + 1)]
    if isinstance(trigger, TimeTrigger):
        return _check_clock(trigger, where)
    return []


def _check_clock(trigger: TimeTrigger, where: str) -> list[dict[str, str]]:
    from jobserver.schedules.timing import FireTimes
    now = datetime.now(timezone.utc)
    field = where + (".cron" if trigger.cron is not None else "")
    try:
        first = FireTimes.of(trigger, now).next_after(now)
    except (JobServerError, ValueError, OverflowError) as exc:
        return [{"field": field, "message": f"no fire times can be computed: {exc}"}]
    if first is None:
        return [{"field": field, "message": "this trigger never fires"}]
    return []


def load_spec(stored: dict[str, Any]) -> ScheduleSpec:
    """A spec as stored (``model_dump(mode="json")`` of one :func:`parse_schedule`
    accepted), read back without the policy's checks: a schedule accepted once stays
    readable when the node's policy changes. Datetimes are ISO strings in JSON, which
    strict validation accepts only from JSON text."""
    return ScheduleSpec.model_validate_json(json.dumps(stored))


def spec_hash(spec: ScheduleSpec) -> str:
    """The digest of the spec's canonical JSON: equal specs, equal hashes."""
    return model_digest(spec)


def leaves(trigger: Trigger) -> list[tuple[str, LeafTrigger]]:
    """Every leaf of the tree with its path: "" for a lone leaf, else the dot-joined
    indexes of ``parts`` ("0", "1.0", …), in tree order."""
    if not isinstance(trigger, (AndTrigger, OrTrigger)):
        return [("", trigger)]
    found: list[tuple[str, LeafTrigger]] = []
    for index, part in enumerate(trigger.parts):
        for path, leaf in leaves(part):
            found.append((f"{index}.{path}" if path else str(index), leaf))
    return found


def qualify(ref: str, namespace: str) -> str:
    """A schedule or dataset reference made "namespace/name"."""
    return ref if "/" in ref else f"{namespace}/{ref}"


def watch_targets(spec: ScheduleSpec) -> set[tuple[str, str]]:
    """What the schedule's event triggers listen to, as (kind, target) pairs: ("job",
    name), ("schedule", "ns/name"), ("dataset", "ns/name")."""
    targets: set[tuple[str, str]] = set()
    for _, leaf in leaves(spec.trigger):
        if isinstance(leaf, JobStatusTrigger):
            if leaf.job is not None:
                targets.add(("job", leaf.job))
            elif leaf.schedule is not None:
                targets.add(("schedule", qualify(leaf.schedule, spec.namespace)))
        elif isinstance(leaf, PartitionTrigger):
            targets.add(("dataset", qualify(leaf.dataset, spec.namespace)))
    return targets
