"""``jobserver submit`` as a user runs it, ``main([...])`` against a live API server
(werkzeug, in a thread) over a real store: one job, a JSON array or JSON lines
through the batch route, each job a "job N submitted: <page>" line (``--json``: the
API's answer), errors as one line naming the job."""

from __future__ import annotations

import io
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server

from jobserver.api import create_app
from jobserver.cli import main
from jobserver.cli import submit as cli_submit
from jobserver.config import load_config
from jobserver.store import Store
from tests.helpers import job_spec

TOKEN = "submit-token-0123456789abcdef"

Run = Callable[..., tuple[int, str, str]]


@contextmanager
def serve(store: Store, data_dir: Path, **env: str) -> Iterator[str]:
    environ = {"JOBSERVER_DATA_DIR": str(data_dir), "JOBSERVER_API__TOKENS": TOKEN,
               "JOBSERVER_API__SUBMIT_BURST": "5000", **env}
    server = make_server("127.0.0.1", 0, create_app(load_config(environ=environ), store=store),
                         threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


@pytest.fixture
def url(store: Store, tmp_path: Path) -> Iterator[str]:
    with serve(store, tmp_path / "data") as served:
        yield served


def runner(url: str, capsys: pytest.CaptureFixture[str]) -> Run:
    """``jobserver submit ARGS --url … --token …``: ``(exit code, stdout, stderr)``."""
    def call(*args: str) -> tuple[int, str, str]:
        code = main(["submit", *args, "--url", url, "--token", TOKEN])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return call


@pytest.fixture
def run(url: str, capsys: pytest.CaptureFixture[str]) -> Run:
    return runner(url, capsys)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "jobs.json"
    path.write_text(text)
    return str(path)


def ids(out: str, url: str) -> list[int]:
    """The ids of the "job N submitted: <url>/ui/jobs/N" lines a user reads."""
    found = [re.fullmatch(rf"job (\d+) submitted: {re.escape(url)}/ui/jobs/\1", line)
             for line in out.splitlines()]
    assert all(found), out
    return [int(match.group(1)) for match in found if match]


def names(store: Store, out: str, url: str) -> list[str]:
    return [store.jobs.get(job_id).name for job_id in ids(out, url)]


def lines_of(*jobs: dict[str, Any]) -> str:
    return "\n".join(json.dumps(job) for job in jobs) + "\n"


def test_an_array_is_submitted_and_each_job_printed_in_order(run: Run, store: Store, url: str,
                                                             tmp_path: Path) -> None:
    jobs = [job_spec(name=f"a{index}") for index in range(3)]
    code, out, err = run(write(tmp_path, json.dumps(jobs, indent=2)))
    assert (code, err) == (0, "")
    assert ids(out, url) == sorted(ids(out, url))
    assert names(store, out, url) == ["a0", "a1", "a2"]
    code, out, err = run(write(tmp_path, json.dumps(jobs)), "--json")
    assert (code, err) == (0, "")
    assert [sorted(json.loads(line)) for line in out.splitlines()] == [["created", "id"]] * 3


def test_json_lines_from_stdin(run: Run, store: Store, url: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    text = lines_of(job_spec(name="l1"), job_spec(name="l2")) + "\n" + lines_of(
        dict(job_spec(name="l3"), idempotency_key="line-3"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, out, err = run("-")
    assert (code, err) == (0, "")
    assert names(store, out, url) == ["l1", "l2", "l3"]
    # The keyed job replays; the others are new jobs again.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, again, _ = run("-")
    first, second = out.splitlines(), again.splitlines()
    assert code == 0 and second[:2] != first[:2]
    assert second[2] == first[2].replace(" submitted: ", " was submitted before (same "
                                                         "idempotency_key): ")


def test_one_object_is_one_line_and_json_with_json(run: Run, url: str,
                                                   tmp_path: Path) -> None:
    code, out, err = run(write(tmp_path, json.dumps(job_spec(name="single"))),
                         "--idempotency-key", "one")
    assert (code, err) == (0, "")
    [job_id] = ids(out, url)
    code, out, err = run(write(tmp_path, json.dumps(job_spec(name="single"))),
                         "--idempotency-key", "one", "--json")
    assert (code, err) == (0, "")
    job = json.loads(out)
    assert (job["id"], job["name"], job["state"]) == (job_id, "single", "READY")


def test_many_jobs_go_in_batches(run: Run, store: Store, url: str, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_submit, "BATCH", 2)
    code, out, err = run(write(tmp_path, lines_of(*[job_spec(name=f"b{i}") for i in range(5)])))
    assert (code, err) == (0, "")
    assert names(store, out, url) == [f"b{i}" for i in range(5)]


def test_a_refused_batch_names_the_job_by_its_place_in_the_file(
        run: Run, store: Store, url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_submit, "BATCH", 2)
    jobs = [job_spec(name=f"c{i}") for i in range(5)]
    jobs[3]["steps"] = []
    code, out, err = run(write(tmp_path, "\n" + lines_of(*jobs)))  # line 1 is blank
    assert code == 1
    assert names(store, out, url) == ["c0", "c1"]  # the first batch; the second was refused
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("jobserver: jobs[3].steps: ")
    assert "(line 5)" in err and "jobs[0] to jobs[1] were submitted" in err


@pytest.mark.parametrize("text,args,message", [
    ("{not json", (), "not valid JSON"),
    ('{"name": "a",\n "steps": [}\n', (), "not valid JSON"),
    (lines_of(job_spec()) + "{oops\n", (), "line 2: not valid JSON"),
    (lines_of(job_spec()) + "[1]\n", (), "line 2: expected a JSON object"),
    (json.dumps([job_spec(), 7]), (), "jobs[1]: expected a JSON object"),
    ("[]", (), "the array holds no job"),
    ("\n\n", (), "holds no job"),
    (json.dumps([job_spec(), job_spec()]), ("--idempotency-key", "k"),
     "--idempotency-key is for one job"),
])
def test_bad_input_is_one_line_and_exit_2(run: Run, store: Store, tmp_path: Path, text: str,
                                          args: tuple[str, ...], message: str) -> None:
    code, out, err = run(write(tmp_path, text), *args)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err, err
    assert store.jobs.list()[0] == []


def test_a_missing_file_is_exit_2(run: Run, tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path / "absent.json"))
    assert code == 2 and err.startswith("jobserver: cannot read ")


def test_the_rate_limit_is_waited_for(store: Store, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A burst of 2 refuses a batch of 5 whole: the command sends smaller batches, and
    waits Retry-After when the bucket is empty."""
    with serve(store, tmp_path / "data", JOBSERVER_API__SUBMIT_RATE="20",
               JOBSERVER_API__SUBMIT_BURST="2") as url:
        jobs = [job_spec(name=f"r{i}") for i in range(5)]
        code, out, err = runner(url, capsys)(write(tmp_path, json.dumps(jobs)))
        assert (code, err) == (0, "")
        assert names(store, out, url) == [f"r{i}" for i in range(5)]
