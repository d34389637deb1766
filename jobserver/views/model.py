"""The views' vocabulary (Schedoscope's): addresses, states, modes and decisions.

Every module of :mod:`jobserver.views` speaks in these terms, so that the pure parts
(the pattern parser, the lattice, the planner) and the stored parts (the repository,
the materializer, the tracker of view jobs) meet in one place:

* a :class:`ViewAddress` names one view partition (``package/View/v1/v2/…``);
* a :class:`StoredPartition` is what the store knows of one (its state, the version
  checksum and timestamp of its last transformation, the job transforming it);
* a :class:`Decision` is what one ``materialize`` request does with one, and why.

Timestamps are the store's clock (UTC, aware), never a node's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple


@dataclass(frozen=True, order=True, slots=True)
class ViewAddress:
    """One view partition: the view ``package/view`` and its parameter values in the
    view's declared order, as strings (``None`` for Schedoscope's ``null()``).

    ``name`` is the view's name, ``app.eci.datamart/SearchExport``; ``key`` the values
    as one stored text, ``SHOP10/2015/05``: ``null()`` is written ``null()``, the empty
    string ``e()``, and the pattern syntax's special characters are quoted, so that
    ``name + "/" + key`` parses back to this address
    (:func:`jobserver.views.patterns.parse_pattern`)."""

    package: str
    view: str
    values: tuple[str | None, ...] = ()
    # Made with the address: every address of a request needs both (its row's key in
    # the store, its path in the reply), 100,000 of them for a large lattice.
    name: str = field(init=False, repr=False, compare=False)
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.package}/{self.view}")
        object.__setattr__(self, "key", "/".join(map(_quote, self.values)))

    @property
    def path(self) -> str:
        """``package/View/values…``: the address as a pattern that addresses it alone."""
        return f"{self.name}/{self.key}" if self.values else self.name

    def __str__(self) -> str:
        return self.path


def _quote(value: str | None) -> str:
    # What parse_pattern reads back as ``value``: null() for None, e() for the empty
    # string, a backslash before \\ ( ), and %, / and + percent-encoded (each segment
    # is URL-decoded before it is parsed, so a backslash cannot quote a slash).
    if value is None:
        return "null()"
    if value == "":
        return "e()"
    if value.isalnum():  # the common case (dates, ids): nothing to quote
        return value
    quoted = "".join("\\" + c if c in "\\()" else c for c in value)
    return quoted.replace("%", "%25").replace("/", "%2F").replace("+", "%2B")


class ViewState(enum.Enum):
    """Schedoscope's scheduling states of a view partition."""

    RECEIVE = "receive"            # instantiated, or invalidated: the next request transforms
    WAITING = "waiting"            # its job waits for its dependencies' jobs
    TRANSFORMING = "transforming"  # its job runs
    MATERIALIZED = "materialized"  # transformed; checksum and timestamp recorded
    RETRYING = "retrying"          # its job failed; a new one is submitted (views.retries)
    FAILED = "failed"              # failed after its retries; dependents still materialize
    NO_DATA = "no-data"            # noop without data, or every dependency no-data

    @property
    def in_flight(self) -> bool:
        """Whether a job of this partition is submitted and not yet ended: a second
        request joins it instead of transforming the partition twice."""
        return self in (ViewState.WAITING, ViewState.TRANSFORMING, ViewState.RETRYING)


class Mode(enum.Enum):
    """Schedoscope's materialization modes."""

    DEFAULT = "DEFAULT"
    RESET_TRANSFORMATION_CHECKSUMS = "RESET_TRANSFORMATION_CHECKSUMS"
    RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS = "RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS"
    TRANSFORM_ONLY = "TRANSFORM_ONLY"
    SET_ONLY = "SET_ONLY"


class StoredPartition(NamedTuple):
    """What the store holds of one view partition. ``version_checksum`` and
    ``transformed_at`` are those of the transformation that last *ran* (None: never);
    ``job_id`` the job of an in-flight state; ``row_version`` guards every write
    (compare-and-set).

    A named tuple, as :class:`Decision`: a request makes one per partition, and a
    tuple is made in a third of a frozen dataclass's time."""

    state: ViewState
    version_checksum: str | None
    transformed_at: datetime | None
    job_id: int | None
    retries: int
    row_version: int


class Action(enum.Enum):
    """What a request does with one view partition."""

    TRANSFORM = "transform"  # submit a job running its transformation
    JOIN = "join"            # a job already transforms it: depend on that one
    SKIP = "skip"            # up to date: nothing to do
    SET = "set"              # write the state (materialized, checksum, timestamp), run nothing
    NO_DATA = "no-data"      # no data: the state becomes no-data, nothing runs


class Decision(NamedTuple):
    """The planner's answer for one view partition of a request.

    ``reason`` is for people ("dependency app.eci.stage/Search/SHOP10/2015/05/03 newer
    (2015-05-04T01:00:00Z) than own (2015-05-03T01:00:00Z)"). ``upstream`` are the
    dependencies whose jobs this one's job must wait for (TRANSFORM only: those decided
    TRANSFORM or JOIN in the same plan). For SET, ``version_checksum`` and
    ``transformed_at`` are the values to store; for TRANSFORM, ``version_checksum`` is
    the checksum of the version the job runs, recorded when it succeeds.
    """

    address: ViewAddress
    action: Action
    reason: str
    upstream: tuple[ViewAddress, ...] = ()
    version_checksum: str | None = None
    transformed_at: datetime | None = None
