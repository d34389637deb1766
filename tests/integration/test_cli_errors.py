"""The command line with bad arguments: one line on stderr and a documented exit code,
never a traceback, for every command.

The commands are read from the CLI's own parser, so a command added later is swept
too. Each runs through the entry point (``main``) against a live API (a real app over
a SQLite store, served by a thread); the headline cases run as real processes too.
Exit codes: 2 bad usage (nothing was sent), 1 a request that failed (refused by the
API or unreachable).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobserver.cli import _parser, main
from jobserver.cli.parsing import commands
from jobserver.store import Store
from tests.conftest import _empty
from tests.helpers import free_port, job_spec, live_api

TOKEN = "cli-token-0123456789abcdef"
WRONG_TOKEN = "wrong-token-0123456789abcdef"
MISSING = "/nonexistent/jobserver-input.json"
NOT_A_NUMBER = "not-a-number"
#: A document both ``submit`` (a JSON body) and ``apply`` (YAML) send to the API.
DOCUMENT = {"kind": "Schedule", "name": "nightly",
            "template": {"name": "etl", "steps": [{"name": "a", "type": "noop"}]},
            "trigger": {"type": "time", "cron": "0 3 * * *", "timezone": "UTC"}}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('store') / 'cli.db'}")
    store.upgrade()
    yield store
    store.dispose()


@pytest.fixture(scope="module")
def url(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with live_api(store, tmp_path_factory.mktemp("data"), TOKEN) as base:
        yield base


@pytest.fixture
def empty(store: Store) -> Store:
    """The module's store without jobs (tests that count them)."""
    _empty(store)
    return store


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No JOBSERVER_* settings of the caller's, in an empty working directory."""
    for name in list(os.environ):
        if name.startswith("JOBSERVER_"):
            monkeypatch.delenv(name)
    for name in ("JOBSERVER_CONFIG", "JOBSERVER_LOG_FORMAT"):
        monkeypatch.setenv(name, "")  # restored afterwards, whoever sets them
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        argv: list[str]) -> tuple[int, str, str]:
    monkeypatch.setenv("JOBSERVER_CONFIG", "")  # serve sets it
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def leaves() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """Every command that runs (not one that only groups others), as its words."""
    return [(name.split(), command) for name, command in commands(_parser())
            if not any(isinstance(a, argparse._SubParsersAction) for a in command._actions)]


def is_client(command: argparse.ArgumentParser) -> bool:
    return bool(command.get_default("client_command"))


def value_for(action: argparse.Action, document: Path) -> str:
    """A value ``action`` accepts: its first choice, the document for a file, else
    the first of a few candidates its type takes."""
    if action.choices:
        return str(next(iter(action.choices)))
    if action.dest == "file":
        return str(document)
    for candidate in ("1", "2026-01-01", "x"):
        try:
            (action.type or str)(candidate)  # type: ignore[operator]
            return candidate
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return "x"


def required_args(command: argparse.ArgumentParser, document: Path,
                  replace: dict[str, str] | None = None) -> list[str]:
    """What ``command`` requires (positionals first); ``replace``: values by dest."""
    positionals, options = [], []
    for action in command._actions:
        if isinstance(action, argparse._HelpAction) or (
                action.option_strings and not action.required):
            continue
        value = (replace or {}).get(action.dest) or value_for(action, document)
        if action.option_strings:
            options += [action.option_strings[0], value]
        else:
            positionals.append(value)
    return positionals + options


def typed(command: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments that take a number or a date (not text, not a fixed choice)."""
    return [action for action in command._actions
            if action.type not in (None, str, str.upper) and not action.choices
            and action.nargs != 0]


def assert_one_line(result: tuple[int, str, str], code: int, argv: list[str],
                    *needles: str) -> str:
    exit_code, out, err = result
    where = f"jobserver {' '.join(argv)} -> {exit_code}\nstdout: {out}\nstderr: {err}"
    assert exit_code == code, where
    assert "Traceback" not in out + err, where
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobserver"), where
    for needle in needles:
        assert needle in lines[0], where
    return lines[0]


LEAVES = dict((" ".join(words), command) for words, command in leaves())
#: Commands whose request needs options none of which is required on its own.
EXTRA_ARGS = {"fence-check": ["--job", "1", "--fence", "1"]}
#: Commands with exit codes of their own for a request that failed: fence-check's 2 is
#: "no answer" (its 1 means the claim is stale).
REQUEST_FAILED = {"fence-check": 2}


def test_the_sweep_finds_the_commands() -> None:
    assert {"submit", "jobs", "job", "apply", "serve", "db", "token create", "batch run",
            "partitions add", "schedules list", "cluster"} <= set(LEAVES)


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_command_refuses_bad_arguments_in_one_line(
        name: str, url: str, clean_env: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    words, command = name.split(), LEAVES[name]
    document = clean_env / "document.json"
    document.write_text(json.dumps(DOCUMENT))
    dead = f"http://127.0.0.1:{free_port()}"
    base = words + required_args(command, document) + EXTRA_ARGS.get(name, [])
    client = is_client(command)

    def check(argv: list[str], code: int, *needles: str) -> str:
        return assert_one_line(run(capsys, monkeypatch, argv), code, argv, *needles)

    check([*base, "--no-such-option"], 2, "unrecognized arguments: --no-such-option",
          f"jobserver {name}")
    check(["--url", "not-a-url", *base], 2, "not-a-url" if client else "client commands")
    check([*base, "--config", "/nonexistent/jobserver.toml"], 2, "/nonexistent")
    line = check([*base, "--url", url, "--token", "bad token ü"], 2)
    assert "ü" not in line  # a secret is never echoed
    for action in typed(command):
        if action.option_strings:
            argv = [*base, action.option_strings[-1], NOT_A_NUMBER]
        else:
            argv = words + required_args(command, document, {action.dest: NOT_A_NUMBER})
        check(argv, 2, NOT_A_NUMBER)
    for action in (a for a in command._actions if a.dest == "file"):
        argv = words + required_args(command, document, {action.dest: MISSING})
        if action.option_strings:
            argv += [action.option_strings[0], MISSING]
        check(["--url", dead, "--token", TOKEN, *argv], 2, MISSING)
    if client:  # a request is sent: it fails, and says why
        failed = REQUEST_FAILED.get(name, 1)
        check(["--token", TOKEN, *base, "--url", dead], failed, "cannot reach the API", dead)
        check(["--token", WRONG_TOKEN, "--url", url, *base], failed, "token")


def test_global_options_before_the_command(url: str, empty: Store, clean_env: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    document = clean_env / "job.json"
    document.write_text(json.dumps(job_spec(name="first")))
    code, out, err = run(capsys, monkeypatch, ["--token", TOKEN, "--url", url, "submit",
                                               str(document)])
    assert (code, err) == (0, "") and out == f"job 1 submitted: {url}/ui/jobs/1\n"
    code, out, err = run(capsys, monkeypatch, ["--token", TOKEN, "--url", url,
                                               "--log-format", "json", "jobs"])
    assert (code, err) == (0, "") and out.splitlines()[1].split()[:3] == ["1", "first", "READY"]
    code, out, err = run(capsys, monkeypatch, ["--url", url, "jobs", "--token", TOKEN])
    assert (code, err) == (0, "")
    # After the command, an option overrides the one before it.
    code, _, err = run(capsys, monkeypatch, ["--token", WRONG_TOKEN, "--url", url, "job", "1",
                                             "--token", TOKEN])
    assert (code, err) == (0, "")
    monkeypatch.setenv("JOBSERVER_URL", url)
    monkeypatch.setenv("JOBSERVER_TOKEN", TOKEN)
    assert run(capsys, monkeypatch, ["pause", "1"])[0] == 0
    assert run(capsys, monkeypatch, ["--token", WRONG_TOKEN, "resume", "1"])[0] == 1


def test_a_refused_request_names_each_field(url: str, clean_env: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    document = clean_env / "bad.json"
    document.write_text(json.dumps({"name": "x", "steps": [], "colour": "red"}))
    code, out, err = run(capsys, monkeypatch, ["--url", url, "--token", TOKEN, "submit",
                                               str(document)])
    lines = err.splitlines()
    assert code == 1 and out == "" and "Traceback" not in err
    assert lines[0].startswith("jobserver: ") and len(lines) >= 2
    assert any("colour" in line for line in lines) and any("steps" in line for line in lines)


def jobserver() -> list[str]:
    script = Path(sys.executable).with_name("jobserver")
    return [str(script)] if script.exists() else [sys.executable, "-m", "jobserver.cli"]


def process(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
    return subprocess.run(jobserver() + args, cwd=cwd, env={**environ, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args,code,needle", [
    (["submit", "/nonexistent.json"], 2, "/nonexistent.json: No such file or directory"),
    (["jobs", "--url", "not-a-url"], 2, "--url 'not-a-url'"),
    (["job", "abc"], 2, "invalid int value: 'abc'"),
    (["--token", "X", "jobs", "--url", "http://127.0.0.1:9"], 1, "cannot reach the API"),
])
def test_the_installed_command_fails_in_one_line(tmp_path: Path, args: list[str], code: int,
                                                 needle: str) -> None:
    result = process(args, tmp_path)
    assert result.returncode == code, result.stderr
    assert result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_installed_command_takes_global_options_first(url: str, empty: Store,
                                                          tmp_path: Path) -> None:
    result = process(["--token", TOKEN, "--url", url, "jobs"], tmp_path)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.split() == ["ID", "NAME", "STATE", "PROGRESS", "ATTEMPT", "NODE",
                                     "DURATION", "SUBMITTED"]
    result = process(["--token", WRONG_TOKEN, "jobs"], tmp_path, JOBSERVER_URL=url)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr


def test_wide_names_line_up_in_the_jobs_table(url: str, empty: Store, clean_env: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_cli_views import columns

    for name in ("etl", "日次バッチ処理", "nightly 🚀 load", "Ünïcödé"):
        document = clean_env / "job.json"
        document.write_text(json.dumps(job_spec(name=name)))
        assert run(capsys, monkeypatch, ["--url", url, "--token", TOKEN, "submit",
                                         str(document)])[0] == 0
    code, out, _ = run(capsys, monkeypatch, ["--url", url, "--token", TOKEN, "jobs"])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 5
    state_at = columns(lines[0][:lines[0].index("STATE")])
    assert {columns(line[:line.index("READY")]) for line in lines[1:]} == {state_at}
