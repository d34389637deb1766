"""Comments in the script of ``sh -c`` / ``bash -c``, for change detection.

A transformation's version checksum ignores comments (:mod:`jobserver.views.checksums`).
In shell text a comment is what the shell reads as one: an unquoted ``#`` at the start
of a word, to the end of the line. :func:`strip_comments` drops exactly those, by
reading the text as the shell's lexer does: quotes (``'…'``, ``"…"``, ``$'…'``), a
backslash, ``$#`` and every ``${…}`` (``${#x}``, ``${x#p}``), ``$(…)`` (with the
``case`` patterns it may hold), ``$((…))`` (``16#ff``), backquotes, extglob groups
(``@(…)``) and here-documents, none of whose ``#`` is a comment.

The invariant: a ``#`` the shell does not read as a comment is never dropped. So the
reading is conservative, and a ``#`` is taken as a comment only after a blank, a
newline, ``;``, ``&`` or ``|`` (or at the very start); one right after ``(`` or ``)``,
which the shell would also read as a comment, is kept. Text the reader cannot follow
to its end with every quote, substitution and here-document closed is kept whole,
comments and all: an unsure reading could only mistake text for a comment.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The shells whose ``-c`` script is read here: the POSIX shell family's lexing.
SHELLS = frozenset({"sh", "bash", "dash"})
#: Options of those shells that take the next argument as their value.
_OPTION_ARGUMENT = frozenset("oO")
_LONG_WITH_ARGUMENT = frozenset({"--rcfile", "--init-file"})
_BLANK = " \t"
#: After these the next character starts a word (where ``#`` begins a comment).
_WORD_BREAK = _BLANK + "\n;&|"
#: Characters that end a word without being part of it.
_OPERATOR = ";&|()<>"
#: Reserved words after which a command, so a ``case`` or ``esac``, may follow.
_LEADING = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{",
                      "in", "time"})
_EXTGLOB = "@!+*?"


def script_index(argv: Sequence[str]) -> int | None:
    """Where the script is in ``argv`` when it runs a POSIX shell with ``-c``
    (``sh -c``, ``bash -euo pipefail -c``, ``/bin/sh -c``): the first operand after
    the options; None when ``argv`` is not such a command."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    command, index = False, 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            index += 1
            break
        if arg in _LONG_WITH_ARGUMENT:
            index += 2
            continue
        if arg.startswith("--") or (len(arg) > 1 and arg[0] in "-+"):
            letters = arg[1:] if not arg.startswith("--") else ""
            command = command or (arg[0] == "-" and "c" in letters)
            index += 1 + sum(1 for letter in letters if letter in _OPTION_ARGUMENT)
            continue
        break
    return index if command and index < len(argv) else None


def strip_comments(text: str, bash: bool = False) -> str:
    """``text`` without its comments (each ``#`` to the end of its line; the newline
    stays); ``text`` itself when it cannot be read to its end for sure, or (``bash``
    False: ``sh`` may be dash) where dash and bash would read it differently."""
    try:
        cuts = _Reader(text, bash).read()
    except _Unsure:
        return text
    kept, at = [], 0
    for start, end in cuts:
        kept.append(text[at:start])
        at = end
    return "".join(kept) + text[at:]


class _Unsure(Exception):
    """The text holds something the reader does not follow to its end."""


class _Reader:
    """One pass over the text; each method takes the index after an opening and
    returns the index after its closing, or raises :class:`_Unsure`."""

    def __init__(self, text: str, bash: bool) -> None:
        self.text, self.bash = text, bash
        self.cuts: list[tuple[int, int]] = []

    def read(self) -> list[tuple[int, int]]:
        if self.command(0, nested=False) != len(self.text):
            raise _Unsure()
        return self.cuts

    def command(self, i: int, nested: bool) -> int:
        """Commands up to the end (or, ``nested``, the ``)`` of a ``$(``)."""
        words = _Words(at_start=not nested)
        text, pending = self.text, list[tuple[str, bool]]()
        while i < len(text):
            c = text[i]
            if c == "#" and words.starting:
                i = self.comment(i)
            elif c == "\n":
                words.end(text, i, command_next=True)
                i = self.bodies(i + 1, pending)
                pending.clear()
            elif c in _WORD_BREAK:
                words.end(text, i, command_next=c not in _BLANK)
                i += 1
            elif c == ")":
                if words.close(text, i) and nested:
                    return i + 1
                i += 1
            elif c in _OPERATOR:
                arithmetic = text.startswith("((", i) and words.starting and words.command
                words.end(text, i, command_next=c == "(")
                i = self.arithmetic(i + 2) if arithmetic else self.operator(i, words, pending)
            else:
                words.begin(i)
                i = self.word_char(i, in_quotes=False)
        if nested:
            raise _Unsure()
        words.end(text, i, command_next=False)
        return i

    def comment(self, i: int) -> int:
        """A comment from ``i`` to the end of its line, which stays."""
        end = self.text.find("\n", i)
        end = len(self.text) if end < 0 else end
        self.cuts.append((i, end))
        return end

    def operator(self, i: int, words: _Words, pending: list[tuple[str, bool]]) -> int:
        """``( < >``: a subshell's (or a list's, or a pattern's) ``(``, an extglob
        group ``@(…)``, a here-document or here-string, a redirection. (A ``((…))``
        command is arithmetic, read as ``$((…))``: no comment in it.)"""
        text = self.text
        if text[i] == "(" and i and text[i - 1] in _EXTGLOB:
            return self.group(i + 1)
        if text[i] == "(":
            words.parens += 1
            return i + 1
        if text.startswith("<<<", i):  # bash's here-string (dash: a syntax error)
            if not self.bash:
                raise _Unsure()
            return i + 3
        if text.startswith("<<", i):
            return self.heredoc(i + 2, pending)
        return i + 1

    def word_char(self, i: int, in_quotes: bool) -> int:
        """One character or quoted part of a word."""
        c = self.text[i]
        if c == "\\":
            return i + 2
        if c == "'" and not in_quotes:
            return self.until(i + 1, "'")
        if c == '"' and not in_quotes:
            return self.double(i + 1)
        if c == "`":
            return self.until(i + 1, "`", escapes=True)
        if c == "$":
            return self.dollar(i + 1, in_quotes)
        return i + 1

    def ansi(self, i: int) -> int:
        """``$'…'``: bash ends it at the first unescaped quote, a shell without it (dash)
        at the first quote; the two differ only after ``\\'``."""
        end = self.until(i, "'", escapes=True)
        if "'" in self.text[i:end - 1]:
            raise _Unsure()
        return end

    def until(self, i: int, closer: str, escapes: bool = False) -> int:
        """``'…'``, ``$'…'`` (escapes) or a backquoted command (escapes)."""
        while i < len(self.text):
            if escapes and self.text[i] == "\\":
                i += 2
            elif self.text[i] == closer:
                return i + 1
            else:
                i += 1
        raise _Unsure()

    def double(self, i: int) -> int:
        while i < len(self.text):
            if self.text[i] == '"':
                return i + 1
            i = self.word_char(i, in_quotes=True)
        raise _Unsure()

    def dollar(self, i: int, in_quotes: bool) -> int:
        """After a ``$``: ``${…}``, ``$((…))``, ``$(…)``, ``$'…'``, ``$"…"``, or a plain
        ``$`` (``$#`` included: its ``#`` is no word's start)."""
        text = self.text
        if text.startswith("{", i):
            return self.parameter(i + 1, in_quotes)
        if text.startswith("((", i):
            return self.arithmetic(i + 2)
        if text.startswith("(", i):
            return self.command(i + 1, nested=True)
        if text.startswith("'", i) and not in_quotes:
            return self.ansi(i + 1)
        if text.startswith('"', i) and not in_quotes:
            return self.double(i + 1)
        return i

    def parameter(self, i: int, in_quotes: bool) -> int:
        """``${…}`` to its first unquoted ``}`` (the shells do not count inner braces).
        Quotes inside it pair up; inside double quotes, bash pairs them and dash does
        not, so there they are not followed."""
        while i < len(self.text):
            if self.text[i] == "}":
                return i + 1
            if in_quotes and self.text[i] in "'\"":
                raise _Unsure()
            i = (self.dollar(i + 1, in_quotes) if self.text[i] == "$"
                 else self.word_char(i, in_quotes=False))
        raise _Unsure()

    def arithmetic(self, i: int) -> int:
        depth = 0
        while i < len(self.text):
            c = self.text[i]
            if c == "(":
                depth, i = depth + 1, i + 1
            elif c == ")" and depth:
                depth, i = depth - 1, i + 1
            elif c == ")":
                if not self.text.startswith("))", i):
                    raise _Unsure()
                return i + 2
            else:
                i = self.word_char(i, in_quotes=False)
        raise _Unsure()

    def group(self, i: int) -> int:
        """An extglob group ``@(…)``: a pattern, no comment in it."""
        depth = 0
        while i < len(self.text):
            c = self.text[i]
            if c == ")" and not depth:
                return i + 1
            depth += {"(": 1, ")": -1}.get(c, 0)
            i = self.word_char(i, in_quotes=False)
        raise _Unsure()

    def heredoc(self, i: int, pending: list[tuple[str, bool]]) -> int:
        """``<<WORD`` or ``<<-WORD``: its body is read at the end of the line."""
        text = self.text
        tabs = text.startswith("-", i)
        i += tabs
        while i < len(text) and text[i] in _BLANK:
            i += 1
        start = i
        while i < len(text) and text[i] not in _BLANK + "\n" + _OPERATOR:
            i = self.word_char(i, in_quotes=False)
        word = "".join(c for c in text[start:i] if c not in "'\"\\")
        if not word or "$" in word or "`" in word:
            raise _Unsure()
        pending.append((word, tabs))
        return i

    def bodies(self, i: int, pending: list[tuple[str, bool]]) -> int:
        """The here-documents' lines, kept as they are, up to each one's delimiter."""
        for word, tabs in pending:
            while True:
                if i >= len(self.text):
                    raise _Unsure()
                end = self.text.find("\n", i)
                end = len(self.text) if end < 0 else end
                line = self.text[i:end]
                i = end + 1
                if (line.lstrip("\t") if tabs else line) == word:
                    break
        return min(i, len(self.text))


class _Words:
    """Where words begin and end in one command context: whether the next character
    starts a word, and the ``case``/``esac`` nesting (a ``)`` ending a case pattern
    does not close the ``$(`` around it)."""

    def __init__(self, at_start: bool) -> None:
        self.starting = at_start
        self.command = True
        self.begun: int | None = None
        self.cases = 0
        self.parens = 0

    def begin(self, i: int) -> None:
        if self.begun is None:
            self.begun = i
        self.starting = False

    def end(self, text: str, i: int, command_next: bool) -> None:
        """The word begun, if any, ends at ``i`` (before ``text[i]``)."""
        word = text[self.begun:i] if self.begun is not None else ""
        if word and self.command:
            self.cases += {"case": 1, "esac": -1 if self.cases else 0}.get(word, 0)
        if word:
            self.command = word in _LEADING
        if command_next:
            self.command = True
        self.begun = None
        self.starting = text[i:i + 1] in tuple(_WORD_BREAK)

    def close(self, text: str, i: int) -> bool:
        """A ``)`` at ``i``: whether it closes the ``$(`` around (not a subshell's or
        a group's ``(``, not the end of a ``case`` pattern)."""
        self.end(text, i, command_next=True)
        if self.parens:
            self.parens -= 1
            return False
        return not self.cases
