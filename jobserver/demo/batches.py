"""The batches part of ``make run``'s demo: examples/batches on the local cluster.

Before the nodes start, :func:`prepare` creates the example's SQLite source and
warehouse under ``<data_dir>/demo`` (kept on a second start, with what was loaded)
and returns the node environment naming them as ``connections.source`` and
``connections.warehouse``. Once the API answers, :func:`start` applies
``examples/batches/batches.yaml`` and starts one run of ORDER/IN, every stage: STG
for the first ``catch_up_limit`` business dates of the backlog, then FND+SNAPSHOT
per date, so the control table and the audit have rows to show. That happens on the
first start only (:mod:`jobserver.demo.place`): a later start submits nothing, and
``jobserver batch run`` (the banner says how) catches up the next dates.
"""

from __future__ import annotations

import io
from pathlib import Path

from jobserver.apply import apply_documents, load
from jobserver.client import ApiError, Client
from jobserver.demo import warehouse as demo_warehouse
from jobserver.exceptions import JobServerError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "batches"
SYSTEM, LOCATION = "ORDER", "IN"


def demo_dir(data_dir: Path) -> Path:
    return (data_dir / "demo").resolve()


def prepare(data_dir: Path) -> dict[str, str]:
    """Create the example's databases if missing; the nodes' connection settings."""
    source, warehouse = demo_warehouse.create(demo_dir(data_dir))
    env = demo_warehouse.connection_env(source, warehouse)
    return env


def start(client: Client) -> list[str]:
    """Apply the example's BatchConfig and start a run of ORDER/IN; banner lines
    saying what the run does (or why it does nothing)."""
    documents = load((EXAMPLE / "batches.yaml").read_text(encoding="utf-8"))
    out, err = io.StringIO(), io.StringIO()
    if apply_documents(client, documents, out=out, err=err) != 0:
        raise JobServerError(f"examples/batches/batches.yaml refused: {err.getvalue()}")
    try:
        run = client.request("POST", "/api/v1/batches/run",
                             {"system": SYSTEM, "location": LOCATION})
    except ApiError as exc:  # the cluster still starts; the banner says why
        return [f"  demo batches: {SYSTEM}/{LOCATION} not started: {exc.message}"]
    if run["status"] == "NOTHING":
        return [f"  demo batches: {SYSTEM}/{LOCATION}: {run['message']}"]
    dates = sorted({item["business_date"] for item in run["plan"]})
    return [f"  demo batches: batch run {run['id']} of {SYSTEM}/{LOCATION}: "
            f"{len(run['plan'])} stage runs, {dates[0]}..{dates[-1]} "
            "(STG, then FND+SNAPSHOT per date)"]


def commands(data_dir: Path) -> list[str]:
    """What to try, for the banner."""
    where = f"--system {SYSTEM} --location {LOCATION}"
    return ["Batches (examples/batches/README.md):",
            f"  .venv/bin/jobserver batch status {where}",
            f"  .venv/bin/jobserver batch audit {where} --work-unit job",
            f"  .venv/bin/jobserver batch run {where} --stage STG   # the next 3 dates",
            f"  .venv/bin/jobserver batch run {where} --stage FND   # FND+SNAPSHOT per date",
            f"  sqlite3 {demo_dir(data_dir)}/warehouse.db "
            "'SELECT * FROM snapshot_orders'"]
