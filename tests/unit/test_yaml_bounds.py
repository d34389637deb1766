"""YAML from users is composed within bounds (``jobserver.yaml_bounds``): aliases may
repeat only so many nodes, none may name the node it is in, nothing nests deep; each
refusal names its line, before anything is expanded."""

from __future__ import annotations

import time

import pytest
import yaml

from jobserver.yaml_bounds import MAX_ALIAS_NODES, MAX_DEPTH, YamlBoundError, load_all


def refusal(text: str) -> YamlBoundError:
    with pytest.raises(YamlBoundError) as info:
        load_all(text)
    return info.value


def test_an_exponential_alias_bomb_is_refused_while_composing() -> None:
    lines = ["a: &a [" + ", ".join(["lol"] * 9) + "]"]
    for before, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{before}"] * 9) + "]")
    started = time.monotonic()
    error = refusal("\n".join(lines))
    assert time.monotonic() - started < 1
    assert (error.line, error.reason) == (
        5, f"alias *d repeats more nodes than aliases may ({MAX_ALIAS_NODES} in one file)")


def test_many_small_aliases_add_up_across_documents() -> None:
    document = "x: &x [1, 2, 3, 4]\ny: [" + ", ".join(["*x"] * 1000) + "]\n"
    assert len(load_all(document + "---\n" + document)) == 2  # 2 x 5,000 nodes
    assert refusal(document + "---\n" + document + "---\n" + document).line == 8


@pytest.mark.parametrize("text,line", [
    ("a: &a [1, *a]\n", 1),
    ("a: 1\nb: &b\n  c: {d: *b}\n", 3),
    ("- &s\n  - &t [*s]\n", 2),
])
def test_a_recursive_alias_is_refused(text: str, line: int) -> None:
    error = refusal(text)
    assert error.line == line and "(a recursive alias)" in error.reason


@pytest.mark.parametrize("text", ["[" * 100_000, "- " * (MAX_DEPTH + 1) + "x",
                                  "{a: " * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)])
def test_deep_nesting_is_refused_not_a_recursion_error(text: str) -> None:
    assert refusal(text).reason == f"nested deeper than {MAX_DEPTH} levels"


def test_what_resources_use_loads_as_safe_load_all_does() -> None:
    text = ("d: &d {x: 1, y: [1, 2]}\ne: {<<: *d, z: 3}\nf: *d\nt: 2015-05-03\n"
            "---\nd: &d [a]\ng: *d\n---\n" + "- " * (MAX_DEPTH - 1) + "deep\n")
    assert load_all(text) == list(yaml.safe_load_all(text))


def test_it_stays_a_safe_loader() -> None:
    with pytest.raises(yaml.YAMLError):
        load_all("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(yaml.YAMLError):
        load_all("a: *undefined\n")
