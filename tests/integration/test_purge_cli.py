"""``jobserver purge`` against a real store: what a dry run counts is what the run
deletes; bad input is one line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobserver.cli import main
from jobserver.states import State
from jobserver.store import Store
from tests.integration.test_retention import CUTOFF, newest_young, old_job, present

COUNTS = re.compile(r"(would delete|deleted) (\d+) jobs \((\d+) steps, (\d+) events\)")


def purge(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], store: Store,
          tmp_path: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("JOBSERVER_DATABASE__URL", store.url)
    monkeypatch.setenv("JOBSERVER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("JOBSERVER_RETENTION__PAUSE", "0")
    code = main(["purge", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_dry_run_counts_what_purge_then_deletes(
        store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    upstream = old_job(store)
    doomed = {upstream, old_job(store, after=[upstream]), old_job(store, State.DISCARDED),
              old_job(store, steps_count=3)}
    error = old_job(store, State.ERROR)
    tail = newest_young(store)
    before = CUTOFF.date().isoformat()
    code, out, _ = purge(monkeypatch, capsys, store, tmp_path, "--before", before,
                         "--dry-run")
    dry = COUNTS.search(out)
    assert code == 0 and dry is not None, out
    assert dry.group(1) == "would delete" and present(store) == doomed | {error, tail}
    code, out, _ = purge(monkeypatch, capsys, store, tmp_path, "--before", before)
    real = COUNTS.search(out)
    assert code == 0 and real is not None, out
    assert real.group(1) == "deleted" and real.groups()[1:] == dry.groups()[1:]
    assert int(real.group(2)) == len(doomed) and present(store) == {error, tail}
    code, out, _ = purge(monkeypatch, capsys, store, tmp_path, "--before", before,
                         "--state", "error,succeed")
    assert code == 0 and "deleted 1 jobs" in out and present(store) == {tail}


@pytest.mark.parametrize("args, message", [
    (["--before", "last tuesday"], "--before: 'last tuesday' is not a date"),
    (["--before", "2026-01-01", "--state", "RUNNING"],
     "--state: 'RUNNING' is not a state purge deletes"),
    (["--before", "2026-01-01", "--state", ","], "--state: name at least one state"),
])
def test_bad_input_is_one_line_and_exit_2(
        args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("JOBSERVER_DATA_DIR", str(tmp_path))
    code = main(["purge", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "jobserver.db").exists()  # refused before opening the store
