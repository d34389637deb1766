"""The step of the consumer chaos test's jobs, run as a shell step's process::

    python consumer_step.py <ledger> <consumer> <poison modulus> <fail rate> <seconds>

It reads the partitions its run was handed (``JOBSERVER_INPUT_RAW``), appends one
``take`` line per partition to the ledger, works for ``seconds``, then appends one
``ok`` line per partition and exits 0, or one ``fail`` line per partition and exits
1: always when a partition's ``n`` is a multiple of the poison modulus (0: none),
otherwise with probability ``fail rate``. A line is::

    <consumer> <partition id> <n> <job id> <job attempt> <fence> <node> <phase> <time>

Each phase's lines go out in one ``write`` to a file opened with ``O_APPEND``, so the
lines of concurrent runs never interleave. Standard library only: it starts fast.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

INPUT_VAR = "JOBSERVER_INPUT_RAW"


def lines(consumer: str, handed: list[dict], phase: str) -> str:
    """The ledger lines of one phase of this run, one per partition."""
    env = os.environ
    run = (f"{env['JOBSERVER_JOB_ID']} {env['JOBSERVER_JOB_ATTEMPT']} "
           f"{env['JOBSERVER_FENCE']} {env['JOBSERVER_NODE']}")
    now = f"{time.time():.6f}"
    return "".join(f"{consumer} {p['id']} {p['key']['n']} {run} {phase} {now}\n"
                   for p in handed)


def append(ledger: str, text: str) -> None:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    ledger, consumer, poison, fail_rate, seconds = argv
    with open(os.environ[INPUT_VAR], encoding="utf-8") as handle:
        handed = json.load(handle)["partitions"]
    append(ledger, lines(consumer, handed, "take"))
    time.sleep(float(seconds))
    modulus = int(poison)
    failing = (any(modulus and p["key"]["n"] % modulus == 0 for p in handed)
               or random.random() < float(fail_rate))
    append(ledger, lines(consumer, handed, "fail" if failing else "ok"))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
