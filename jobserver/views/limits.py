"""How much one request may expand: ``views.max_partitions``.

Every way into the views planner — the ``views`` query, ``materialize`` (the API's two
forms and the dashboard's), ``invalidate`` — turns a pattern into partitions with
:func:`jobserver.views.patterns.parse_pattern` and their dependencies with
:func:`jobserver.views.lattice.instantiate`. Both read the limit here, so that it lives
in one place:

* the partitions a pattern addresses are counted before any is built;
* instantiation counts every distinct partition (addressed or a dependency, at any
  depth) as it makes it and stops at the limit, and counts the dependency links it
  walks (each mapping's fan-out before it is built) against
  :data:`LINKS_PER_PARTITION` times the limit.

So a request's memory is bounded by the limit, whatever its pattern or the views'
mappings, and the refusal (a 422 naming ``pattern`` and the setting) comes before the
memory is spent. The limit is the application's ``views.max_partitions``, bound to each
request (:func:`bound`); code outside a request (the CLI's own planning, tests) gets
:data:`DEFAULT_MAX_PARTITIONS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from jobserver.exceptions import InvalidRequest
from jobserver.views.model import ViewAddress

#: The default of ``views.max_partitions``: a year of ten shops' monthly exports with
#: all they read (the shipped examples) is 11,192 partitions and 36,860 links; the
#: issue's century of them, 1.1 million, is refused.
DEFAULT_MAX_PARTITIONS = 100_000
SETTING = "views.max_partitions"
#: Dependency links a request may walk per partition of its limit.
LINKS_PER_PARTITION = 32

_limit: ContextVar[int] = ContextVar("views_max_partitions", default=DEFAULT_MAX_PARTITIONS)


def max_partitions() -> int:
    """The limit of the request being handled."""
    return _limit.get()


@contextmanager
def bound(limit: int) -> Iterator[None]:
    """``limit`` as the limit of everything planned inside the block."""
    if limit < 1:
        raise ValueError(f"views.max_partitions must be at least 1, not {limit}")
    token = _limit.set(limit)
    try:
        yield
    finally:
        _limit.reset(token)


def refusal(message: str, limit: int) -> InvalidRequest:
    """The 422 of a request over a limit: ``pattern`` and the limit, for the user."""
    return InvalidRequest(f"pattern: {message}",
                          [{"field": "pattern", "message": message, "limit": limit}])


class Budget:
    """What one instantiation may still make; it raises before it is overdrawn."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = max_partitions() if limit is None else limit
        self.links_limit = self.limit * LINKS_PER_PARTITION
        self.partitions = 0
        self.links = 0

    def partition(self) -> None:
        """One more distinct partition, addressed or a dependency."""
        self.partitions += 1
        if self.partitions > self.limit:
            raise refusal(
                f"the pattern addresses more than {self.limit:,} view partitions with "
                f"their dependencies; at most {self.limit:,} per request ({SETTING}): "
                "narrow its ranges or enumerations", self.limit)

    def fan_out(self, links: int, reader: ViewAddress) -> None:
        """``links`` more dependency links of ``reader``, counted before they are made."""
        self.links += links
        if self.links > self.links_limit:
            raise refusal(
                f"the pattern's partitions read more than {self.links_limit:,} "
                f"dependency partitions in all (reached at {reader.path}); at most "
                f"{LINKS_PER_PARTITION} × {SETTING} ({self.limit:,}) per request: narrow "
                "its ranges or enumerations", self.limit)
