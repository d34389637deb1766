"""Shell steps: an argv list run without a shell, in its own process group.

The environment is built from an allow-list (``steps.shell.env_passthrough``) plus
the step's own ``env``, the job's top-level scalar params as ``JOBSERVER_PARAM_<NAME>``
(how a planner's values reach a command as data) and the ``JOBSERVER_*`` variables:
the run's claim (``JOBSERVER_JOB_ID``, ``JOBSERVER_FENCE``, ``JOBSERVER_JOB_ATTEMPT``), which
``jobserver fence-check`` reads, and the node's API (``JOBSERVER_URL``). Cancellation and timeouts
send SIGTERM to the whole group, then SIGKILL after ``kill_grace`` seconds; when the
step ends, what it left in its group is killed (it would hold the output pipe open).
Only the parent of the group's leader signals the group (the fork server, or the node
for a reaper), and never once it has reaped the leader: the group's id is the
leader's pid, which may be another process's after that. Output
(stdout and stderr together) goes whole to the attempt's log in the store (up to
``steps.log_limit_bytes``, see :mod:`jobserver.steps.log`) as it comes, and is kept on
the step up to ``output_limit_bytes``: the head and the tail, with the size of what
was cut. The step's runtime audit (exit status, CPU seconds, peak RSS of its process
tree) comes from ``wait4`` in a small process between the node and the step, which
the step dies with, as that process dies with the node:

- the node's fork server (:mod:`jobserver.steps.forkserver`, one per node, started
  at the first shell step and again after it dies): node -> server -> fork -> exec
  the step; a fork and an exec per step;
- or, when no server can be started, a reaper per step
  (:mod:`jobserver.steps.reaper`): node -> ``setpriv --pdeathsig`` -> ``/bin/sh``
  parent check -> reaper -> fork -> ``setpriv`` -> ``/bin/sh`` -> exec the step.

Either way the step leads its own process group and session, gets exactly the
environment built here, and runs in the node's working directory (even a deleted one:
the fork server gets it as a descriptor, not a path).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobserver.parameters import step_environment
from jobserver.planners.hooks import OutputRefused
from jobserver.states import State
from jobserver.step_env import env_rule
from jobserver.steps import forkclient, forkserver, reaper
from jobserver.steps.log import StepLog
from jobserver.store.records import StepOutcome

if TYPE_CHECKING:
    from jobserver.planners.hooks import OutputFormat

MAX_METRICS_BYTES = 64 * 1024


class OutputCapture(threading.Thread):
    """Drains a pipe, keeping the first and last ``limit / 2`` bytes; everything goes
    to ``log`` as well, when there is one."""

    def __init__(self, stream: io.BufferedReader, limit: int,
                 log: StepLog | None = None) -> None:
        super().__init__(daemon=True, name="step-output")
        self._stream, self._half, self._log = stream, limit // 2, log
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self.total = 0

    def run(self) -> None:
        while chunk := self._stream.read1(65536):
            self.total += len(chunk)
            if self._log is not None:
                self._log.write(chunk)
            room = self._half - len(self._head)
            if room > 0:
                self._head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self._tail.append(chunk)
                self._tail_size += len(chunk)
                while self._tail_size - len(self._tail[0]) >= self._half:
                    self._tail_size -= len(self._tail.popleft())
        self._stream.close()

    def text(self) -> str:
        tail = b"".join(self._tail)[-self._half:] if self._tail else b""
        cut = self.total - len(self._head) - len(tail)
        middle = f"\n[... {cut} bytes cut ...]\n".encode() if cut > 0 else b""
        # NUL as U+FFFD: no text column takes it (PostgreSQL refuses the write, SQLite
        # cuts the text there); the log keeps the bytes as they were.
        return (bytes(self._head) + middle + tail).decode(
            "utf-8", errors="replace").replace("\x00", "\ufffd")


class DeniedEnv(ValueError):
    """A step's ``env`` sets a variable :mod:`jobserver.step_env` refuses."""


def build_env(spec: dict[str, Any], ctx: Any, metrics_file: Path,
              outputs_file: Path | None = None) -> dict[str, str]:
    """The step's environment; :class:`DeniedEnv` if its own ``env`` sets a refused
    variable. Submits refuse such a step already: this catches a job stored before
    the rule (or before the operator listed the name), which must not run with it.

    With ``outputs_file``, the inputs' files are written beside it, and the variable
    of ``ctx.outputs`` (``JOBSERVER_PARTITIONS_OUT``) names it when an installed
    planner takes step outputs; without one, the step gets no such variable."""
    own = spec.get("env") or {}
    refused = env_rule(tuple(getattr(ctx.shell, "denied_env", ()))).refused(own)
    if refused:
        raise DeniedEnv("; ".join(refused.values()))
    env = {name: os.environ[name] for name in ctx.shell.env_passthrough if name in os.environ}
    env.update(own)
    # The job's params are data the step reads, never text pasted into its command
    # (jobserver.parameters): a planner's values arrive this way.
    env.update(step_environment(getattr(ctx, "params", None) or {}))
    env.update({
        "JOBSERVER_JOB_ID": str(ctx.job_id), "JOBSERVER_STEP": ctx.step,
        "JOBSERVER_ATTEMPT": str(ctx.attempt), "JOBSERVER_JOB_ATTEMPT": str(ctx.job_attempt),
        "JOBSERVER_FENCE": str(ctx.fence), "JOBSERVER_NODE": ctx.node,
        "JOBSERVER_METRICS_FILE": str(metrics_file),
    })
    # For `jobserver fence-check` in the step; an operator's value passed through (a
    # load balancer, say) wins.
    api_url = getattr(ctx, "api_url", None)
    if api_url is not None:
        env.setdefault("JOBSERVER_URL", api_url)
    if outputs_file is not None:
        outputs = getattr(ctx, "outputs", None)
        if outputs is not None:
            env[outputs.env] = str(outputs_file)
        env.update(_input_files(ctx, outputs_file.parent))
    return env


def _input_files(ctx: Any, directory: Path) -> dict[str, str]:
    """Each input's partitions as a JSON file, named by ``JOBSERVER_INPUT_<DATASET>``."""
    named = {}
    for item in (getattr(ctx, "inputs", None) or {}).values():
        path = directory / f"{item['env'].lower()}.json"
        path.write_text(json.dumps({key: item[key] for key in
                                    ("dataset", "consumer", "partitions")}))
        named[item["env"]] = str(path)
    return named


#: Steps die with their node: when the node process is killed, the kernel sends the
#: step SIGKILL (util-linux ``setpriv --pdeathsig``, which then execs the step itself).
#: Without it, a step of a killed node would run on beside its rescued re-run. The
#: node's child checks that its parent is still the node (reaper.PARENT_CHECK).
SETPRIV = shutil.which("setpriv")
#: The process between the node and the step that measures the step's own resource
#: use: the node's interpreter, started without site packages for a fast start.
REAPER = [sys.executable, "-I", "-S", reaper.__file__] if sys.executable else None


def _command(argv: list[str], env: dict[str, str],
             usage_file: Path | None = None) -> list[str]:
    """The argv to spawn; raises FileNotFoundError for a missing executable (which
    setpriv would otherwise report as exit status 127). With ``usage_file``, the step
    runs under the reaper, which writes the step's exit status and usage there."""
    if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, "not found or not executable", argv[0])
    if usage_file is not None and REAPER is not None:
        lc_ctype = f"={env['LC_CTYPE']}" if "LC_CTYPE" in env else ""
        argv = [*REAPER, str(usage_file), SETPRIV or "", lc_ctype, *argv]
    return reaper.command(SETPRIV or "", argv, os.getpid())


class _Started:
    """A started step: its pid (its process group's), its output and its end."""

    stdout: io.BufferedReader
    pid: int

    def poll(self, interval: float) -> int | None:
        """The exit status once it has ended, waiting up to ``interval`` for it."""
        raise NotImplementedError

    def usage(self, status: int) -> tuple[int, float | None, int | None]:
        """Exit status, CPU seconds and peak RSS (KiB) of the step's own tree."""
        raise NotImplementedError

    def signal(self, sig: signal.Signals) -> None:
        """Signal the step's process group, unless the step has been reaped."""
        raise NotImplementedError


class _Served(_Started):
    """A step the node's fork server started."""

    def __init__(self, run: forkclient.StepRun, stdout: io.BufferedReader) -> None:
        assert run.pid is not None
        self.run, self.pid, self.stdout = run, run.pid, stdout

    def poll(self, interval: float) -> int | None:
        if not self.run.done.wait(interval):
            return None
        return int(self.run.result["status"])  # type: ignore[index]

    def usage(self, status: int) -> tuple[int, float | None, int | None]:
        result = self.run.result or {}
        return status, result.get("cpu_seconds"), result.get("peak_rss_kb")

    def signal(self, sig: signal.Signals) -> None:
        self.run.signal(sig)  # by the server, which kills the group at the end too


class _Reaped(_Started):
    """A step run under its own reaper (the fallback), the node's child, which leads
    the group the step is in. Only :meth:`poll` reaps it, after killing its group."""

    def __init__(self, proc: subprocess.Popen[bytes], usage_file: Path) -> None:
        self.proc, self.pid, self.usage_file = proc, proc.pid, usage_file
        self.stdout = proc.stdout  # type: ignore[assignment]
        self._usage: Any = None

    def poll(self, interval: float) -> int | None:
        if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            time.sleep(interval)
            return None
        forkserver.kill_group(self.pid, signal.SIGKILL)  # ended, not reaped: the pid is still its
        _, status, self._usage = os.wait4(self.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return self.proc.returncode

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.returncode is None:  # not reaped yet
            forkserver.kill_group(self.pid, sig)

    def usage(self, status: int) -> tuple[int, float | None, int | None]:
        return _step_usage(self.usage_file, status, self._usage)


def _start(argv: list[str], env: dict[str, str], usage_file: Path) -> _Started:
    """Start the step through the fork server, or the reaper when there is none;
    raises OSError (FileNotFoundError for a missing executable) if it cannot start."""
    if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, "not found or not executable", argv[0])
    read_end, write_end = os.pipe()
    try:
        run = forkclient.SERVER.start(argv, env, write_end)
    finally:
        os.close(write_end)  # the server holds its own copy from the send
    if run is None:
        os.close(read_end)
        proc = subprocess.Popen(_command(argv, env, usage_file), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        return _Reaped(proc, usage_file)
    stdout = open(read_end, "rb")
    if not run.started.wait(forkclient.START_TIMEOUT):
        run.abandon()
        run.started.wait()
    if run.pid is None:
        stdout.close()
        raise OSError(0, run.error or "the fork server did not answer")
    return _Served(run, stdout)


def run_shell(spec: dict[str, Any], ctx: Any) -> StepOutcome:
    log: StepLog | None = getattr(ctx, "log", None)
    with tempfile.TemporaryDirectory(prefix="jobserver-step-") as scratch:
        metrics_file = Path(scratch) / "metrics.json"
        partitions_file = Path(scratch) / "partitions.jsonl"
        try:
            env = build_env(spec, ctx, metrics_file, partitions_file)
        except DeniedEnv as exc:
            return StepOutcome(State.ERROR, error=f"not started: {exc}", retryable=False)
        try:
            step = _start(spec["argv"], env, Path(scratch) / "usage.json")
        except OSError as exc:
            return StepOutcome(State.ERROR, error=f"cannot start {spec['argv'][0]!r}: "
                                                  f"{exc.strerror or exc}", retryable=False)
        capture = OutputCapture(step.stdout, ctx.shell.output_limit_bytes, log)
        capture.start()
        status, reason = _wait(step, spec.get("timeout"), ctx, log)  # leftovers killed
        capture.join(timeout=5)
        if log is not None:
            log.close()  # before the attempt's end is recorded: readers then have it all
        status, cpu, peak = step.usage(status)
        metrics, metrics_note = _read_metrics(metrics_file)
        partitions, partitions_error = _read_outputs(getattr(ctx, "outputs", None),
                                                     partitions_file, status, reason)
    output = capture.text() + (f"\n[{metrics_note}]" if metrics_note else "")
    audit = {"exit_code": status, "output": output, "metrics": metrics,
             "wall_seconds": time.monotonic() - ctx.started_monotonic,
             "cpu_seconds": cpu, "peak_rss_kb": peak}
    return _outcome(spec, status, reason, partitions, partitions_error, audit)


def _outcome(spec: dict[str, Any], status: int, reason: str | None,
             partitions: list[Any] | None, partitions_error: str | None,
             audit: dict[str, Any]) -> StepOutcome:
    """How the step ended, with its audit."""
    if reason == "cancelled":
        return StepOutcome(State.STOPPED, error="stopped: process killed", **audit)
    if reason == "timeout":
        return StepOutcome(State.ERROR, error=f"timed out after {spec['timeout']} s", **audit)
    if status != 0:
        what = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        return StepOutcome(State.ERROR, error=what, **audit)
    if partitions_error:
        return StepOutcome(State.ERROR, error=partitions_error, retryable=False, **audit)
    return StepOutcome(State.SUCCEED, partitions=partitions, **audit)


def _step_usage(path: Path, status: int, usage: Any) -> tuple[int, float, int | None]:
    """The step's exit status, CPU seconds and peak RSS (KiB) as the reaper reported
    them. Without its report (the reaper was killed with the step, or never ran), the
    status and CPU time are the node's child's; its peak RSS is then unknown: the
    child's own would be the node's."""
    try:
        report = json.loads(path.read_text())
        return int(report["status"]), float(report["cpu_seconds"]), int(report["peak_rss_kb"])
    except (OSError, ValueError, KeyError, TypeError):
        return status, usage.ru_utime + usage.ru_stime, None


def _read_outputs(outputs: OutputFormat | None, path: Path, status: int,
                  reason: str | None) -> tuple[list[Any] | None, str | None]:
    """What a successful step wrote to its outputs file (its partitions), or why it
    cannot be read; nothing when no installed planner takes step outputs."""
    if outputs is None or status != 0 or reason is not None:
        return None, None
    try:
        return outputs.read(path) or None, None
    except OutputRefused as exc:
        return None, exc.message


def _wait(step: _Started, timeout: float | None, ctx: Any,
          log: StepLog | None = None) -> tuple[int, str | None]:
    """Wait for the step's end; stop it on cancel or timeout; meanwhile write the
    output to the log as it falls due."""
    started = time.monotonic()
    reason: str | None = None
    signalled_at: float | None = None
    interval = 0.001
    while True:
        status = step.poll(interval)
        if status is not None:
            return status, reason
        now = time.monotonic()
        if reason is None and ctx.cancelled.is_set():
            reason = "cancelled"
        elif reason is None and timeout is not None and now - started > timeout:
            reason = "timeout"
        if reason is not None and signalled_at is None:
            step.signal(signal.SIGTERM)
            signalled_at = now
        elif signalled_at is not None and now - signalled_at > ctx.shell.kill_grace:
            step.signal(signal.SIGKILL)
        if log is not None:
            log.flush_if_due()
        interval = min(interval * 2, 0.02)


def _read_metrics(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    if not path.exists():
        return None, None
    raw = path.read_bytes()[:MAX_METRICS_BYTES + 1]
    if len(raw) > MAX_METRICS_BYTES:
        return None, f"metrics file ignored: larger than {MAX_METRICS_BYTES} bytes"
    try:
        value = json.loads(raw)
    except ValueError:
        return None, "metrics file ignored: not valid JSON"
    if not isinstance(value, dict):
        return None, "metrics file ignored: not a JSON object"
    return value, None
