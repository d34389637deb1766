"""Planner parameters are data: where a placeholder may stand, and how values reach
steps (jobserver.parameters)."""

from __future__ import annotations

from typing import Any

import pytest

from jobserver.parameters import SAFE_VALUE, placeholder_problems, step_environment
from jobserver.views.data import confined


def problems(*steps: dict[str, Any], **job: Any) -> list[str]:
    body = {"name": "t", "steps": list(steps), **job}
    return [p["field"] for p in placeholder_problems(body, {"p", "q"}, "job")]


def shell(*argv: str, **more: Any) -> dict[str, Any]:
    return {"name": "s", "type": "shell", "argv": list(argv), **more}


@pytest.mark.parametrize("argv", [
    ["sh", "-c", "echo ${p}"],                # shell text
    ["/bin/bash", "-lc", "${p}"],             # a shell anywhere
    ["python3.11", "script.py", "${p}"],      # an interpreter's arguments
    ["env", "X=1", "${p}"],                   # a command runner
    ["xargs", "${p}"],
    ["awk", "{print ${p}}"],
    ["mytool", "-e", "${p}"],                 # after an inline-code flag
    ["${p}", "--day"],                        # the executable itself
])
def test_a_placeholder_never_stands_where_argv_is_code(argv: list[str]) -> None:
    index = next(i for i, arg in enumerate(argv) if "${p}" in arg)
    assert problems(shell(*argv)) == [f"job.steps[0].argv[{index}]"]


def test_a_placeholder_stands_where_a_value_is_data() -> None:
    assert problems(shell("agg", "--day", "${p}", "--shop=${q}", env={"DAY": "${p}"}),
                    {"name": "py", "type": "python", "callable": "x", "args": {"d": ["${p}"]}},
                    {"name": "q", "type": "sql", "connection": "c", "statements": ["SELECT :p"],
                     "params": {"d": "${p}"}},
                    name="job ${p}", lock_key="k/${q}", params={"day": "${p}"}) == []


def test_never_in_sql_text_nor_fields_that_are_not_data() -> None:
    assert problems({"name": "q", "type": "sql", "connection": "${p}",
                     "statements": ["SELECT '${p}'"]}) == \
        ["job.steps[0].connection", "job.steps[0].statements[0]"]
    assert problems({"name": "py", "type": "python", "callable": "x.${p}"}) == \
        ["job.steps[0].callable"]


def test_unknown_names_and_escapes() -> None:
    assert problems(shell("echo", "${nope}")) == ["job.steps[0].argv[1]"]
    assert problems(shell("sh", "-c", "echo $${p} $HOME")) == []  # no placeholder at all


def test_scalar_params_become_environment_variables() -> None:
    env = step_environment({"business_date": "2015-05-03", "batch_id": 7, "ok": True,
                            "nested": {"x": 1}, "none": None, "bad-name": "x",
                            "nul": "a\x00b"})
    assert env == {"JOBSERVER_PARAM_BUSINESS_DATE": "2015-05-03",
                   "JOBSERVER_PARAM_BATCH_ID": "7", "JOBSERVER_PARAM_OK": "true"}


@pytest.mark.parametrize("value,safe", [
    ("SHOP10", True), ("2015", True), ("a_b.c-d", True), ("x;id>/tmp/pwned;", False),
    ("..", False), ("a..b", False), (".hidden", False), ("-rf", False), ("a b", False),
    ("$(id)", False), ("a/b", False), ("", False)])
def test_the_default_value_rule(value: str, safe: bool) -> None:
    assert bool(SAFE_VALUE.match(value)) is safe


@pytest.mark.parametrize("template,location,inside", [
    ("source/${shop}/${day}", "source/S1/20150503", True),
    ("source/${shop}/${day}", "source/../../etc", False),
    ("/data/${a}${b}", "/data/..", False),
    ("/data/x${a}", "/data/x1", True),
    ("${a}/f", "../f", False),
    ("${a}/f", "/etc/f", False),
])
def test_a_location_stays_under_its_fixed_part(template: str, location: str,
                                               inside: bool) -> None:
    assert confined(template, location) is inside
