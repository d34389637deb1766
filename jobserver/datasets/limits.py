"""Bounds the datasets' API enforces that its clients split requests by, kept free of
the specs' imports (pydantic models, the store) so that the command line that splits
``jobserver datasets partitions add --file`` into requests starts light.
:mod:`jobserver.datasets.spec` re-exports them."""

from __future__ import annotations

#: Partitions in one request (an API batch, one step's output).
MAX_BATCH = 10_000
