"""A shell step's ``env`` may not change what its allowed executable loads or runs
(``jobserver.step_env``): refused when the job is validated, naming
``steps[i].env.NAME``, and again when the step starts, for a job stored before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobserver.config import load_config
from jobserver.exceptions import ConfigError, InvalidRequest
from jobserver.spec import Policy, parse_job, validate_job
from jobserver.states import State
from jobserver.step_env import EnvRule
from jobserver.steps.shell import run_shell
from tests.helpers import shell_context

REFUSED = ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "BASH_ENV",
           "ENV", "BASH_FUNC_ls", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS",
           "CDPATH", "PATH", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PERL5LIB",
           "PERL5OPT", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "GCONV_PATH", "LOCPATH",
           "HOSTALIASES", "RESOLV_HOST_CONF", "MALLOC_CHECK_", "GLIBC_TUNABLES",
           "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JOBSERVER_URL", "JOBSERVER_FENCE",
           "JOBSERVER_PARAM_day", "GIT_SSH_COMMAND", "GIT_CONFIG_COUNT", "OPENSSL_CONF",
           "ld_preload", "Path"]
ALLOWED = ["LANG", "TZ", "HOME", "LC_ALL", "DAY", "PYTHONUNBUFFERED", "LDFLAGS", "PATHS",
           "ENVIRONMENT", "MY_PATH", "JOBSERVER"]


def job(env: dict[str, str], steps: int = 1) -> str:
    return json.dumps({"name": "j", "steps": [
        {"name": f"s{i}", "type": "shell", "argv": ["./run.sh"], "env": env}
        for i in range(steps)]})


@pytest.mark.parametrize("name", REFUSED)
def test_the_loader_shell_interpreter_and_engine_variables_are_refused(name: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_job(parse_job(job({"A": "1", name: "x"})), Policy(lambda _: False, None))
    assert info.value.details == [{"field": f"steps[0].env.{name}",
                                   "message": EnvRule().refusal(name)}]
    assert info.value.message.startswith(f"steps[0].env.{name}: a step may not set {name}")


@pytest.mark.parametrize("name", ALLOWED)
def test_other_variables_are_the_steps_own(name: str) -> None:
    validate_job(parse_job(job({name: "x"})), Policy(lambda _: False, ["./run.sh"]))


def test_every_refused_name_of_every_step_is_named() -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_job(parse_job(job({"PATH": "/tmp", "BASH_ENV": "/tmp/x"}, steps=2)),
                     Policy(lambda _: False, None))
    assert [d["field"] for d in info.value.details] == [
        "steps[0].env.PATH", "steps[0].env.BASH_ENV", "steps[1].env.PATH",
        "steps[1].env.BASH_ENV"]


def test_the_operators_names_and_prefixes_are_refused_too() -> None:
    policy = Policy(lambda _: False, None, denied_env=["AWS_PROFILE", "HTTP_PROXY*"])
    for name in ("AWS_PROFILE", "aws_profile", "HTTP_PROXY", "HTTP_PROXY_USER"):
        with pytest.raises(InvalidRequest, match="steps.shell.denied_env"):
            validate_job(parse_job(job({name: "x"})), policy)
    validate_job(parse_job(job({"AWS_REGION": "x"})), policy)


def test_denied_env_is_read_from_the_environment_and_checked() -> None:
    config = load_config(environ={"JOBSERVER_STEPS__SHELL__DENIED_ENV": "AWS_PROFILE, K8S_*"})
    assert config.steps.shell.denied_env == ["AWS_PROFILE", "K8S_*"]
    with pytest.raises(ConfigError, match="steps.shell.denied_env"):
        load_config(environ={"JOBSERVER_STEPS__SHELL__DENIED_ENV": "NOT-A-NAME"})


def test_a_stored_step_with_a_refused_variable_does_not_start(tmp_path: Path) -> None:
    """A job stored before the rule (or before the operator listed a name): the step
    ends ERROR, not retried, and its program never runs."""
    marker = tmp_path / "ran"
    ctx = shell_context(denied_env=["MY_SECRET_SWITCH"])
    for env in ({"BASH_ENV": str(tmp_path / "evil")}, {"MY_SECRET_SWITCH": "1"}):
        outcome = run_shell({"argv": ["touch", str(marker)], "env": env}, ctx)
        assert outcome.state is State.ERROR and outcome.retryable is False
        assert f"a step may not set {next(iter(env))}" in (outcome.error or "")
        assert not marker.exists()
    assert run_shell({"argv": ["touch", str(marker)], "env": {"OK": "1"}},
                     ctx).state is State.SUCCEED
    assert marker.exists()
