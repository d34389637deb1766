"""The command line's parser, walked as a whole: every command (nested ones and those
added later included) takes the global options before and after it, every option has
help text, and no help shows reStructuredText."""

from __future__ import annotations

import argparse
import re

import pytest

from jobserver.cli import _parser
from jobserver.cluster import new_cluster_token
from jobserver.cli.parsing import commands

#: reStructuredText that docstrings use and a terminal should not show.
RST = re.compile(r"``|`[^`\s]+`_?|:(?:class|mod|func|meth|data|attr|ref|exc|py):|^\.\. ",
                 re.MULTILINE)


def every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    parser = _parser()
    return [("jobserver", parser), *((f"jobserver {name}", command)
                                     for name, command in commands(parser))]


def leaves() -> list[tuple[str, argparse.ArgumentParser]]:
    return [(name, command) for name, command in every_parser()
            if not any(isinstance(a, argparse._SubParsersAction) for a in command._actions)]


def test_the_walk_finds_nested_commands() -> None:
    names = {name for name, _ in every_parser()}
    assert {"jobserver serve", "jobserver jobs", "jobserver batch run",
            "jobserver token create", "jobserver partitions add"} <= names
    assert len(leaves()) > 30


def test_every_option_and_command_has_help() -> None:
    missing = []
    for name, parser in every_parser():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = "/".join(action.option_strings) or action.dest
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {label}")
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {choice.dest}" for choice in action._choices_actions
                            if not choice.help]
    assert missing == []


@pytest.mark.parametrize("name,parser", every_parser(), ids=lambda item: str(item))
def test_help_shows_no_markup(name: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert not RST.search(text), (name, RST.search(text))


def test_serve_help_says_where_configuration_comes_from() -> None:
    serve = dict(every_parser())["jobserver serve"]
    text = " ".join(serve.format_help().split())
    for needle in ("--config", "$JOBSERVER_CONFIG", "environment variables",
                   "JOBSERVER_SCHEDULER__MODE", "defaults", "naming the key"):
        assert needle in text, needle


def test_top_level_help_names_the_exit_codes_and_the_global_options() -> None:
    text = " ".join(_parser().format_help().split())
    assert "2 bad usage" in text and "before or after the command" in text
    for flag in ("--config", "--log-level", "--log-format", "--url", "--token"):
        assert flag in text


@pytest.mark.parametrize("argv", [
    ["--token", "T", "--url", "http://h:1", "jobs"],
    ["jobs", "--token", "T", "--url", "http://h:1"],
    ["--token", "X", "jobs", "--token", "T", "--url", "http://h:1"],  # the later wins
])
def test_client_options_before_or_after_the_command(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.command, args.token, args.url) == ("jobs", "T", "http://h:1")


def test_global_options_before_or_after_any_command() -> None:
    for name, parser in leaves():
        words = name.split()[1:]
        required = _required(parser)
        before = _parser().parse_args(["--config", "a.toml", "--log-level", "debug",
                                       "--log-format", "json", *words, *required])
        after = _parser().parse_args([*words, *required, "--config", "a.toml",
                                      "--log-level", "debug", "--log-format", "json"])
        for args in (before, after):
            assert (args.config, args.log_level, args.log_format) == (
                "a.toml", "DEBUG", "json"), name
        neither = _parser().parse_args([*words, *required])
        assert (neither.config, neither.log_level) == (None, "INFO"), name


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Values for the arguments ``parser`` requires (positionals first)."""
    positionals, options = [], []
    for action in parser._actions:
        if action.option_strings and not action.required:
            continue
        value = str(next(iter(action.choices))) if action.choices else (
            "1" if action.type is int else "2026-01-01" if action.type else "x")
        if action.option_strings:
            options += [action.option_strings[0], value]
        else:
            positionals.append(value)
    return positionals + options


def test_a_command_added_later_takes_the_global_options_too() -> None:
    from jobserver.cli.parsing import Parser, client_options, global_options

    parser = Parser(prog="jobserver")
    sub = parser.add_subparsers(dest="command", required=True)
    logs = sub.add_parser("logs", help="a later command")
    logs.add_argument("id", type=int, help="the job")
    client_options(logs)
    global_options(parser)
    args = parser.parse_args(["logs", "7", "--token", "T", "--log-level", "warning"])
    assert (args.id, args.token, args.log_level, args.client_command) == (7, "T", "WARNING",
                                                                          True)


def test_a_token_the_launcher_makes_is_taken_after_token() -> None:
    """The banner's token, typed after ``--token``: a random token starting with ``-``
    (one in 64 of urlsafe base64) would be read as an option and refused."""
    parser = _parser()
    for _ in range(1000):
        token = new_cluster_token()
        args = parser.parse_args(["jobs", "--token", token])
        assert args.token == token


def test_a_value_read_as_an_option_gets_the_equals_form_named(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(["jobs", "--token", "-7Ydt9sihQQCsqM9PX4A8CDeUvTuCLHjcn"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --token: expected one argument" in err
    assert "--option=VALUE" in err and "Traceback" not in err
    assert _parser().parse_args(["jobs", "--token=-7Ydt9sihQQ"]).token == "-7Ydt9sihQQ"
