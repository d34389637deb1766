"""What a user reads from the command line, against a real ``jobserver serve``: ``job``
as a summary (state, times, duration, steps, why it waits, its dashboard page) and
``--json`` for the API's form; ``submit`` as "job N submitted" with the page; ``jobs``
with durations and relative times; the planner groups listing without an action;
``--view-url-path``; and, without a token, where ``make run`` keeps one."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobserver.cli import main
from tests.helpers import job_spec
from tests.integration.attack import AttackNode, attack_env, attack_node  # noqa: F401

Cli = Callable[..., tuple[int, str, str]]
pytestmark = pytest.mark.parametrize("attack_node", ["sqlite"], indirect=True)
SUBMITTED = re.compile(r"^job (\d+) submitted: (\S+)$")


@pytest.fixture
def cli(attack_node: AttackNode, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Cli]:
    """``jobserver ARGS`` in an empty directory with no JOBSERVER_* settings but the
    node's URL; ``token=None`` sends none."""
    for name in [name for name in os.environ if name.startswith("JOBSERVER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JOBSERVER_CONFIG", "")
    monkeypatch.setenv("JOBSERVER_URL", attack_node.url)
    monkeypatch.chdir(tmp_path)

    def call(*args: str, token: str | None = "admin") -> tuple[int, str, str]:
        extra = ["--token", attack_node.tokens[token]] if token else []
        code = main([*args, *extra])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    yield call


def submit_file(tmp_path: Path, body: object) -> str:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    return str(path)


def submitted(out: str, url: str) -> list[int]:
    """The ids of "job N submitted: <url>/ui/jobs/N" lines, checking each link."""
    ids = []
    for line in out.splitlines():
        match = SUBMITTED.match(line)
        assert match, line
        assert match.group(2) == f"{url}/ui/jobs/{match.group(1)}"
        ids.append(int(match.group(1)))
    return ids


def test_submit_and_job_read_as_a_summary_with_the_dashboard_link(
        cli: Cli, attack_node: AttackNode, tmp_path: Path) -> None:  # noqa: F811
    spec = job_spec(name="reading", steps=[
        {"name": "hello", "type": "shell", "argv": ["echo", "hi"]},
        {"name": "after", "type": "noop", "depends_on": ["hello"]}])
    code, out, err = cli("submit", submit_file(tmp_path, spec))
    assert (code, err) == (0, "") and len(out.splitlines()) == 1
    [job_id] = submitted(out, attack_node.url)
    attack_node.api().wait_job(job_id)
    code, out, err = cli("job", str(job_id))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"job {job_id}: reading"
    assert lines[1] == "state:       SUCCEED (attempt 1, node attack-1, 2/2 steps done)"
    assert re.match(r"submitted:   \S+Z \((\d+ s ago|just now)\) by config token #1$",
                    lines[2]), lines[2]
    assert re.match(r"finished:    \S+Z \(", out.split("\n")[4])
    assert re.match(r"duration:    \d+\.\ds$", lines[5]), lines[5]
    steps = lines[lines.index("steps:") + 1:lines.index("steps:") + 4]
    assert steps[0].split() == ["STEP", "STATE", "ATTEMPT", "DURATION", "EXIT", "ERROR"]
    assert steps[1].split()[:3] == ["hello", "SUCCEED", "1"] and steps[1].split()[4] == "0"
    assert steps[2].split()[:2] == ["after", "SUCCEED"]
    assert lines[-1] == f"dashboard: {attack_node.url}/ui/jobs/{job_id}"
    assert "{" not in out and len(lines) < 40
    code, out, _ = cli("job", str(job_id), "--json")
    assert code == 0 and json.loads(out)["steps"][0]["output"] == "hi\n"


def test_a_waiting_job_says_why_and_when(cli: Cli, tmp_path: Path) -> None:
    later = (datetime.now(timezone.utc) + timedelta(hours=3)).isoformat()
    code, out, _ = cli("submit", submit_file(tmp_path, job_spec(name="later",
                                                                not_before=later)), "--json")
    job = json.loads(out)
    assert code == 0 and job["state"] == "READY"
    code, out, _ = cli("job", str(job["id"]))
    facts = dict(line.split(":", 1) for line in out.splitlines()[1:8] if ":" in line)
    assert facts["state"].strip() == "READY (attempt 0, 0/1 steps done)"
    assert re.search(r"\(in (2|3) h\)$", facts["not before"]), facts
    assert facts["started"].strip() == "-" and facts["duration"].strip() == "-"
    assert re.fullmatch(r" not due until \S+ \[not_due\]", facts["not running"]), facts


def test_many_jobs_are_a_line_each_and_json_lines_with_json(
        cli: Cli, attack_node: AttackNode, tmp_path: Path) -> None:  # noqa: F811
    jobs = [job_spec(name=f"many{i}") for i in range(3)]
    code, out, err = cli("submit", submit_file(tmp_path, jobs))
    assert (code, err) == (0, "")
    ids = submitted(out, attack_node.url)
    assert [attack_node.api().job(i)["name"] for i in ids] == ["many0", "many1", "many2"]
    keyed = [dict(job, idempotency_key=f"k{i}") for i, job in enumerate(jobs)]
    code, out, _ = cli("submit", submit_file(tmp_path, keyed), "--json")
    first = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [item["created"] for item in first] == [True] * 3
    code, out, _ = cli("submit", submit_file(tmp_path, keyed))
    assert out.splitlines()[0] == (f"job {first[0]['id']} was submitted before (same "
                                   f"idempotency_key): {attack_node.url}/ui/jobs/"
                                   f"{first[0]['id']}")


def test_quiet_prints_only_ids_for_a_script(cli: Cli, attack_node: AttackNode,  # noqa: F811
                                            tmp_path: Path) -> None:
    code, out, err = cli("submit", submit_file(tmp_path, job_spec(name="quiet")), "-q")
    assert (code, err) == (0, "") and re.fullmatch(r"\d+\n", out), out
    assert attack_node.api().job(int(out))["name"] == "quiet"
    jobs = [job_spec(name=f"quiet{i}") for i in range(2)]
    code, out, _ = cli("submit", submit_file(tmp_path, jobs), "--quiet")
    ids = [int(line) for line in out.splitlines()]
    assert code == 0 and [attack_node.api().job(i)["name"] for i in ids] == ["quiet0", "quiet1"]
    code, _, err = cli("submit", submit_file(tmp_path, jobs), "-q", "--json")
    assert code == 2 and "not allowed with" in err, err


def test_the_jobs_table_shows_durations_and_relative_times(
        cli: Cli, attack_node: AttackNode, tmp_path: Path) -> None:  # noqa: F811
    code, out, _ = cli("submit", submit_file(tmp_path, job_spec(name="timed")))
    [job_id] = submitted(out, attack_node.url)
    attack_node.api().wait_job(job_id)
    code, out, _ = cli("jobs", "--name", "timed")
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "PROGRESS", "ATTEMPT", "NODE",
                              "DURATION", "SUBMITTED"]
    cells = re.split(r"\s{2,}", row)
    assert cells[:6] == [str(job_id), "timed", "SUCCEED", "1/1", "1", "attack-1"]
    assert re.fullmatch(r"\d+\.\ds", cells[6]) and re.fullmatch(r"\d+ s ago|just now",
                                                                 cells[7]), cells


@pytest.mark.parametrize("group,action", [("schedules", "list"), ("datasets", "list"),
                                          ("batch", "status")])
def test_a_planner_group_without_an_action_lists(cli: Cli, group: str, action: str) -> None:
    code, out, err = cli(group)
    assert (code, err) == (0, "") and out
    assert cli(group, action)[1] == out


def test_the_view_pattern_option_in_kebab_case_and_schedoscopes_spelling(cli: Cli) -> None:
    pattern = "app.eci.nowhere/Nothing/SHOP10"
    answers = {option: cli("views", option, pattern) for option in
               ("-v", "--view-url-path", "--viewUrlPath", "--view")}
    assert {code for code, _, _ in answers.values()} == {2}
    assert len({err for _, _, err in answers.values()}) == 1
    assert "no view named app.eci.nowhere/Nothing" in answers["-v"][2]
    code, text, _ = cli("materialize", "--help")
    assert code == 0 and "--view-url-path PATTERN" in text and "viewUrlPath" not in text


def test_without_a_token_the_error_says_where_make_run_keeps_one(cli: Cli) -> None:
    code, out, err = cli("jobs", token=None)
    assert (code, out) == (1, "") and len(err.splitlines()) == 1
    assert err.startswith("jobserver: missing bearer token: ")
    assert f"nor found in {Path.cwd() / '.jobserver' / 'api-token'};" in err
    assert "'make run' keeps its token in .jobserver/api-token" in err
    assert "export JOBSERVER_TOKEN=$(cat " in err
