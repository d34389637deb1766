"""Whole-config checks of a ``BatchConfig``: what pydantic cannot see field by field.

:func:`problems_of` also parses the job groups' step templates into the config (a
config is only usable once they are), so it is the one way a spec becomes a
:class:`~jobserver.batches.spec.BatchConfig`.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobserver.batches.compose import group_dependencies
from jobserver.spec import find_cycle
from jobserver.batches.spec import (BUILTIN_CONTEXT, RESERVED, BatchConfig, GroupJob,
                                    parse_step)

Problems = list[dict[str, str]]


def _problem(field: str, message: str) -> dict[str, str]:
    return {"field": field, "message": message}


def _unknown(values: Iterable[str | None], known: Iterable[str], where: str,
             what: str) -> Problems:
    allowed = set(known)
    return [_problem(f"{where}[{index}]",
                     f"unknown {what} {value!r}; expected one of {sorted(allowed)}")
            for index, value in enumerate(values) if value is not None and value not in allowed]


def _unknown_one(value: str | None, known: Iterable[str], where: str, what: str) -> Problems:
    return [dict(p, field=where) for p in _unknown([value], known, where, what)]


def problems_of(config: BatchConfig) -> Problems:
    """Every problem of ``config`` (and its groups parsed into ``config.groups``)."""
    return (_systems(config) + _mappings(config) + _groups(config) + _pairs(config)
            + _context(config) + _settings(config))


def _systems(config: BatchConfig) -> Problems:
    spec, problems = config.spec, []
    seen: dict[str, int] = {}
    for index, entry in enumerate(spec.system_stage_mapping):
        where = f"system_stage_mapping[{index}]"
        problems += _unknown_one(entry.system, spec.valid_systems, f"{where}.system", "system")
        problems += _unknown(entry.stages, spec.valid_stages, f"{where}.stages", "stage")
        if entry.system in seen:
            problems.append(_problem(f"{where}.system", f"{entry.system!r} is mapped already "
                                     f"in system_stage_mapping[{seen[entry.system]}]"))
        seen.setdefault(entry.system, index)
        if len(set(entry.stages)) != len(entry.stages):
            problems.append(_problem(f"{where}.stages", "a stage is listed twice"))
    return problems


def _mappings(config: BatchConfig) -> Problems:
    spec, problems = config.spec, []
    groups = {group.name for group in spec.job_groups}
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for index, mapping in enumerate(spec.job_group_mapping):
        where = f"job_group_mapping[{index}]"
        problems += _unknown_one(mapping.system, spec.valid_systems, f"{where}.system", "system")
        if spec.valid_locations is not None:
            problems += _unknown_one(mapping.location, spec.valid_locations,
                                 f"{where}.location", "location")
        problems += _unknown_one(mapping.stage, spec.valid_stages, f"{where}.stage", "stage")
        problems += _unknown(mapping.job_group, groups, f"{where}.job_group", "job group")
        # Equally specific mappings of one stage tie only when they give the same keys
        # with the same values: then no run could tell them apart.
        key = (mapping.stage, tuple(sorted(mapping.keys().items())))
        if key in seen:
            problems.append(_problem(where, f"ties with job_group_mapping[{seen[key]}]: both "
                                     f"map stage {mapping.stage!r} for {dict(key[1])}"))
        seen.setdefault(key, index)
    return problems


def unmapped_stages(config: BatchConfig) -> Problems:
    """A system's stage that no ``job_group_mapping`` entry could map (none names the
    stage with the system's name or with no system): every run of it would fail at
    launch ("no job group mapped"). The seed invokes a stage by reading the job groups
    applicable to it; it has no stage without any. A mapping narrowed by location or
    a context column counts: whether a run matches it depends on the run."""
    spec, problems = config.spec, []
    for index, entry in enumerate(spec.system_stage_mapping):
        for position, stage in enumerate(entry.stages):
            if not any(m.stage == stage and m.system in (None, entry.system)
                       for m in spec.job_group_mapping):
                problems.append(_problem(
                    f"system_stage_mapping[{index}].stages[{position}]",
                    f"no job_group_mapping maps a job group to stage {stage!r} of system "
                    f"{entry.system!r}: a run of it would have no job to run"))
    return problems


def _groups(config: BatchConfig) -> Problems:
    spec, problems = config.spec, []
    library: dict[str, GroupJob] = {}
    for index, raw in enumerate(spec.jobs):
        job, found = parse_step(raw, f"jobs[{index}]")
        problems += found
        if job is not None:
            if job.step.name in library:
                problems.append(_problem(f"jobs[{index}].name",
                                         f"duplicate job name {job.step.name!r}"))
            library[job.step.name] = job
    for index, group in enumerate(spec.job_groups):
        where = f"job_groups[{index}]"
        if group.name in config.groups:
            problems.append(_problem(f"{where}.name", f"duplicate job group {group.name!r}"))
        jobs, found = _group_jobs(group.jobs, library, where)
        problems += found
        if not found:
            problems += _group_graph(jobs, where, group.name)
            config.groups[group.name] = jobs
    return problems


def _group_jobs(entries: list[str | dict], library: dict[str, GroupJob],
                where: str) -> tuple[list[GroupJob], Problems]:
    jobs, problems = [], []
    for index, entry in enumerate(entries):
        if isinstance(entry, str):
            if entry not in library:
                problems.append(_problem(f"{where}.jobs[{index}]",
                                         f"no job named {entry!r} in jobs"))
                continue
            jobs.append(library[entry])
            continue
        job, found = parse_step(entry, f"{where}.jobs[{index}]")
        problems += found
        if job is not None:
            jobs.append(job)
    names = [job.step.name for job in jobs]
    for index, name in enumerate(names):
        if name in names[:index]:
            problems.append(_problem(f"{where}.jobs[{index}]", f"duplicate job {name!r}"))
    return jobs, problems


def _group_graph(jobs: list[GroupJob], where: str, name: str) -> Problems:
    names = [job.step.name for job in jobs]
    problems = []
    for index, job in enumerate(jobs):
        for dep_index, dep in enumerate(job.step.depends_on or []):
            if dep not in names or dep == job.step.name:
                problems.append(_problem(f"{where}.jobs[{index}].depends_on[{dep_index}]",
                                         f"no other job named {dep!r} in this group"))
    if problems:
        return problems
    cycle = find_cycle(names, group_dependencies(jobs))
    if cycle:
        problems.append(_problem(f"{where}.jobs", f"job group {name!r} has a dependency "
                                 "cycle: " + " -> ".join(cycle)))
    return problems


def _pairs(config: BatchConfig) -> Problems:
    spec, problems = config.spec, []
    paired: dict[str, int] = {}
    for index, pair in enumerate(spec.stage_pairs):
        where = f"stage_pairs[{index}]"
        problems += _unknown(pair, spec.valid_stages, where, "stage")
        if len(pair) < 2 or len(set(pair)) != len(pair):
            problems.append(_problem(where, "a pair names two or more different stages"))
        for stage in pair:
            if stage in paired and paired[stage] != index:
                problems.append(_problem(where, f"stage {stage!r} is in "
                                         f"stage_pairs[{paired[stage]}] already"))
            paired.setdefault(stage, index)
        for entry in spec.system_stage_mapping:
            stages = entry.stages
            if all(stage in stages for stage in pair) and len(pair) >= 2:
                start = stages.index(pair[0])
                if stages[start:start + len(pair)] != list(pair):
                    problems.append(_problem(where, f"in system {entry.system!r} the stages "
                                             f"{pair} do not follow each other in order"))
    return problems


def _context(config: BatchConfig) -> Problems:
    spec, problems, seen = config.spec, [], set()
    for index, column in enumerate(spec.context_columns):
        where = f"context_columns[{index}]"
        if column.name in RESERVED or column.name in BUILTIN_CONTEXT:
            problems.append(_problem(f"{where}.name", f"{column.name!r} is a built-in "
                                     "column"))
        if column.name in seen:
            problems.append(_problem(f"{where}.name", f"duplicate column {column.name!r}"))
        seen.add(column.name)
        problems += _unknown(column.systems or [], spec.valid_systems, f"{where}.systems",
                             "system")
    return problems


def _settings(config: BatchConfig) -> Problems:
    spec = config.spec
    return [_problem(f"stage_settings.{stage}", f"unknown stage {stage!r}; expected one of "
                     f"{sorted(spec.valid_stages)}")
            for stage in spec.stage_settings if stage not in spec.valid_stages]
