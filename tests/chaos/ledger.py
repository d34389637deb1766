"""The ledger that chaos jobs append to, and the checker that judges a run by it.

Every chaos job has one shell step that appends two lines to a shared ledger file::

    <job id> <step attempt> <fence> <job attempt> <node> start <unix time>
    ... sleeps briefly ...
    <job id> <step attempt> <fence> <job attempt> <node> end <unix time>

Each ``echo >> ledger`` is one ``write`` to a file opened with ``O_APPEND``, so lines
of concurrent steps never interleave. A run whose process was killed has a ``start``
and no ``end``; a run that ended while its node was stopped or partitioned has an
``end`` but its node's final write was (or should have been) refused.

The store says which run *counted*: the job row's final ``(fence, attempt)`` and the
job-level ``SUCCEED`` rows of the audit trail, which are written in the same
transaction as the compare-and-set that finishes the job. :func:`check` puts the two
together and counts violations; a clean run has every count at zero.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FINAL_STATES = {"SUCCEED", "DISCARDED"}


#: How long a held step waits for its gate at most, so that a test that never opens
#: the gate still ends (its jobs then simply run this long).
HOLD_LIMIT = 60.0


def step_argv(ledger: Path, sleep: float = 0.05, gate: Path | None = None) -> list[str]:
    """The shell step of a chaos job: a ``start`` line, a short sleep, an ``end`` line.

    With a ``gate``, the step is *held*: after the sleep it waits until the gate file
    exists (see :data:`HOLD_LIMIT`). A fault test holds a few jobs so that the node it
    hurts is surely running some at that moment, however slowly the machine submits.
    """
    who = ("$JOBSERVER_JOB_ID $JOBSERVER_ATTEMPT $JOBSERVER_FENCE $JOBSERVER_JOB_ATTEMPT "
           "$JOBSERVER_NODE")
    path = shlex.quote(str(ledger))
    wait = ""
    if gate is not None:
        polls = int(HOLD_LIMIT / 0.02)
        wait = (f"i=0; while [ ! -e {shlex.quote(str(gate))} ] && [ $i -lt {polls} ]; "
                f"do sleep 0.02; i=$((i+1)); done; ")
    script = (f'echo "{who} start $(date +%s.%N)" >> {path}; sleep {sleep}; {wait}'
              f'echo "{who} end $(date +%s.%N)" >> {path}')
    return ["sh", "-c", script]


def job_spec(name: str, ledger: Path, lock_key: str | None = None, sleep: float = 0.05,
             priority: int = 0, gate: Path | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "priority": priority, "steps": [
        {"name": "s", "type": "shell", "argv": step_argv(ledger, sleep, gate)}]}
    if lock_key is not None:
        spec["lock_key"] = lock_key
    return spec


@dataclass
class Run:
    """One execution of a job's step, as the ledger saw it."""

    job: int
    attempt: int        # the job attempt (one per claim)
    step_attempt: int
    fence: int
    node: str
    start: float | None = None
    end: float | None = None
    starts: int = 0     # how many "start" lines this (job, attempt) has


@dataclass
class Ledger:
    runs: dict[tuple[int, int], Run]
    malformed: list[str]

    def runs_of(self, job: int) -> list[Run]:
        return sorted((r for (j, _), r in self.runs.items() if j == job),
                      key=lambda r: r.attempt)

    def started_after(self, when: float, node: str | None = None,
                      not_node: str | None = None) -> list[Run]:
        return [r for r in self.runs.values() if r.start is not None and r.start >= when
                and (node is None or r.node == node)
                and (not_node is None or r.node != not_node)]


def parse(path: Path) -> Ledger:
    runs: dict[tuple[int, int], Run] = {}
    malformed = []
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        parts = line.split()
        try:
            job, step_attempt, fence, attempt, node, kind, at = parts
            key = (int(job), int(attempt))
            run = runs.setdefault(key, Run(int(job), int(attempt), int(step_attempt),
                                           int(fence), node))
            if kind == "start":
                run.starts += 1
                run.start = float(at) if run.start is None else min(run.start, float(at))
            elif kind == "end":
                run.end = float(at) if run.end is None else max(run.end, float(at))
            else:
                raise ValueError(kind)
            if (run.fence, run.node) != (int(fence), node):
                run.starts += 1  # one attempt number under two owners: a duplicate
        except ValueError:
            malformed.append(line)
    return Ledger(runs, malformed)


@dataclass
class JobOutcome:
    """What the store says about one job at the end of a run."""

    id: int
    state: str
    fence: int
    attempt: int
    lock_key: str | None
    #: ``(fence, attempt)`` of every job-level SUCCEED in the audit trail
    succeeded: list[tuple[int, int]] = field(default_factory=list)
    #: how many times orphan rescue moved it (RUNNING -> READY/ERROR "node ... died")
    rescues: int = 0
    #: how many times its own node gave it back (RUNNING -> READY "...; re-queued"),
    #: e.g. after losing the job's segment lock
    releases: int = 0


@dataclass
class Report:
    """Violation counts (all must be zero) and a few facts about the run."""

    completed_twice: int = 0      # jobs that reached end + SUCCEED under two claims
    duplicate_attempts: int = 0   # (job, attempt) pairs that started more than once
    lock_key_overlaps: int = 0    # pairs of runs of one lock_key overlapping in time
    lost: int = 0                 # accepted (2xx) jobs not in a final state
    failed: int = 0               # accepted jobs that ended other than SUCCEED
    wrong_final: int = 0          # SUCCEED rows whose (fence, attempt) did not run to "end"
    strays: int = 0               # ledger runs of unknown jobs, malformed lines
    # facts
    jobs: int = 0
    runs: int = 0
    reruns: int = 0               # jobs with more than one claim
    unfinished_runs: int = 0      # runs with a start and no end (killed)
    fenced_ends: int = 0          # runs that reached "end" but did not count
    details: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    VIOLATIONS = ("completed_twice", "duplicate_attempts", "lock_key_overlaps", "lost",
                  "failed", "wrong_final", "strays")

    def violations(self, lock_keys: bool = True) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.VIOLATIONS
                if lock_keys or name != "lock_key_overlaps"}

    def summary(self) -> str:
        counts = " ".join(f"{name}={getattr(self, name)}" for name in self.VIOLATIONS)
        return (f"violations: {counts} | jobs={self.jobs} runs={self.runs} "
                f"reruns={self.reruns} unfinished_runs={self.unfinished_runs} "
                f"fenced_ends={self.fenced_ends}")

    def explain(self, limit: int = 10) -> str:
        return "\n".join(f"  {name}: {items[:limit]}" for name, items in self.details.items()
                         if items)

    def assert_clean(self, lock_keys: bool = True) -> None:
        bad = {name: count for name, count in self.violations(lock_keys).items() if count}
        assert not bad, f"{self.summary()}\n{self.explain()}"


def check(ledger: Ledger, outcomes: dict[int, JobOutcome], accepted: Iterable[int],
          lock_keys: dict[int, str] | None = None) -> Report:
    """Judge a run: the ledger against the store's final word on every accepted job.

    ``lock_keys`` maps job ids to their ``lock_key``; runs of one key must not overlap
    (pass it in ``distributed`` mode, where segment locks promise that).
    """
    accepted = set(accepted)
    report = Report(jobs=len(accepted), runs=len(ledger.runs))
    report.strays += len(ledger.malformed)
    report.details["strays"] += [f"malformed line {line!r}" for line in ledger.malformed]

    for (job, attempt), run in ledger.runs.items():
        if job not in accepted:
            report.strays += 1
            report.details["strays"].append(f"job {job} attempt {attempt} was never accepted")
        if run.starts > 1:
            report.duplicate_attempts += 1
            report.details["duplicate_attempts"].append(
                f"job {job} attempt {attempt} started {run.starts} times")
        if run.start is not None and run.end is None:
            report.unfinished_runs += 1

    for job in sorted(accepted):
        outcome = outcomes.get(job)
        if outcome is None or outcome.state not in FINAL_STATES | {"ERROR", "STOPPED"}:
            report.lost += 1
            report.details["lost"].append(
                f"job {job}: {'missing' if outcome is None else outcome.state}")
            continue
        if outcome.state != "SUCCEED":
            report.failed += 1
            report.details["failed"].append(f"job {job}: {outcome.state}")
        runs = ledger.runs_of(job)
        if len(runs) > 1 or outcome.attempt > 1:
            report.reruns += 1
        succeeded = set(outcome.succeeded)
        completed = [r for r in runs if r.end is not None and (r.fence, r.attempt) in succeeded]
        report.fenced_ends += sum(1 for r in runs if r.end is not None and r not in completed)
        if len(completed) > 1 or len(succeeded) > 1:
            report.completed_twice += 1
            report.details["completed_twice"].append(
                f"job {job}: SUCCEED under {sorted(succeeded)}, runs that ended "
                f"{[(r.fence, r.attempt, r.node) for r in runs if r.end is not None]}")
        if outcome.state == "SUCCEED":
            final = (outcome.fence, outcome.attempt)
            if (final not in succeeded or not any(
                    (r.fence, r.attempt) == final and r.end is not None for r in runs)):
                report.wrong_final += 1
                report.details["wrong_final"].append(
                    f"job {job}: row says fence {final[0]} attempt {final[1]}; SUCCEED "
                    f"events {sorted(succeeded)}; runs "
                    f"{[(r.fence, r.attempt, r.node, r.end is not None) for r in runs]}")

    if lock_keys:
        by_key: dict[str, list[Run]] = defaultdict(list)
        for run in ledger.runs.values():
            if run.job in lock_keys and run.start is not None and run.end is not None:
                by_key[lock_keys[run.job]].append(run)
        for key, runs in by_key.items():
            runs.sort(key=lambda r: r.start)  # type: ignore[arg-type, return-value]
            for i, first in enumerate(runs):
                for second in runs[i + 1:]:
                    if second.start >= first.end:  # type: ignore[operator]
                        break
                    report.lock_key_overlaps += 1
                    report.details["lock_key_overlaps"].append(
                        f"{key}: job {first.job}/{first.attempt} on {first.node} "
                        f"[{first.start:.3f}, {first.end:.3f}] and job {second.job}/"
                        f"{second.attempt} on {second.node} [{second.start:.3f}, "
                        f"{second.end:.3f}]")
    return report
