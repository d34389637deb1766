"""Batches (Guzzle's common services) on the job engine.

A *batch* is one system's load for one location, context and business date; it passes
through the system's ordered *stages*. A stage run is one engine job whose steps are the
jobs of the *job groups* mapped to (system, stage, context) — the most specific mapping
wins. The control table (``batches`` and ``batch_stages``) says where every batch stands;
its statuses are derived from the stage jobs' states by the tracker, so the engine's
fencing, failover and resume hold for batches too.

Modules: :mod:`~jobserver.batches.spec` (the ``BatchConfig`` resource and job-group
resolution), :mod:`~jobserver.batches.compose` (a stage's engine job, business-date
periods), :mod:`~jobserver.batches.tables` and :mod:`~jobserver.batches.store` (schema
and repository), :mod:`~jobserver.batches.planner` (``batch run``: validate, create
batches from the watermark, plan the catch-up, launch), :mod:`~jobserver.batches.tracker`
(stage jobs → control-table statuses; advances runs), :mod:`~jobserver.batches.audit`
(the runtime audit over the engine's step audit), :mod:`~jobserver.batches.api`.
"""
