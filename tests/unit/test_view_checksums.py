"""Change detection: structure and transformation version checksums."""

from __future__ import annotations

from typing import Any

from jobserver.views.checksums import (is_sql, normalize_sql, structure_checksum,
                                       version_checksum)
from jobserver.views.spec import ViewSpec, parse_view


def spec(argv: list[str] | None = None, **extra: Any) -> ViewSpec:
    step: dict[str, Any] = {"name": "t", "type": "shell", "argv": argv or ["run", "--day", "1"]}
    body: dict[str, Any] = {
        "name": "app.x/V", "structure": {"fields": [{"name": "id", "type": "bigint"}]},
        "transformation": {"job": {"steps": [step]}}}
    for key, value in extra.items():
        if key == "step":
            step.update(value)
        elif key == "job":
            body["transformation"]["job"].update(value)
        else:
            body[key] = value
    return parse_view(body)


def test_structure_checksum_changes_with_a_field_not_with_a_description() -> None:
    base = structure_checksum(spec())
    described = spec(structure={"fields": [{"name": "id", "type": "bigint",
                                            "description": "the id"}]})
    retyped = spec(structure={"fields": [{"name": "id", "type": "int"}]})
    added = spec(structure={"fields": [{"name": "id", "type": "bigint"},
                                       {"name": "q", "type": "string"}]})
    assert structure_checksum(described) == base
    assert len({base, structure_checksum(retyped), structure_checksum(added)}) == 3


def test_sql_text_ignores_whitespace_and_comments() -> None:
    a = spec(["psql", "-c", "SELECT id,\n       query -- the search text\nFROM search"])
    b = spec(["psql", "-c", "/* nightly */ SELECT id, query FROM   search  "])
    c = spec(["psql", "-c", "SELECT id, query FROM search WHERE shop = 'x -- y'"])
    assert version_checksum(a) == version_checksum(b)
    assert version_checksum(a) != version_checksum(c)


def test_sql_literals_keep_their_text() -> None:
    assert normalize_sql("select '--  kept  ' -- dropped\n, 1") == "select '--  kept  ' , 1"
    assert not is_sql("--verbose") and is_sql("select 1") and not is_sql("selection")


def test_shell_arguments_ignore_surrounding_and_repeated_whitespace() -> None:
    a = spec(["sh", "-c", "echo  a\n  b "])
    b = spec(["sh", "-c", "echo a b"])
    assert version_checksum(a) == version_checksum(b)
    assert version_checksum(spec(["run", "--day", "1"])) != \
        version_checksum(spec(["run", "--days", "1"]))


def test_a_changed_step_changes_the_version_checksum() -> None:
    assert version_checksum(spec(["run", "a"])) != version_checksum(spec(["run", "b"]))
    assert version_checksum(spec(step={"env": {"MODE": "x"}})) != version_checksum(spec())


def test_when_and_where_a_job_runs_is_not_its_version() -> None:
    base = version_checksum(spec())
    assert version_checksum(spec(step={"retries": 3, "timeout": 60})) == base
    assert version_checksum(spec(job={"name": "other", "priority": 5})) == base


def test_a_defined_version_is_the_only_thing_versioned() -> None:
    one = spec(["run", "a"], version="1.0.0")
    assert version_checksum(one) == version_checksum(spec(["run", "b"], version="1.0.0"))
    assert version_checksum(one) != version_checksum(spec(["run", "a"], version="1.0.1"))


def test_noop_views_share_one_checksum() -> None:
    noop = parse_view({"name": "app.x/N", "structure": {"fields": [{"name": "a", "type": "int"}]},
                       "transformation": "noop"})
    assert version_checksum(noop) == version_checksum(noop.model_copy(update={"name": "a.b/C"}))
    assert version_checksum(noop) != version_checksum(spec())
