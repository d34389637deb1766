"""Config: file + environment, typed, and every error names its key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobserver.config import SchedulerMode, env_name, load_config
from jobserver.exceptions import ConfigError


def test_defaults() -> None:
    config = load_config(environ={})
    assert config.scheduler.mode is SchedulerMode.SINGLE
    assert config.scheduler.poll_interval == 1.0
    assert config.scheduler.max_concurrent_jobs == 10
    assert config.lock.backend == "file"
    assert config.api.tokens == []
    assert config.database_url.startswith("sqlite:///")
    assert config.database_url.endswith(".jobserver/jobserver.db")


def test_file_then_environment(tmp_path: Path) -> None:
    path = tmp_path / "jobserver.toml"
    path.write_text('data_dir = "/srv/js"\n[scheduler]\nmode = "leader"\npoll_interval = 0.5\n'
                    '[steps.shell]\nallowed_executables = ["echo"]\n')
    config = load_config(path, environ={"JOBSERVER_SCHEDULER__POLL_INTERVAL": "2.5",
                                        "JOBSERVER_API__TOKENS": "a" * 16 + ",b" + "c" * 16})
    assert config.scheduler.mode is SchedulerMode.LEADER
    assert config.scheduler.poll_interval == 2.5
    assert config.api.tokens == ["a" * 16, "b" + "c" * 16]
    assert config.steps.shell.allowed_executables == ["echo"]
    assert str(config.data_dir) == "/srv/js"


@pytest.mark.parametrize("number,mode", [("0", "single"), ("2", "distributed"),
                                         ("100", "leader"), ("distributed", "distributed")])
def test_kylin_mode_numbers(number: str, mode: str) -> None:
    config = load_config(environ={"JOBSERVER_SCHEDULER__MODE": number})
    assert config.scheduler.mode.value == mode


@pytest.mark.parametrize("environ,named", [
    ({"JOBSERVER_SCHEDULER__MODE": "7"}, "scheduler.mode"),
    ({"JOBSERVER_SCHEDULER__MODE": "fast"}, "scheduler.mode"),
    ({"JOBSERVER_SCHEDULER__POLL_INTERVAL": "-1"}, "scheduler.poll_interval"),
    ({"JOBSERVER_SCHEDULER__MAX_CONCURRENT_JOBS": "many"}, "scheduler.max_concurrent_jobs"),
    ({"JOBSERVER_SCHEDULER__POLL_INTERVALL": "1"}, "scheduler.poll_intervall"),
    ({"JOBSERVER_API__TOKENS": "short"}, "api.tokens"),
    ({"JOBSERVER_SERVER__ID": "bad id with spaces"}, "server.id"),
    ({"JOBSERVER_API__BIND": "nonsense"}, "api.bind"),
])
def test_bad_values_name_the_key_and_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ=environ)
    assert named in info.value.message
    assert next(iter(environ)) in info.value.message


GOOD_TOKEN = "config-token-0123456789abcdef"


@pytest.mark.parametrize("token,problem", [
    (" " * 20, "token #2 is empty or only spaces"),
    ("", "token #2 is empty or only spaces"),
    ("\t\n" * 10, "token #2 is empty or only spaces"),
    (" secret-0123456789abcdef", "token #2 starts or ends with a space"),
    ("secret-0123456789abcdef\n", "token #2 starts or ends with a space"),
    ("secret 0123456789abcdef", "token #2 holds a space"),
    ("secret-0123456789abcdéf", "token #2 holds a space, a control character or"),
    ("secret-0123456789\x1babcdef", "token #2 holds a space, a control character or"),
    ("0123456789", "each token must be at least 16 characters"),
])
def test_a_token_no_request_could_match_is_refused(tmp_path: Path, token: str,
                                                    problem: str) -> None:
    """A header's value loses its outer spaces and carries only printable ASCII: such
    a token would pass and never match. The message names its place, not its text."""
    path = tmp_path / "jobserver.toml"
    path.write_text("[api]\ntokens = " + json_list([GOOD_TOKEN, token]) + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert "api.tokens" in info.value.message and problem in info.value.message
    if token.strip():
        assert token.strip() not in info.value.message
    with pytest.raises(ConfigError, match="api.tokens .from JOBSERVER_API__TOKENS."):
        load_config(environ={"JOBSERVER_API__TOKENS": json_list([GOOD_TOKEN, token])})


def json_list(items: list[str]) -> str:
    """``items`` as a JSON list: a TOML array as well, with the same escapes."""
    return json.dumps(items)


def test_spaces_around_the_commas_of_the_variable_are_no_part_of_a_token() -> None:
    config = load_config(environ={"JOBSERVER_API__TOKENS": f" {GOOD_TOKEN} , {GOOD_TOKEN}x "})
    assert config.api.tokens == [GOOD_TOKEN, GOOD_TOKEN + "x"]


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[scheduler]\nmood = 'single'\n")
    with pytest.raises(ConfigError, match=r"scheduler\.mood: unknown key"):
        load_config(path, environ={})


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[scheduler\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken, environ={})


def test_env_names() -> None:
    assert env_name("scheduler.mode") == "JOBSERVER_SCHEDULER__MODE"
    assert env_name("steps.shell.allowed_executables") == \
        "JOBSERVER_STEPS__SHELL__ALLOWED_EXECUTABLES"
