"""The ``BatchConfig`` resource: systems, stages, job groups and how they are chosen.

Parsed strictly (:func:`parse_batch_config`), then checked as a whole (:func:`check_config`):
every name a mapping uses must be declared, a job group's jobs must form a DAG, stage
pairs must sit next to each other in each system that has them, and two job-group
mappings equally specific for the same stage and keys are a tie, refused at load time
naming both. Every problem names its path (``job_group_mapping[3].job_group[0]``).

Job-group resolution (:meth:`BatchConfig.groups_for`): among the mappings of the stage
whose keys all match the run's (system, location and the context's sub_system,
sub_location, custom1, custom2), the most specific wins, comparing which keys each
mapping gives in the order system, sub_system, location, sub_location, custom1,
custom2: ``{system: ORDER}`` beats ``{sub_system: INVOICING}``, and ``{system: ORDER,
sub_system: SHIPMENT}`` beats both.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError

from jobserver.exceptions import InvalidRequest
from jobserver.resources import Ident, parse_resource
from jobserver.spec import (StepSpec, StrictModel, field_path, json_text, refuse,
                            validation_message)

#: Mapping keys in the order that makes a mapping more specific.
MATCH_KEYS = ("system", "sub_system", "location", "sub_location", "custom1", "custom2")
#: Context columns every system has, besides the declared ones: the mapping keys a
#: run's context may give.
BUILTIN_CONTEXT = ("sub_system", "sub_location", "custom1", "custom2")
RESERVED = frozenset({"system", "location", "business_date", "stage", "batch_id"})
MAX_ITEMS = 500


class Period(str, enum.Enum):
    """How far apart a system's business dates are."""

    DAILY = "daily"
    MONTHLY = "monthly"  # each month's last day


class GivenWatermark(StrictModel):
    """The newest business date is given with the run (``--watermark``)."""

    given: Literal[True]


class FileWatermark(StrictModel):
    """The newest business date is the first line of a file (ISO date)."""

    file: str = Field(min_length=1, max_length=1024)


class SqlWatermark(StrictModel):
    """The newest business date is what a query on a named connection returns."""

    sql: str = Field(min_length=1, max_length=8192)
    connection: Ident


Watermark = Union[GivenWatermark, FileWatermark, SqlWatermark]


class StageSettings(StrictModel):
    parallelism: int = Field(default=1, ge=1, le=64)
    resume_from_failure: bool | None = None


class SystemStages(StrictModel):
    system: Ident
    stages: list[Ident] = Field(min_length=1, max_length=32)
    frequency: Period = Period.DAILY
    watermark: Watermark = Field(default_factory=lambda: GivenWatermark(given=True))
    #: The first business date while the control table has none for a location
    #: (default: the watermark's date alone).
    start_date: date | None = None
    resume_from_failure: bool | None = None


class ContextColumn(StrictModel):
    name: Ident
    values: list[Ident] | None = Field(default=None, min_length=1, max_length=MAX_ITEMS)
    #: The systems that have this column (None: every system).
    systems: list[Ident] | None = None


class GroupMapping(StrictModel):
    system: Ident | None = None
    sub_system: Ident | None = None
    location: Ident | None = None
    sub_location: Ident | None = None
    custom1: Ident | None = None
    custom2: Ident | None = None
    stage: Ident
    job_group: list[Ident] = Field(min_length=1, max_length=32)

    def keys(self) -> dict[str, str]:
        return {key: value for key in MATCH_KEYS if (value := getattr(self, key)) is not None}

    def specificity(self) -> tuple[bool, ...]:
        return tuple(getattr(self, key) is not None for key in MATCH_KEYS)


class JobGroupSpec(StrictModel):
    name: Ident
    #: Step templates (any step type, plus ``sequence``), or names of ``jobs`` entries.
    jobs: list[Union[Ident, dict[str, Any]]] = Field(min_length=1, max_length=200)


class BatchConfigSpec(StrictModel):
    name: Ident = "default"
    valid_systems: list[Ident] = Field(min_length=1, max_length=MAX_ITEMS)
    valid_stages: list[Ident] = Field(min_length=1, max_length=64)
    valid_locations: list[Ident] | None = Field(default=None, max_length=MAX_ITEMS)
    system_stage_mapping: list[SystemStages] = Field(min_length=1, max_length=MAX_ITEMS)
    job_group_mapping: list[GroupMapping] = Field(default_factory=list, max_length=MAX_ITEMS)
    job_groups: list[JobGroupSpec] = Field(default_factory=list, max_length=MAX_ITEMS)
    jobs: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_ITEMS)
    context_columns: list[ContextColumn] = Field(default_factory=list, max_length=16)
    stage_pairs: list[list[Ident]] = Field(default_factory=list, max_length=32)
    catch_up_limit: int = Field(default=31, ge=1, le=366)
    resume_from_failure: bool = False
    stage_settings: dict[str, StageSettings] = Field(default_factory=dict, max_length=64)


@dataclass(frozen=True)
class GroupJob:
    """One job of a job group: its step template and optional sequence number."""

    step: Any  # one of jobserver.spec's step models
    sequence: int | None = None


@dataclass
class BatchConfig:
    """A checked config, with its job groups' step templates parsed."""

    spec: BatchConfigSpec
    groups: dict[str, list[GroupJob]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def system(self, name: str) -> SystemStages | None:
        return next((s for s in self.spec.system_stage_mapping if s.system == name), None)

    def groups_for(self, system: str, location: str, stage: str,
                   context: Mapping[str, str]) -> list[str]:
        """The job groups of the most specific mapping that matches; [] if none does."""
        run = {"system": system, "location": location, **context}
        found = [m for m in self.spec.job_group_mapping if m.stage == stage
                 and all(run.get(key) == value for key, value in m.keys().items())]
        if not found:
            return []
        best = max(m.specificity() for m in found)
        winners = [m for m in found if m.specificity() == best]
        if len(winners) > 1:  # check_config() refuses configs where this could happen
            raise InvalidRequest(f"job_group_mapping: {len(winners)} mappings tie for {stage}")
        return list(winners[0].job_group)

    def pair_of(self, system: str, stage: str) -> list[str]:
        """The stages run together with ``stage`` in ``system`` (itself alone if none)."""
        entry = self.system(system)
        stages = entry.stages if entry is not None else []
        for pair in self.spec.stage_pairs:
            if stage in pair and all(s in stages for s in pair):
                return list(pair)
        return [stage]

    def resume_from_failure(self, system: str, stage: str) -> bool:
        """The stage's setting, else the system's, else the config's."""
        settings = self.spec.stage_settings.get(stage)
        if settings is not None and settings.resume_from_failure is not None:
            return settings.resume_from_failure
        entry = self.system(system)
        if entry is not None and entry.resume_from_failure is not None:
            return entry.resume_from_failure
        return self.spec.resume_from_failure

    def parallelism(self, stage: str) -> int:
        settings = self.spec.stage_settings.get(stage)
        return settings.parallelism if settings else 1

    def context_columns(self, system: str) -> dict[str, ContextColumn | None]:
        """The context columns ``system`` has: the declared ones and the builtin."""
        columns: dict[str, ContextColumn | None] = {name: None for name in BUILTIN_CONTEXT}
        for column in self.spec.context_columns:
            if column.systems is None or system in column.systems:
                columns[column.name] = column
        return columns

    def digest(self) -> str:
        text = json.dumps(self.spec.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def parse_batch_config(body: bytes | str | Mapping[str, Any]) -> BatchConfig:
    """Parse and check a ``BatchConfig`` document (``kind`` left out), or raise
    :class:`InvalidRequest` naming every problem."""
    if isinstance(body, (bytes, str)):
        try:
            loaded = json.loads(body)
        except ValueError:
            loaded = None  # parse_resource reports it as malformed
        if isinstance(loaded, dict):
            body = loaded
    if isinstance(body, Mapping):
        body = _normalized(body)
    return check_config(parse_resource(BatchConfigSpec, body), new=True)


def load_spec(document: Mapping[str, Any]) -> BatchConfig:
    """A stored spec (valid when stored) as a config."""
    return check_config(BatchConfigSpec.model_validate_json(json.dumps(document)))


def _normalized(body: Mapping[str, Any]) -> dict[str, Any]:
    """The seed writes ``sub-system``; mapping keys take '-' or '_'."""
    document = dict(body)
    mappings = document.get("job_group_mapping")
    if isinstance(mappings, list):
        document["job_group_mapping"] = [
            {key.replace("-", "_") if isinstance(key, str) else key: value
             for key, value in item.items()} if isinstance(item, dict) else item
            for item in mappings]
    return document


def check_config(spec: BatchConfigSpec, new: bool = False) -> BatchConfig:
    """Check ``spec`` as a whole; :class:`InvalidRequest` lists every problem. A
    ``new`` document (one being saved) must also map a job group to every stage of
    every system; a stored one saved before that rule is still loaded, and its runs
    of such a stage fail at launch, naming it."""
    from jobserver.batches.checks import problems_of, unmapped_stages

    config = BatchConfig(spec)
    problems = problems_of(config) + (unmapped_stages(config) if new else [])
    refuse(problems)
    return config


_STEP = TypeAdapter(StepSpec)


def parse_step(raw: Mapping[str, Any], where: str) -> tuple[GroupJob | None,
                                                           list[dict[str, str]]]:
    """A job template (a step of any type plus ``sequence``) or the problems with it."""
    document = dict(raw)
    sequence = document.pop("sequence", None)
    problems = []
    if sequence is not None and (not isinstance(sequence, int) or isinstance(sequence, bool)
                                 or not 0 <= sequence <= 10_000):
        problems.append({"field": f"{where}.sequence",
                         "message": "expected a whole number from 0 to 10000"})
    try:
        step = _STEP.validate_json(json_text(document))
    except ValidationError as exc:
        return None, problems + [{"field": _under(where, field_path(e["loc"])),
                                  "message": validation_message(e)} for e in exc.errors()]
    return (None if problems else GroupJob(step, sequence)), problems


def _under(where: str, path: str) -> str:
    return where if path == "body" else f"{where}.{path}"
