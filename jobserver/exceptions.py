"""Every error jobserver raises on purpose derives from :class:`JobServerError`.

Each class carries a stable ``code`` string, so a caller can tell a bad request from a
conflict without parsing messages. What an error means on the wire is the caller's
business: the HTTP API maps classes to status codes in one table
(:data:`jobserver.api.HTTP_STATUS`), the command line to exit codes.

Errors of the database driver never leave the store: :mod:`jobserver.store` turns them
into :class:`StoreError` (a bug: surface it) or :class:`StoreUnavailable` (an outage:
worth a retry). :data:`TRANSIENT` is what a background loop retries per round.
"""

from __future__ import annotations

from typing import Any


class JobServerError(Exception):
    """Base class of all jobserver errors."""

    code = "internal_error"

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class ConfigError(JobServerError):
    """The configuration is invalid; the message names the key."""

    code = "config_error"


class InvalidRequest(JobServerError):
    """A request or job spec failed validation; ``details`` lists the fields."""

    code = "invalid_request"


class MalformedRequest(InvalidRequest):
    """The body could not be parsed at all (not JSON)."""

    code = "malformed_request"


class NotFound(JobServerError):
    code = "not_found"


class Conflict(JobServerError):
    """The request is well formed but clashes with the current state."""

    code = "conflict"


class IllegalTransition(Conflict):
    """A state change that Kylin's job state machine does not allow."""

    code = "illegal_transition"

    def __init__(self, current: str, target: str, what: str = "job") -> None:
        super().__init__(
            f"{what} is {current}; it cannot go to {target}",
            {"current_state": current, "target_state": target},
        )
        self.current = current
        self.target = target


class AuthError(JobServerError):
    code = "unauthorized"


class Forbidden(JobServerError):
    """A valid token without the scope the request needs; ``details`` name the scope."""

    code = "forbidden"


class RateLimited(JobServerError):
    """Too many requests for this token; retry after ``retry_after`` seconds."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: int, details: Any = None) -> None:
        super().__init__(message, details)
        self.retry_after = retry_after


class FencedOff(JobServerError):
    """A write was refused because this node no longer owns the job.

    Raised when the compare-and-set on the job's claim token (node, fence, attempt)
    updates no row: another node claimed the job with a newer lease, or an operator
    changed it. The runner must stop the job at once.
    """

    code = "fenced_off"


class LockError(JobServerError):
    """A lock backend failed or a lease was used after it was lost."""

    code = "lock_error"


class RetryableListenerError(JobServerError):
    """Raised by a scheduling listener that wants to be restarted and to receive again
    the last event of each job it has seen (Schedoscope's ``RetryableSchedulingListenerException``).
    Any other exception restarts the listener and drops the event."""

    code = "listener_retry"


class TriggerError(JobServerError):
    """A schedule's trigger cannot be evaluated: its fire times stopped advancing
    (each must be later than the one before: a bug in the computation or the time
    zone data), or a partition trigger's filter names a field its dataset's key does
    not declare (the dataset was declared or changed after the schedule)."""

    code = "trigger_error"


class StepFailed(JobServerError):
    """A step body reports failure; ``retryable`` says whether a retry may help."""

    code = "step_failed"

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class UnknownConnection(InvalidRequest):
    """A step or a watermark source names a connection that ``connections.<name>`` in
    the config does not define."""

    code = "unknown_connection"


class MissingParameter(InvalidRequest):
    """A SQL text names a parameter (``:name``) that nobody supplies."""

    code = "missing_parameter"


class WatermarkError(Conflict):
    """A source's watermark cannot be read now: its file is missing or holds no date,
    its query returned no row or something other than a date. The source, not the
    request, is at fault, so the request may succeed once the source is mended."""

    code = "watermark_unreadable"


class StoreError(JobServerError):
    """The store failed to run a statement for a reason a retry will not mend: a bug
    (a statement the database refuses, a schema that is not there) rather than an
    outage. The driver's error is the ``__cause__``; the message is the driver's."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The store cannot answer now but may in a moment: the connection was refused or
    lost, the server is restarting or shutting down, an administrator ended the
    session, SQLite's lock stayed busy, a transaction lost a serialization race.
    Callers that must not lose a write retry it; background loops retry their round."""

    code = "store_unavailable"


class ConstraintViolation(StoreError):
    """A write broke a unique, foreign-key or check constraint. Repositories catch it
    where a race is expected (two first inserts of one key); elsewhere it is a bug."""

    code = "constraint_violation"


class LoopDied(JobServerError):
    """A background loop that another depends on ended with an unexpected error (the
    ``__cause__``); raised by the dependent one, which ends too."""

    code = "loop_died"


#: What a background loop expects and retries on its next round: an outage of the
#: store or of the lock service. Anything else ends the loop (see ``jobserver.loops``).
TRANSIENT: tuple[type[JobServerError], ...] = (StoreUnavailable, LockError)
