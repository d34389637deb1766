"""How the command line reads its arguments and reports failure.

Bad usage is one line on stderr and exit 2, from argparse (:class:`Parser`) or from a
command (:class:`~jobserver.exceptions.ConfigError`); a request that failed is one
line and exit 1, with a line per further field the API refused. Nothing prints a
traceback: an unexpected error is one line too, and ``--log-level DEBUG`` logs where
it happened.

The global options are taken before the command and after it: the top-level parser
gives them their defaults, and every command's parser (:func:`commands` finds them
all, nested ones and those added later included) takes them again without a default,
so that a value given after the command wins and nothing else is overwritten.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from jobserver.exceptions import ConfigError, JobServerError
from jobserver.logs import FORMATS, default_format

log = logging.getLogger(__name__)

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_INTERRUPT, EXIT_PIPE = 0, 1, 2, 130, 141
#: The ``jobserver`` command's subparsers: a planner adds its commands to them
#: (:meth:`jobserver.planners.base.Planner.add_commands`).
Commands: TypeAlias = "argparse._SubParsersAction[Any]"
#: Gives a client command ``--url`` and ``--token`` (:func:`client_options`).
ClientOptions: TypeAlias = Callable[[argparse.ArgumentParser], None]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
Options = list[tuple[str, dict[str, Any]]]
DEFAULT_NAMESPACE = "default"
CLIENT_OPTIONS: Options = [
    ("--url", {"help": "the API, e.g. http://127.0.0.1:8080 (default: $JOBSERVER_URL, "
                       "else api.bind of the config); client commands only"}),
    ("--token", {"help": "the API token (default: $JOBSERVER_TOKEN, else the config's "
                         "api.tokens or <data_dir>/api-token); client commands only"})]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse makes the commands'
    parsers of the same class)."""

    def error(self, message: str) -> NoReturn:
        if message.endswith("expected one argument"):
            # argparse reads a value starting with '-' as an option (a token such as
            # '-7Yd…'); the '=' form takes any value.
            message += " (a value starting with '-' is written --option=VALUE)"
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see: {self.prog} --help)\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "parsed_by"):  # the innermost command parses first
            parsed.parsed_by = self
        return parsed, extras

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # told as the command's, whose --help lists what it takes
            parsed.parsed_by.error(f"unrecognized arguments: {' '.join(_redacted(extras))}")
        return parsed


def _redacted(words: list[str]) -> list[str]:
    """``words`` with the value of a --token hidden: an error must not echo a secret."""
    shown = []
    for index, word in enumerate(words):
        after_flag = index > 0 and words[index - 1] == "--token"
        shown.append("***" if after_flag else "--token=***" if word.startswith("--token=")
                     else word)
    return shown


def commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command under ``parser``, nested ones too, as ``("batch run", parser)``."""
    seen: set[int] = set()
    for action in parser._actions:  # argparse has no public way to list subparsers
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, command in action.choices.items():
            if id(command) not in seen:  # an alias names the same parser
                seen.add(id(command))
                yield name, command
                yield from ((f"{name} {child}", nested) for child, nested in commands(command))


def global_options(parser: argparse.ArgumentParser) -> None:
    """The top-level options, with their defaults; then each command takes them too."""
    for flag, options in _global_options() + CLIENT_OPTIONS:
        parser.add_argument(flag, **options)
    for _, command in commands(parser):
        group = command.add_argument_group("global options")
        for flag, options in _global_options():
            if flag not in command._option_string_actions:  # a command's own comes first
                group.add_argument(flag, **{**options, "default": argparse.SUPPRESS})


def _global_options() -> Options:
    return [
        ("--config", {"metavar": "FILE", "help": "TOML config file (default: "
                                                 "$JOBSERVER_CONFIG)"}),
        ("--log-level", {"type": str.upper, "choices": LOG_LEVELS, "metavar": "LEVEL",
                         "default": "INFO",
                         "help": "DEBUG, INFO (default), WARNING, ERROR or CRITICAL"}),
        ("--log-format", {"choices": FORMATS, "default": default_format(),
                          "help": "plain (default) or json: one JSON object per line "
                                  "(default: $JOBSERVER_LOG_FORMAT)"})]


def client_options(command: argparse.ArgumentParser) -> None:
    """``--url`` and ``--token`` after a client command (before it, the top-level
    parser takes them), and the mark of a client command."""
    for flag, options in CLIENT_OPTIONS:
        command.add_argument(flag, default=argparse.SUPPRESS, **options)
    command.set_defaults(client_command=True)


def check_client_options(args: argparse.Namespace) -> None:
    """``--url`` or ``--token`` before a command that does not talk to the API is a
    mistake, not something to ignore."""
    given = [flag for flag in ("url", "token") if getattr(args, flag, None) is not None]
    if given and not getattr(args, "client_command", False):
        raise ConfigError(f"--{given[0]} is an option of the client commands, not of "
                          f"'{args.command}'")


def positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above zero."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: "
                                             f"{text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number above 0")
        return value
    return parse


def read_input(path: str) -> bytes:
    """A command's input: the file, or standard input for ``-``."""
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None


def split_name(text: str) -> tuple[str, str]:
    """``"ns/name"`` -> ``("ns", "name")``; ``"name"`` -> ``("default", "name")``."""
    namespace, slash, name = text.rpartition("/")
    if not name or (slash and not namespace) or "/" in namespace:
        raise ConfigError(f"{text!r} is not NAMESPACE/NAME or NAME")
    return (namespace if slash else DEFAULT_NAMESPACE), name


def check_text(path: str) -> None:
    """Refuse a file that cannot be read as UTF-8 text (``-``: not read here)."""
    if path != "-":
        try:
            read_input(path).decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text") from None


def run_reported(command: Callable[[argparse.Namespace], int],
                 args: argparse.Namespace) -> int:
    """``command(args)``, its failures reported in one line and an exit code."""
    try:
        check_client_options(args)
        return command(args)
    except ConfigError as exc:
        print(f"jobserver: {one_line(exc.message)}", file=sys.stderr)
        return EXIT_USAGE
    except JobServerError as exc:
        report(exc)
        return EXIT_API
    except KeyboardInterrupt:
        return EXIT_INTERRUPT
    except BrokenPipeError:  # the reader (head, less) left: say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except Exception as exc:  # a bug: one line here, the traceback at DEBUG
        log.debug("unexpected error", exc_info=True)
        print(f"jobserver: unexpected error: {type(exc).__name__}: {one_line(str(exc))} "
              "(--log-level DEBUG shows where)", file=sys.stderr)
        return EXIT_API


def report(exc: JobServerError) -> None:
    """The message, then each refused field the message does not already name."""
    print(f"jobserver: {one_line(exc.message)}", file=sys.stderr)
    problems = exc.details if isinstance(exc.details, list) else []
    for problem in problems:
        if isinstance(problem, dict) and "field" in problem:
            line = f"{problem['field']}: {problem.get('message', '')}"
            if line not in exc.message:
                print(f"  {one_line(line)}", file=sys.stderr)
    if exc.details is not None:
        log.debug("error details: %s", json.dumps(exc.details, default=str))


def one_line(text: str) -> str:
    return " ".join(str(text).split())
