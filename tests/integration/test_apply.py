"""``jobserver apply`` and ``jobserver schedules`` as a user runs them: ``main([...])``
against a live API server (werkzeug, in a thread) over a real store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobserver.cli import main
from jobserver.schedules.tables import schedules
from jobserver.store import Store
from tests.helpers import live_api

TOKEN = "apply-token-0123456789abcdef"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "schedules.yaml"

SCHEDULE = """\
kind: Schedule
name: {name}
template:
  name: etl
  steps: [{{name: a, type: noop}}]
trigger: {{type: time, cron: "{cron}", timezone: Europe/Berlin}}
"""

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def url(store: Store, tmp_path: Path) -> Iterator[str]:
    with live_api(store, tmp_path / "data", TOKEN) as base:
        yield base


@pytest.fixture
def run(url: str, capsys: pytest.CaptureFixture[str]) -> Run:
    """``jobserver ARGS --url … --token …``: ``(exit code, stdout, stderr)``."""
    def call(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--url", url, "--token", TOKEN])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return call


def write(tmp_path: Path, *documents: str) -> str:
    path = tmp_path / "schedules.yaml"
    path.write_text("---\n".join(documents))
    return str(path)


def stored(store: Store) -> dict[str, tuple[bool, int]]:
    """Each schedule's enabled flag and generation by ``namespace/name``."""
    with store.tx.read() as conn:
        return {f"{row.namespace}/{row.name}": (bool(row.enabled), row.generation)
                for row in conn.execute(schedules.select())}


def test_the_example_applies_and_a_second_apply_changes_nothing(run: Run,
                                                                store: Store) -> None:
    code, out, err = run("apply", str(EXAMPLE), "--dry-run")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["schedule default/nightly-extract: would create",
                                "schedule default/daily-report: would create",
                                "schedule default/hourly-compaction: would create"]
    assert stored(store) == {}
    code, out, err = run("apply", str(EXAMPLE))
    assert (code, err) == (0, "")
    assert [line.split(": ")[1] for line in out.splitlines()] == ["created"] * 3
    assert stored(store) == {"default/nightly-extract": (True, 1),
                             "default/daily-report": (True, 1),
                             "default/hourly-compaction": (False, 1)}
    code, out, err = run("apply", str(EXAMPLE))
    assert (code, err) == (0, "")
    assert [line.split(": ")[1] for line in out.splitlines()] == ["unchanged"] * 3


def test_the_datasets_example_applies_and_a_second_apply_changes_nothing(
        run: Run, store: Store) -> None:
    example = EXAMPLE.with_name("datasets.yaml")
    code, out, err = run("apply", str(example), "--dry-run")
    assert (code, err) == (0, "")
    assert [line.split(": ")[1] for line in out.splitlines()] == ["would create"] * 3
    code, out, err = run("apply", str(example))
    assert (code, err) == (0, "")
    assert [line.split(": ")[1] for line in out.splitlines()] == ["created"] * 3
    assert stored(store) == {"default/cleanse-raw": (True, 1)}
    code, out, err = run("apply", str(example))
    assert (code, err) == (0, "")
    assert [line.split(": ")[1] for line in out.splitlines()] == ["unchanged"] * 3


def test_a_change_is_shown_then_applied(run: Run, store: Store, tmp_path: Path) -> None:
    first = SCHEDULE.format(name="a", cron="0 1 * * *")
    second = SCHEDULE.format(name="b", cron="0 2 * * *")
    assert run("apply", write(tmp_path, first, second))[0] == 0
    changed = write(tmp_path, first + "enabled: true\n",
                    SCHEDULE.format(name="b", cron="0 3 * * *"))
    code, out, _ = run("apply", changed, "--dry-run")
    assert (code, out.splitlines()) == (0, ["schedule default/a: would update (enabled)",
                                            "schedule default/b: would update (trigger)"])
    assert stored(store) == {"default/a": (False, 1), "default/b": (False, 1)}
    code, out, _ = run("apply", changed)
    assert (code, out.splitlines()) == (0, ["schedule default/a: updated (enabled)",
                                            "schedule default/b: updated (trigger)"])
    assert stored(store) == {"default/a": (True, 1), "default/b": (False, 2)}


def test_one_refused_document_applies_nothing(run: Run, store: Store, tmp_path: Path) -> None:
    path = write(tmp_path, SCHEDULE.format(name="good", cron="0 1 * * *"),
                 SCHEDULE.format(name="bad", cron="0 0 1 * * *"),
                 "kind: Widget\nname: raw\n", "just text\n",
                 SCHEDULE.format(name="good", cron="0 2 * * *"),
                 SCHEDULE.format(name="bad/name", cron="0 1 * * *"))
    code, out, err = run("apply", path)
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith("document 2 (schedule default/bad): refused: trigger.cron: ")
    assert lines[1].startswith("  trigger.cron: 6 fields")
    assert "document 3 (Widget): refused: kind: unknown kind 'Widget'" in err
    assert "document 4 (?): refused: document: expected a mapping" in err
    assert "document 5 (schedule default/good): refused: also in document 1" in err
    assert "document 6 (Schedule): refused: name: " in err
    assert lines[-1] == "nothing applied: 5 of 6 documents refused"
    assert stored(store) == {}


def test_deleted_documents(run: Run, store: Store, tmp_path: Path) -> None:
    assert run("apply", write(tmp_path, SCHEDULE.format(name="old", cron="0 1 * * *")))[0] == 0
    gone = write(tmp_path, "kind: Schedule\nname: old\ndeleted: true\n")
    assert run("apply", gone, "--dry-run")[1] == "schedule default/old: would delete\n"
    assert run("apply", gone)[1] == "schedule default/old: deleted\n"
    assert stored(store) == {}
    assert run("apply", gone)[1] == "schedule default/old: unchanged (absent)\n"


def test_yaml_that_does_not_parse(run: Run, tmp_path: Path) -> None:
    code, _, err = run("apply", write(tmp_path, "kind: [Schedule\n"))
    assert code == 1 and "not valid YAML" in err


def alias_bomb() -> str:
    """A document of 1 KB standing for 9^9 strings (billion laughs)."""
    lines = ["kind: Schedule", "name: laughs", "a: &a [" + ", ".join(["lol"] * 9) + "]"]
    for before, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{before}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_by_line_at_once(run: Run, store: Store,
                                                  tmp_path: Path) -> None:
    path = write(tmp_path, SCHEDULE.format(name="first", cron="0 1 * * *"), alias_bomb())
    started = time.monotonic()
    code, out, err = run("apply", path)
    assert (code, out) == (2, "")
    assert err == (f"jobserver: {path}:14: alias *d repeats more nodes than aliases may "
                   "(10000 in one file)\n")
    assert time.monotonic() - started < 5
    assert stored(store) == {}


def test_a_recursive_alias_is_refused_by_line_not_a_traceback(run: Run, store: Store,
                                                              tmp_path: Path) -> None:
    path = write(tmp_path, "kind: Schedule\nname: loop\ntemplate: &t\n  name: etl\n"
                           "  steps: [*t]\ntrigger: {type: time, cron: '0 1 * * *'}\n")
    code, out, err = run("apply", path)
    assert (code, out) == (2, "")
    assert err == (f"jobserver: {path}:5: alias *t is inside the node it names "
                   "(a recursive alias)\n")
    assert stored(store) == {}


def test_a_few_aliases_apply_as_written(run: Run, store: Store, tmp_path: Path) -> None:
    path = write(tmp_path, "kind: Schedule\nname: shared\ntemplate:\n  name: etl\n"
                           "  steps: [&s {name: a, type: noop}, {<<: *s, name: b}]\n"
                           "trigger: {type: time, cron: '0 1 * * *'}\n")
    assert run("apply", path)[:2] == (0, "schedule default/shared: created\n")
    assert stored(store) == {"default/shared": (False, 1)}


def test_schedules_commands(run: Run, store: Store, tmp_path: Path) -> None:
    documents = [SCHEDULE.format(name="a", cron="0 1 * * *"),
                 "namespace: team\n" + SCHEDULE.format(name="b", cron="0 2 * * *")]
    assert run("apply", write(tmp_path, *documents))[0] == 0
    code, out, _ = run("schedules", "list")
    rows = [line.split()[:4] for line in out.splitlines()]
    assert (code, rows) == (0, [["SCHEDULE", "ENABLED", "GEN", "NEXT"],
                                ["default/a", "no", "1", "-"], ["team/b", "no", "1", "-"]])
    assert run("schedules", "enable", "a")[1] == "schedule default/a: enabled\n"
    assert run("schedules", "list", "--enabled")[1].splitlines()[1].startswith("default/a")
    code, out, _ = run("schedules", "show", "team/b")
    assert code == 0 and '"name": "b"' in out and '"namespace": "team"' in out
    assert run("schedules", "disable", "default/a")[1] == "schedule default/a: disabled\n"
    assert run("schedules", "jobs", "a")[1] == "(no schedule-jobs)\n"
    assert run("schedules", "evaluations", "a")[1] == "(no evaluations)\n"
    assert run("schedules", "delete", "team/b")[1] == "schedule team/b: deleted\n"
    code, _, err = run("schedules", "show", "team/b")
    assert code == 1 and "schedule team/b does not exist" in err
    assert set(stored(store)) == {"default/a"}


def test_the_schedule_name_argument(run: Run) -> None:
    code, _, err = run("schedules", "show", "a/b/c")
    assert code == 2 and "is not NAMESPACE/NAME or NAME" in err


# -- datasets ------------------------------------------------------------------------------
DATASET = """\
kind: Dataset
name: raw
description: {description}
key:
  - {{name: date, type: date}}
  - {{name: hour, type: int}}
"""


def test_a_dataset_applies_once_then_is_unchanged(run: Run, store: Store,
                                                  tmp_path: Path) -> None:
    path = write(tmp_path, DATASET.format(description="raw orders"))
    assert run("apply", path, "--dry-run")[1] == "dataset default/raw: would create\n"
    assert run("apply", path)[1] == "dataset default/raw: created\n"
    assert run("apply", path)[1] == "dataset default/raw: unchanged\n"
    changed = write(tmp_path, DATASET.format(description="raw orders, by hour"))
    assert run("apply", changed)[1] == "dataset default/raw: updated (description)\n"
    assert store.datasets.get("default", "raw").description == "raw orders, by hour"


def test_a_key_change_of_a_dataset_with_partitions_is_refused(run: Run, store: Store,
                                                               tmp_path: Path) -> None:
    assert run("apply", write(tmp_path, DATASET.format(description="x")))[0] == 0
    store.partitions.add("default", "raw", [{"key": {"date": "2026-11-01", "hour": 1},
                                             "location": "/p"}])
    narrower = DATASET.format(description="x").replace("  - {name: hour, type: int}\n", "")
    code, out, err = run("apply", write(tmp_path, narrower))
    assert (code, out) == (1, "")
    assert "document 1 (dataset default/raw): refused: key: dataset default/raw has 1 " \
           "partition(s), so its key cannot change" in err
    assert len(store.datasets.get("default", "raw").key) == 2
    gone = write(tmp_path, "kind: Dataset\nname: raw\ndeleted: true\n")
    assert run("apply", gone)[1] == "dataset default/raw: deleted\n"


def test_datasets_and_partitions_commands(run: Run, store: Store, tmp_path: Path) -> None:
    assert run("apply", write(tmp_path, DATASET.format(description="raw orders")))[0] == 0
    assert run("datasets", "list")[1].splitlines()[1].split() == [
        "default/raw", "date:", "date,", "hour:", "int", "raw", "orders"]
    code, out, _ = run("partitions", "add", "raw", "--key", "date=2026-11-01",
                       "--key", "hour=7", "--location", "/p/7", "--metadata", '{"rows": 3}')
    assert (code, out) == (0, "dataset default/raw: 1 partition(s) added\n")
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"key": {"date": "2026-11-02", "hour": h}, "location": "/q"}
                                 for h in (7, 8)]))
    assert run("partitions", "add", "raw", "--file", str(batch), "--if-absent")[1] == \
        "dataset default/raw: 2 partition(s) added\n"
    assert run("partitions", "add", "raw", "--file", str(batch), "--if-absent")[1] == \
        "dataset default/raw: 0 partition(s) added, 2 skipped (existing)\n"
    code, out, _ = run("partitions", "list", "raw", "--where", "hour >= 7",
                       "--where", "date > 2026-11-01", "--oldest")
    assert [line.split()[1:3] for line in out.splitlines()[1:]] == [
        ["date=2026-11-02,", "hour=7"], ["date=2026-11-02,", "hour=8"]]
    assert run("partitions", "delete", "raw", "--key", "date=2026-11-02", "--key",
               "hour=8")[1] == "dataset default/raw: 1 partition(s) deleted\n"
    assert json.loads(run("datasets", "show", "raw")[1])["partition_count"] == 2
    assert run("datasets", "delete", "raw")[1] == "dataset default/raw: deleted\n"


def test_consumers_commands(run: Run, store: Store, tmp_path: Path) -> None:
    example = EXAMPLE.with_name("datasets.yaml")
    assert run("apply", str(example))[0] == 0
    store.partitions.add("default", "raw", [{"key": {"date": "2026-11-01", "hour": h},
                                             "location": "/p"} for h in (5, 6, 7)])
    code, out, _ = run("consumers", "list", "raw")
    assert code == 0 and out.splitlines()[1].split() == ["cleanse", "2", "0", "0", "0", "0"]
    shown = json.loads(run("consumers", "show", "raw", "cleanse")[1])
    assert shown["lag"] == 2 and shown["spec"]["filter"] == ["hour >= 6"]
    assert run("consumers", "reset-failed", "raw", "cleanse")[1] == \
        "consumer default/raw/cleanse: 0 FAILED partition(s) back to NEW\n"
    code, _, err = run("consumers", "show", "raw", "nobody")
    assert code != 0 and "nobody" in err
    code, out, err = run("consumers", "delete", "raw", "cleanse")  # the example's schedule
    assert (code, out) == (1, "") and "schedule default/cleanse-raw" in err, err
    assert "consumer cleanse of dataset default/raw is named by schedule default/" \
           "cleanse-raw (trigger.consumer, template.inputs[0].consumer): change or " \
           "delete that schedule first" in err, err
    assert run("consumers", "list", "raw")[1].splitlines()[1].split()[0] == "cleanse"
    assert run("schedules", "delete", "cleanse-raw")[0] == 0
    assert run("consumers", "delete", "raw", "cleanse")[1] == \
        "consumer default/raw/cleanse: deleted\n"
    assert run("consumers", "list", "raw")[1] == "(no consumers)\n"


@pytest.mark.parametrize("args,message", [
    (("--key", "date=2026-11-01", "--key", "hour=noon", "--location", "/p"),
     "--key 'hour=noon': int: 'noon' is not an integer"),
    (("--key", "date=2026-11-01", "--location", "/p"), "--key: missing hour"),
    (("--key", "colour=red", "--location", "/p"), "FIELD one of date, hour"),
    (("--key", "date=2026-11-01", "--key", "hour=1"), "--location is required"),
    (("--file", "/nonexistent.json"), "--file /nonexistent.json"),
])
def test_bad_partition_arguments_exit_2(run: Run, store: Store, tmp_path: Path,
                                        args: tuple[str, ...], message: str) -> None:
    assert run("apply", write(tmp_path, DATASET.format(description="x")))[0] == 0
    code, _, err = run("partitions", "add", "raw", *args)
    assert code == 2 and message in err, err
    assert store.datasets.get("default", "raw").partition_count == 0


def test_a_consumer_applies_with_its_dataset(run: Run, store: Store, tmp_path: Path) -> None:
    documents = DATASET.format(description="raw") + (
        "---\nkind: Consumer\ndataset: raw\nname: cleanse\nprocessing_limit: 10\n"
        "filter: ['hour >= 6']\n")
    path = write(tmp_path, documents)
    assert run("apply", path)[1] == ("dataset default/raw: created\n"
                                     "consumer default/raw/cleanse: created\n")
    assert run("apply", path)[1].endswith("consumer default/raw/cleanse: unchanged\n")
    assert store.consumers.get("default", "raw", "cleanse").spec.filter == ["hour >= 6"]
    bad = write(tmp_path, "kind: Consumer\ndataset: raw\nname: c2\nfilter: ['shop = x']\n")
    code, _, err = run("apply", bad)
    assert code == 1 and "filter[0]" in err
    gone = write(tmp_path, "kind: Consumer\ndataset: raw\nname: cleanse\ndeleted: true\n")
    assert run("apply", gone)[1] == "consumer default/raw/cleanse: deleted\n"
