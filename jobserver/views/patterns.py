"""View patterns: the view partitions a ``materialize``, ``invalidate`` or ``views``
request addresses, in Schedoscope's syntax (its "View Pattern Reference").

``/{package}/{view}(/{parameter value})*``, leading and trailing slash optional. The
view segment is a name or ``e(View1,View2)``; a parameter segment is a plain string
(``SHOP10``); a typed value ``i(5)`` ``l(5)`` ``b(5)`` (digits within Java's int, long,
byte), ``t(true)`` ``t(false)``, ``f(2.1)`` ``d(2.1)``, ``null()``; ``ym(yyyyMM)``,
filling two parameters (year, month), or ``ymd(yyyyMMdd)``, three; a range
``rym(yyyyMM-yyyyMM)`` or ``rymd(yyyyMMdd-yyyyMMdd)`` (one tuple per month or day, ends
included, a reversed range swapped); an enumeration ``e(a,b)`` of any of these, or a
typed one: ``ei el eb et ef ed eym eymd erym erymd``. The result is the cross product
of the views and all segments, the first varying slowest, as in ``ViewUrlParser``.

As in Schedoscope, each slash-separated segment is URL-decoded before it is parsed
(Java's ``URLDecoder``: ``%XX``, and ``+`` is a space), so ``%2F`` puts a slash in a
value while ``%28`` is a syntax ``(``; a backslash quotes ``\\ , ( ) -`` and is an
ordinary character before anything else; blanks inside an ``e(a, b)`` item are kept.
Values keep their type only as text: ``i(007)`` is ``"7"``, ``t(true)`` ``"true"``,
``d(1e3)`` ``"1000.0"`` (Python's shortest form of the double; ``f`` alike),
``null()`` ``None``; dates are zero-padded: ``"2014"``, ``"01"``, ``"12"``.

Where this parser differs from Schedoscope's, on purpose: Schedoscope takes whatever
does not match a typed form as a string, so the typo ``rym(201401)`` silently addresses
a partition named so. Here an unquoted parenthesis is syntax, and an unknown function,
a malformed argument, an impossible date (``ymd(20140230)``, which Java rolls over to
March 2nd), an unbalanced parenthesis, an empty segment (``2015//05``; the empty string
is ``e()``) or a segment ending in a backslash (``\\/`` does not quote a slash) is an
:class:`InvalidRequest` saying where and what. Ranges are listed oldest first
(Schedoscope: newest first) and not clipped at an earliest day; enumerated duplicates
are kept, as there. Package and view names must be identifiers (``app.eci.datamart``,
``SearchExport``). More than ``limit`` partitions (default: the request's
``views.max_partitions``, :mod:`jobserver.views.limits`) are refused before any is
built. A control character (U+0000-U+001F, U+007F-U+009F), typed or %-escaped, is
refused wherever it stands: no value, name or message of the planner carries one (a
NUL cannot even be stored in PostgreSQL's text).
"""

from __future__ import annotations

import codecs
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from itertools import chain, product
from string import hexdigits

from jobserver.exceptions import InvalidRequest
from jobserver.views import limits
from jobserver.views.model import ViewAddress

_WS = " \t\n\x0b\f\r"  # Java's \s, which Schedoscope allows around functions
_CALL = re.compile(rf"[{_WS}]*([A-Za-z]+)[{_WS}]*\(")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_PACKAGE = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*")
_VIEW = re.compile(_IDENTIFIER)
_DIGITS = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")
_MONTH = re.compile(r"([0-9]{4})([0-9]{2})")
_DAY = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})")
_MONTH_RANGE = re.compile(rf"([0-9]{{6}})[{_WS}]*-[{_WS}]*([0-9]{{6}})")
_DAY_RANGE = re.compile(rf"([0-9]{{8}})[{_WS}]*-[{_WS}]*([0-9]{{8}})")
_QUOTABLE = "\\,()-"
#: C0 and C1 control characters and DEL: refused, typed or %-escaped.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_INTEGER_MAX = {"i": 2**31 - 1, "l": 2**63 - 1, "b": 127}
_FORMS = {"i": "i(digits)", "l": "l(digits)", "b": "b(digits)", "t": "t(true) or t(false)",
          "f": "f(decimal)", "d": "d(decimal)", "ym": "ym(yyyyMM)", "ymd": "ymd(yyyyMMdd)",
          "rym": "rym(yyyyMM-yyyyMM)", "rymd": "rymd(yyyyMMdd-yyyyMMdd)"}
_FUNCTIONS = ["null", *_FORMS, "e", *(f"e{name}" for name in _FORMS)]

Values = tuple[str | None, ...]


def parse_pattern(pattern: str, limit: int | None = None) -> list[ViewAddress]:
    """The view partitions ``pattern`` addresses, in the cross product's order.

    Raises :class:`InvalidRequest` (field ``pattern``) naming the character, the
    segment and what was expected, or when more than ``limit`` partitions result
    (default: the request's ``views.max_partitions``, named in the message).
    """
    setting = limit is None
    limit = limits.max_partitions() if limit is None else limit
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    segments = _segments(pattern)
    if len(segments) < 2:
        raise _invalid(segments[0], len(segments[0].text),
                       "missing view: expected /{package}/{view}(/{parameter value})*")
    package = _name(segments[0], 0, len(segments[0].text), _PACKAGE,
                    "a package name such as app.eci.datamart")
    views = _views(segments[1])
    choices = [_parameter(segment) for segment in segments[2:]]
    _check_limit(len(views), segments[2:], choices, limit, setting)
    rows = list(product(*(list(chain.from_iterable(parts)) for parts in choices)))
    return [ViewAddress(package, view, sum(row, ())) for view in views for row in rows]


@dataclass(frozen=True)
class _Segment:
    """A segment as written and URL-decoded; ``origins[i]`` is the offset in the pattern
    of ``text[i]`` (one more for the end), so errors point at what the user typed."""

    raw: str
    text: str
    origins: tuple[int, ...]


def _invalid(segment: _Segment, index: int, what: str) -> InvalidRequest:
    return _invalid_at(segment.raw, segment.origins[index], what)


def _invalid_at(raw: str, offset: int, what: str) -> InvalidRequest:
    shown = raw if len(raw) <= 60 else raw[:57] + "..."
    shown = _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", shown)
    message = f"at character {offset + 1} in segment '{shown}': {what}"
    return InvalidRequest(f"pattern: {message}",
                          [{"field": "pattern", "message": message, "position": offset + 1}])


def _segments(pattern: str) -> list[_Segment]:
    start = 1 if pattern.startswith("/") else 0
    end = len(pattern) - 1 if len(pattern) > start and pattern.endswith("/") else len(pattern)
    segments = []
    while True:
        cut = pattern.find("/", start, end)
        cut = end if cut < 0 else cut
        segments.append(_decode(pattern, start, cut))
        if cut == end:
            return segments
        start = cut + 1


def _decode(pattern: str, start: int, end: int) -> _Segment:
    chars: list[str] = []
    origins: list[int] = []
    raw, i = pattern[start:end], start
    while i < end:
        if pattern[i] == "%":
            i = _decode_escapes(pattern, i, end, raw, chars, origins)
            continue
        chars.append(" " if pattern[i] == "+" else pattern[i])
        origins.append(i)
        i += 1
    text = "".join(chars)
    control = _CONTROL.search(text)
    if control is not None:
        raise _invalid_at(raw, origins[control.start()],
                          f"control character U+{ord(control.group()):04X} "
                          f"(typed or %-escaped): a pattern holds none")
    return _Segment(raw, text, (*origins, end))


def _decode_escapes(pattern: str, i: int, end: int, raw: str, chars: list[str],
                    origins: list[int]) -> int:
    """Decodes the run of ``%XX`` escapes at ``i`` as UTF-8; returns where it ends."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    first = i
    try:
        while i < end and pattern[i] == "%":
            pair = pattern[i + 1:min(i + 3, end)]
            if len(pair) < 2 or not all(c in hexdigits for c in pair):
                raise _invalid_at(raw, i, "expected two hex digits after '%' "
                                          "(a literal '%' is %25)")
            decoded = decoder.decode(bytes([int(pair, 16)]))
            chars.extend(decoded)
            origins.extend([first] * len(decoded))
            first = i + 3 if decoded else first
            i += 3
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise _invalid_at(raw, first, "expected %-escapes that encode UTF-8") from None
    return i


def _name(segment: _Segment, start: int, end: int, form: re.Pattern[str], what: str) -> str:
    text = segment.text[start:end]
    if not form.fullmatch(text):
        raise _invalid(segment, start, f"expected {what}, got '{text}'")
    return text


def _views(segment: _Segment) -> list[str]:
    call = _CALL.match(segment.text)
    if call is None:
        return [_name(segment, 0, len(segment.text), _VIEW, "a view name such as SearchExport")]
    if call.group(1) != "e":
        raise _invalid(segment, call.start(1), "expected a view name or e(View1,View2)")
    parser = _Parser(segment)
    close = parser.close(call.end() - 1, len(segment.text))
    views = []
    for start, end in parser.items(call.end(), close):
        start, end = parser.strip(start, end)
        views.append(_name(segment, start, end, _VIEW, "a view name such as SearchExport"))
    return views


def _parameter(segment: _Segment) -> list[_Part]:
    if not segment.text:
        raise _invalid(segment, 0, "empty segment: expected a parameter value "
                                   "(the empty string is e())")
    return _Parser(segment).value(0, len(segment.text))


def _check_limit(views: int, segments: list[_Segment], choices: list[list[_Part]],
                 limit: int, setting: bool) -> None:
    counts = [sum(len(part) for part in parts) for parts in choices]
    total = math.prod(counts, start=views)
    if total <= limit:
        return
    message = (f"the pattern addresses {total:,} view partitions, more than the limit of "
               f"{limit:,}" + (f" per request ({limits.SETTING})" if setting else "")
               + ": narrow its ranges or enumerations")
    if counts:
        widest = max(range(len(counts)), key=counts.__getitem__)
        message += f" (segment '{segments[widest].raw}' alone gives {counts[widest]:,})"
    raise limits.refusal(message, limit)


class _Range:
    """first..last, both included, whichever order they were written in (Schedoscope
    swaps a reversed range); counted without being built, for the limit."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = min(first, last), max(first, last)

    def __len__(self) -> int:
        return self.last - self.first + 1


class _Months(_Range):
    """Months counted as year * 12 + month - 1, as (year, month)."""

    def __iter__(self) -> Iterator[Values]:
        for n in range(self.first, self.last + 1):
            yield f"{n // 12:04d}", f"{n % 12 + 1:02d}"


class _Days(_Range):
    """Days as proleptic Gregorian ordinals, as (year, month, day)."""

    def __iter__(self) -> Iterator[Values]:
        for n in range(self.first, self.last + 1):
            day = date.fromordinal(n).isoformat()  # yyyy-MM-dd, the fastest way there
            yield day[:4], day[5:7], day[8:]


#: What one value stands for: its parameter tuples, listed, or a range, counted unbuilt.
_Part = list[Values] | _Months | _Days


class _Parser:
    """Parses the parameter values of one decoded segment; positions are indexes into
    ``segment.text``, so that nested enumeration items report where they are."""

    def __init__(self, segment: _Segment) -> None:
        self.segment = segment
        self.text = segment.text

    def scan(self, start: int, end: int) -> Iterator[tuple[int, str, bool]]:
        """(index, character, quoted) of text[start:end], backslash quotes resolved."""
        i = start
        while i < end:
            if self.text[i] == "\\":
                if i + 1 < end and self.text[i + 1] in _QUOTABLE:
                    yield i, self.text[i + 1], True
                    i += 2
                    continue
                if i + 1 == len(self.text):
                    raise _invalid(self.segment, i, "expected a quoted character after "
                                   "'\\' (one of \\,()-); a '/' in a value is %2F")
                yield i, "\\", True
            else:
                yield i, self.text[i], False
            i += 1

    def strip(self, start: int, end: int) -> tuple[int, int]:
        part = self.text[start:end]
        return start + len(part) - len(part.lstrip(_WS)), start + len(part.rstrip(_WS))

    def close(self, opening: int, end: int) -> int:
        """The index of the ``)`` matching the ``(`` at ``opening``; only blanks may
        follow it before ``end``."""
        depth = 0
        for i, c, quoted in self.scan(opening, end):
            depth += 0 if quoted else (c == "(") - (c == ")")
            if depth == 0:
                if self.strip(i + 1, end)[0] < end:
                    raise _invalid(self.segment, i + 1, "expected the end of the value "
                                   "after ')'; a literal '(' or ')' is quoted as \\( \\)")
                return i
        raise _invalid(self.segment, end, f"unbalanced parenthesis: expected ')' to "
                       f"close the '(' at character {self.segment.origins[opening] + 1}")

    def items(self, start: int, end: int) -> list[tuple[int, int]]:
        """The comma-separated items of text[start:end]; commas inside parentheses
        belong to the item."""
        cuts, depth = [start - 1], 0
        for i, c, quoted in self.scan(start, end):
            if not quoted:
                depth += (c == "(") - (c == ")")
                if c == "," and depth == 0:
                    cuts.append(i)
        cuts.append(end)
        return [(cuts[k] + 1, cuts[k + 1]) for k in range(len(cuts) - 1)]

    def value(self, start: int, end: int) -> list[_Part]:
        """The alternatives one parameter value (a segment or an item) stands for."""
        call = _CALL.match(self.text, start, end)
        if call is None:
            return [[(self.string(start, end),)]]
        name, opening = call.group(1), call.end() - 1
        close = self.close(opening, end)
        if name == "e":
            return [part for item in self.items(opening + 1, close)
                    for part in self.value(*item)]
        if name[:1] == "e" and name[1:] in _FORMS:
            return [self.typed(name[1:], *item) for item in self.items(opening + 1, close)]
        if name in _FORMS or name == "null":
            return [self.typed(name, opening + 1, close)]
        raise _invalid(self.segment, call.start(1), f"unknown function '{name}': expected "
                       f"one of {', '.join(_FUNCTIONS)}; a literal '(' is quoted as \\(")

    def string(self, start: int, end: int) -> str:
        chars = []
        for i, c, quoted in self.scan(start, end):
            if not quoted and c in "()":
                raise _invalid(self.segment, i, f"unbalanced parenthesis: a literal '{c}' "
                               f"is quoted as \\{c}; a function is name(…), e.g. ym(201405)")
            chars.append(c)
        return "".join(chars)

    def typed(self, name: str, start: int, end: int) -> _Part:
        """``name(text[start:end])`` for a function other than ``e``."""
        start, end = self.strip(start, end)
        argument = self.text[start:end]
        if name == "null":
            if argument:
                raise _invalid(self.segment, start, "expected null() with nothing inside")
            return [(None,)]
        if name == "t" and argument in ("true", "false"):
            return [(argument,)]
        if name in _INTEGER_MAX and _DIGITS.fullmatch(argument):
            return self.integer(name, start, argument)
        if name in ("f", "d") and _DECIMAL.fullmatch(argument):
            if math.isinf(float(argument)):
                raise _invalid(self.segment, start, f"expected a finite {_FORMS[name]}")
            return [(repr(float(argument)),)]
        if name in ("ym", "ymd", "rym", "rymd"):
            return self.dates(name, start, argument)
        raise _invalid(self.segment, start, f"expected {_FORMS[name]}, got '{argument}'")

    def integer(self, name: str, start: int, digits: str) -> _Part:
        if len(digits.lstrip("0")) > 19 or int(digits) > _INTEGER_MAX[name]:
            raise _invalid(self.segment, start,
                           f"expected {_FORMS[name]} of at most {_INTEGER_MAX[name]}")
        return [(str(int(digits)),)]

    def dates(self, name: str, start: int, argument: str) -> _Part:
        form = {"ym": _MONTH, "ymd": _DAY, "rym": _MONTH_RANGE, "rymd": _DAY_RANGE}[name]
        match = form.fullmatch(argument)
        if match is None:
            raise _invalid(self.segment, start, f"expected {_FORMS[name]}, got '{argument}'")
        if name == "ym":
            self.month(start, argument)
            return [match.groups()]
        if name == "ymd":
            self.day(start, argument)
            return [match.groups()]
        ends = [(start + match.start(g), match.group(g)) for g in (1, 2)]
        if name == "rym":
            return _Months(*(self.month(at, text) for at, text in ends))
        return _Days(*(self.day(at, text).toordinal() for at, text in ends))

    def month(self, at: int, text: str) -> int:
        """year * 12 + month - 1 of a checked yyyyMM."""
        if not "01" <= text[4:] <= "12":
            raise _invalid(self.segment, at + 4, f"expected a month 01-12, got '{text[4:]}'")
        return int(text[:4]) * 12 + int(text[4:]) - 1

    def day(self, at: int, text: str) -> date:
        try:
            return date(int(text[:4]), int(text[4:6]), int(text[6:]))
        except ValueError as exc:
            raise _invalid(self.segment, at, f"expected a date yyyyMMdd, got '{text}' "
                           f"({exc})") from None
