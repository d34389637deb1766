"""Schedules (CDAP's): a trigger, run constraints and a job template that the server
itself turns into jobs.

A schedule's trigger fires on a clock (``time``), on other runs ending
(``job_status``), on new partitions of a dataset (``partition``) or on ``and``/``or``
of those. A firing creates a *schedule-job* that goes PENDING_TRIGGER →
PENDING_CONSTRAINTS → PENDING_LAUNCH → LAUNCHED (or ABORTED, with a reason); the
launch is the engine's idempotent submit, so a launch retried after a crash makes
one job. One node evaluates schedules at a time (see :mod:`.evaluator`), and its
writes are fenced like the engine's.

The package: ``spec`` (what a user writes, validated), ``timing`` (fire times),
``triggers`` and ``constraints`` (pure evaluation), ``tables`` (the schema),
``records`` and ``catalog`` (what users change and read: ``store.schedules``),
``store`` (the evaluator's side of the store), ``evaluator`` (the loop), ``api``
with ``serialize`` and ``openapi`` (the HTTP routes); the command line is
``jobserver.schedules.cli`` and ``jobserver.apply``.
"""
