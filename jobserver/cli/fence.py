"""``jobserver fence-check``: may this step still act on the world?

Run inside a step before an effect outside the job server: it asks the API whether
the step's job is still RUNNING under the claim the step was started with (its
``JOBSERVER_JOB_ID``, ``JOBSERVER_FENCE`` and ``JOBSERVER_JOB_ATTEMPT``). Exit 0: the
claim is current; 1: it is stale (the job was taken over, rescued, stopped or has
ended); 2: no answer (bad arguments, no such job, the API unreachable or refusing
the token). Anything but 0 means "do not act". The answer holds at the instant of
the read only; see docs/jobs.md, "Guarding outside effects".
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobserver.exceptions import JobServerError

if TYPE_CHECKING:
    from jobserver.client import Client

EXIT_CURRENT, EXIT_STALE, EXIT_UNKNOWN = 0, 1, 2
MAX_ID = 2**63 - 1
#: Where each value comes from inside a step (``jobserver.steps.shell.build_env``).
ENV = {"job": "JOBSERVER_JOB_ID", "fence": "JOBSERVER_FENCE", "attempt": "JOBSERVER_JOB_ATTEMPT"}


class BadArguments(Exception):
    """What is wrong with the options or the step's variables, in one line."""


@dataclass(frozen=True)
class Claim:
    job: int
    fence: int
    attempt: int | None


def add_parser(sub: Any, client_options: Callable[[argparse.ArgumentParser], None]) -> None:
    check = sub.add_parser(
        "fence-check", help="exit 0 if a job's claim is still current, 1 if stale, 2 if "
                            "unknown; by default the claim of the step it runs in")
    check.add_argument("--job", help=f"job id (default: ${ENV['job']}; give --fence with it)")
    check.add_argument("--fence", help=f"fence (default: ${ENV['fence']})")
    check.add_argument("--attempt", help=f"the job's attempt (default: ${ENV['attempt']} "
                                         "when --job is not given)")
    check.add_argument("-q", "--quiet", action="store_true", help="print nothing on 0 and 1")
    client_options(check)


def claim_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Claim:
    """The claim to check: ``--job`` with ``--fence`` (and ``--attempt``), or else the
    step's variables. Mixing the two would check one job under another's fence."""
    if args.job is not None or args.fence is not None or args.attempt is not None:
        if args.job is None or args.fence is None:
            raise BadArguments("give --job and --fence together (or neither, inside a step)")
        return Claim(_number(args.job, "--job", 1), _number(args.fence, "--fence", 0),
                     None if args.attempt is None else _number(args.attempt, "--attempt", 0))
    missing = [ENV[key] for key in ("job", "fence") if not environ.get(ENV[key])]
    if missing:
        raise BadArguments(f"{' and '.join(missing)} not set: run it inside a step, or give "
                           "--job and --fence")
    attempt = environ.get(ENV["attempt"])
    return Claim(_number(environ[ENV["job"]], ENV["job"], 1),
                 _number(environ[ENV["fence"]], ENV["fence"], 0),
                 None if not attempt else _number(attempt, ENV["attempt"], 0))


def _number(text: str, name: str, least: int) -> int:
    if not text.isascii() or not text.isdigit() or not least <= int(text) <= MAX_ID:
        raise BadArguments(f"{name}: {text!r} is not an integer of at least {least}")
    return int(text)


def run(args: argparse.Namespace, client: Callable[[], Client],
        environ: Mapping[str, str] = os.environ) -> int:
    """Check and report in one line; the exit code says current (0), stale (1) or
    unknown (2)."""
    try:
        api = client()  # first: a bad --url or token is the usage error to report
        claim = claim_from(args, environ)
        answer = api.fence(claim.job, claim.fence, claim.attempt)
    except BadArguments as exc:
        return _unknown(str(exc))
    except JobServerError as exc:  # the API's refusal or an unreachable server
        return _unknown(exc.message)
    except OSError as exc:  # an unreadable token file
        return _unknown(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
    if not args.quiet:
        print(describe(answer))
    return EXIT_CURRENT if answer.get("current") is True else EXIT_STALE


def describe(answer: dict[str, Any]) -> str:
    """``job 5: current (RUNNING under fence 3, attempt 2, on node-1)``, or why stale."""
    held = answer["claim"]
    where = f"fence {held['fence']}, attempt {held['attempt']}" + (
        f", on {held['node']}" if held["node"] else "")
    if answer["current"]:
        return f"job {answer['job']}: current ({answer['state']} under {where})"
    asked = f"fence {answer['fence']}" + (
        f", attempt {answer['attempt']}" if answer["attempt"] is not None else "")
    return f"job {answer['job']}: stale ({asked} asked; the job is {answer['state']} " \
           f"under {where})"


def _unknown(message: str) -> int:
    print(f"jobserver fence-check: {message}", file=sys.stderr)
    return EXIT_UNKNOWN
