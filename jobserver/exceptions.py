"""Every error jobserver raises on purpose derives from :class:`JobServerError`.

The HTTP layer maps each class to a status code and a stable ``code`` string, so a
caller can tell a bad request from a conflict without parsing messages.
"""

from __future__ import annotations

from typing import Any


class JobServerError(Exception):
    """Base class of all jobserver errors."""

    code = "internal_error"
    http_status = 500

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
    http_status = 422


class MalformedRequest(InvalidRequest):
    """The body could not be parsed at all (not JSON)."""

    code = "malformed_request"
    http_status = 400


class NotFound(JobServerError):
    code = "not_found"
    http_status = 404


class Conflict(JobServerError):
    """The request is well formed but clashes with the current state."""

    code = "conflict"
    http_status = 409


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
    http_status = 401


class Forbidden(JobServerError):
    """A valid token without the scope the request needs; ``details`` name the scope."""

    code = "forbidden"
    http_status = 403


class RateLimited(JobServerError):
    """Too many requests for this token; retry after ``retry_after`` seconds."""

    code = "rate_limited"
    http_status = 429

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
    http_status = 409


class LockError(JobServerError):
    """A lock backend failed or a lease was used after it was lost."""

    code = "lock_error"
    http_status = 503


class RetryableListenerError(JobServerError):
    """Raised by a scheduling listener that wants to be restarted and to receive again
    the last event of each job it has seen (Schedoscope's ``RetryableSchedulingListenerException``).
    Any other exception restarts the listener and drops the event."""

    code = "listener_retry"


class StepFailed(JobServerError):
    """A step body reports failure; ``retryable`` says whether a retry may help."""

    code = "step_failed"

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable
