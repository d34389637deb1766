"""Change detection: structure and transformation version checksums."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from jobserver.views.checksums import (is_sql, normalize_sql, structure_checksum,
                                       version_checksum)
from jobserver.views.shell_text import script_index, strip_comments
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


# -- shell comments ---------------------------------------------------------------------
SCRIPT = """set -eu
# Load one day's orders.
day="$1"   # yyyy-mm-dd
cp "/in/$day.csv" /out/  # the copy
"""


def test_a_shell_scripts_comments_do_not_change_the_checksum() -> None:
    base = version_checksum(spec(["sh", "-c", 'set -eu\nday="$1"\ncp "/in/$day.csv" /out/']))
    assert version_checksum(spec(["sh", "-c", SCRIPT])) == base
    assert version_checksum(spec(["sh", "-c", SCRIPT.replace("the copy", "a copy")])) == base
    assert version_checksum(spec(["sh", "-c", SCRIPT.replace("/out/", "/stage/")])) != base
    bash = version_checksum(spec(["/bin/bash", "-euo", "pipefail", "-c", "make # all\n"]))
    assert bash == version_checksum(spec(["/bin/bash", "-euo", "pipefail", "-c", "make"]))
    # Not a shell's script: every character counts, as before.
    assert version_checksum(spec(["run", "a # b"])) != version_checksum(spec(["run", "a"]))
    assert version_checksum(spec(["sh", "x.sh", "# a"])) != \
        version_checksum(spec(["sh", "x.sh", "# b"]))


@pytest.mark.parametrize("kept", [
    "echo '# {}'", 'echo "# {}"', "echo \\# {}", "echo a#{}", "echo $# {}",
    "echo ${{#x}} {}", "echo ${{x#{}}}", "echo $((16#f)) {}", "echo $'#{}'",
    "echo `echo # {}`", 'echo "$(echo " # {}")"', "cat <<E\n# {}\nE",
    "cat <<-'E'\n\t# {}\n\tE", "(( x = 2#1 )) {}", "ls @(a|#{})"])
def test_a_quoted_hash_is_no_comment(kept: str) -> None:
    """Text after a ``#`` the shell does not read as a comment is compared."""
    one = version_checksum(spec(["bash", "-c", kept.format("one")]))
    assert one != version_checksum(spec(["bash", "-c", kept.format("two")])), kept


@pytest.mark.parametrize("text", [
    "echo 'unclosed # c", 'echo "${x:-\'}\'} # c"', "cat <<< x # c",
    "echo $'a\\' # c'", "cat <<E\n# body, no end # c"])
def test_text_the_reader_cannot_follow_keeps_its_comments(text: str) -> None:
    assert strip_comments(text) == text


def test_a_shell_script_is_no_sql_text() -> None:
    """``set`` starts SQL too; a shell's script is read as shell, whose ``--all`` is
    no comment."""
    assert version_checksum(spec(["sh", "-c", "set -e; ls --all"])) != \
        version_checksum(spec(["sh", "-c", "set -e; ls --long"]))


@pytest.mark.parametrize("argv, index", [
    (["sh", "-c", "x"], 2), (["bash", "-euo", "pipefail", "-c", "x", "name"], 4),
    (["/bin/bash", "--norc", "-ec", "x"], 3), (["dash", "-c", "--", "x"], 3),
    (["sh", "--", "-c"], None), (["sh", "x.sh"], None), (["python3", "-c", "x"], None),
    (["sh", "-c"], None)])
def test_the_script_of_a_shell_is_the_operand_after_c(argv: list[str],
                                                      index: int | None) -> None:
    assert script_index(argv) == index


#: Scripts with comments where they are easy to mistake, each printing what it keeps.
CORPUS = [
    "echo '#a' \"#b\" \\#c $# a#b # gone\n# gone too\necho end",
    'x=ab; echo ${#x} ${x#a} "${x%b}" $((1 + 2)) # gone',
    'echo $(case a in a) echo " #in";; esac) # gone\necho "$(echo " #q")" # gone',
    "cat <<E # gone\n# kept\n  #kept\nE\ncat <<-'E'\n\t# kept $x\n\tE\necho `echo '#'` # gone",
    "for i in 1 2; do # gone\n  echo $i # gone\ndone; { echo br; } # gone",
    "echo a;#gone\necho b&&#gone\necho c",
]


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_the_shell_runs_the_stripped_script_alike(shell: str) -> None:
    """What the shell prints does not change when the comments are dropped, and the
    comments are gone."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    for script in CORPUS:
        stripped = strip_comments(script, bash=shell == "bash")
        assert "gone" not in stripped, (script, stripped)
        ran = [subprocess.run([shell, "-c", text], capture_output=True, text=True, timeout=10)
               for text in (script, stripped)]
        assert ran[0].returncode == 0, (script, ran[0].stderr)
        assert (ran[1].returncode, ran[1].stdout) == (0, ran[0].stdout), (script, stripped)
