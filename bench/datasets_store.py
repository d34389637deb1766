"""The store and API side of the datasets scenario: partition batches, the HTTP calls,
and one fill-and-claim timed in-process.

Partitions go in through the API as a user's would (``POST …/partitions``, batches of
up to 10,000). The fill-and-claim is the real working-set transaction
(:func:`jobserver.datasets.working_set.take_inputs`) of a probe job that no node
claims (its ``not_before`` is far off): each repetition marks the probe RUNNING for a
fresh attempt, takes its inputs and commits in one transaction, as the engine's start
of a run does, and is then undone (the probe consumer back at the start of the
dataset, its working set empty), so every repetition does the same work.
"""

from __future__ import annotations

import http.client
import json
import time
from datetime import date, timedelta
from typing import Any

from bench.common import TOKEN, percentile
from bench.stores import submit_through_store

DATASET = "raw"
KEY = [{"name": "date", "type": "date"}, {"name": "hour", "type": "int"},
       {"name": "shop", "type": "string"}]
#: The consumer the timed fill-and-claim uses: a working set of exactly one claim,
#: so a fill reads the same 1,000 partitions whatever the dataset holds.
PROBE = "probe"
LIMIT = 1000
FAR_OFF = "2999-01-01T00:00:00Z"


class JsonClient:
    """A keep-alive HTTP client for JSON requests to one node's API (one per thread)."""

    def __init__(self, port: int, timeout: float = 300.0) -> None:
        self.port, self.timeout = port, timeout
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None,
             expect: tuple[int, ...] = (200, 201)) -> Any:
        """The decoded reply; a status not in ``expect`` is a RuntimeError."""
        payload = None if body is None else (body if isinstance(body, bytes)
                                             else json.dumps(body).encode())
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        for attempt in range(3):  # a keep-alive connection the server closed when idle
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                       timeout=self.timeout)
            try:
                self.conn.request(method, path, payload, headers)
                response = self.conn.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self.close()
                if attempt == 2:
                    raise
        if response.status not in expect:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def dataset_path(name: str = DATASET) -> str:
    return f"/api/v1/datasets/default/{name}"


def partition(index: int) -> dict[str, Any]:
    """Partition ``index``: a distinct (date, hour, shop) for every index below 24M."""
    day = date(2026, 1, 1) + timedelta(days=index // 24_000)
    hour, shop = (index // 1000) % 24, f"s{index % 1000:03d}"
    return {"key": {"date": day.isoformat(), "hour": hour, "shop": shop},
            "location": f"s3://bench/raw/{day.isoformat()}/{hour:02d}/{shop}",
            "metadata": {"rows": index % 997}}


def batch_body(first: int, count: int) -> bytes:
    return json.dumps({"partitions": [partition(i) for i in range(first, first + count)]}
                      ).encode()


def create_dataset(client: JsonClient, name: str = DATASET) -> None:
    client.call("PUT", dataset_path(name), {"key": KEY, "description": "bench partitions"})


def create_consumer(client: JsonClient, name: str, working_set: int, limit: int) -> None:
    client.call("PUT", f"{dataset_path()}/consumers/{name}",
                {"max_working_set_size": working_set, "processing_limit": limit})


def consumer_state(client: JsonClient, name: str) -> dict[str, Any]:
    return client.call("GET", f"{dataset_path()}/consumers/{name}")


def consume_job(consumer: str, limit: int = LIMIT) -> dict[str, Any]:
    """A job of one no-op step that consumes up to ``limit`` partitions."""
    return {"name": f"consume-{consumer}",
            "inputs": [{"dataset": DATASET, "consumer": consumer, "limit": limit,
                        "on_empty": "succeed"}],
            "steps": [{"name": "s", "type": "noop"}]}


# -- the fill-and-claim, in-process ----------------------------------------------------
def probe_job(url: str) -> int:
    """The probe job: consumes the probe consumer, never claimed by a node."""
    return submit_through_store(url, {**consume_job(PROBE), "name": "probe",
                                      "not_before": FAR_OFF})


def time_fill(url: str, job_id: int, repetitions: int) -> dict[str, Any]:
    """Time ``repetitions`` fill-and-claims of the probe job (transaction and commit);
    p50/p90/max in ms and how many partitions each took."""
    from jobserver.datasets.working_set import take_inputs
    from jobserver.store import Store
    from jobserver.store.records import ClaimToken

    store = Store(url, notify=False)
    seconds, taken = [], set()
    try:
        for attempt in range(1, repetitions + 1):
            token = ClaimToken(job_id, "probe", 1, attempt)
            with store.engine.connect() as conn:
                trans = conn.begin()
                _running(conn, token)
                started = time.perf_counter()
                result = take_inputs(conn, token, [consume_job(PROBE)["inputs"][0]])
                trans.commit()
                seconds.append(time.perf_counter() - started)
            taken.add(result.count if result.outcome == "run" else -1)
            _undo(store, job_id)
    finally:
        store.dispose()
    ms = [s * 1000 for s in seconds]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50) or 0, 2),
            "p90_ms": round(percentile(ms, 90) or 0, 2), "max_ms": round(max(ms), 2),
            "took": sorted(taken)}


def _running(conn: Any, token: Any) -> None:
    """The probe job as a node's claim leaves it (untimed, same transaction)."""
    from sqlalchemy import update

    from jobserver.store.tables import jobs

    conn.execute(update(jobs).where(jobs.c.id == token.job_id).values(
        state="RUNNING", node=token.node, fence=token.fence, attempt=token.attempt))


def _undo(store: Any, job_id: int) -> None:
    """The probe consumer back at the dataset's start with an empty working set."""
    from sqlalchemy import delete, select, update

    from jobserver.datasets.tables import consumers, working_sets
    from jobserver.store.tables import jobs

    with store.engine.begin() as conn:
        consumer = select(consumers.c.id).where(consumers.c.name == PROBE).scalar_subquery()
        conn.execute(delete(working_sets).where(working_sets.c.consumer_id == consumer))
        conn.execute(update(consumers).where(consumers.c.name == PROBE).values(
            pointer_txid=0, pointer_position=0, processed=0))
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(state="READY",
                                                                   node=None))


def analyze(url: str) -> None:
    """ANALYZE the partitions table, as autovacuum does once a tenth of it changed."""
    from sqlalchemy import create_engine

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE partitions")
    finally:
        engine.dispose()


def add_in_process(url: str, dataset: str, first: int, count: int,
                   batch: int) -> float:
    """Add ``count`` partitions to ``dataset`` through the store in-process (no HTTP),
    in batches of ``batch``, one client; partitions per second."""
    from jobserver.store import Store

    store = Store(url, notify=False)
    try:
        started = time.perf_counter()
        for at in range(first, first + count, batch):
            items = [partition(i) for i in range(at, min(at + batch, first + count))]
            store.partitions.add("default", dataset, items)
        return count / (time.perf_counter() - started)
    finally:
        store.dispose()


def explain_read(url: str, label: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a fill's ordered read (1,000 partitions after the
    dataset's start), rolled back; PostgreSQL only."""
    from sqlalchemy import select, text, tuple_

    from jobserver.datasets.tables import FEED_ROWS, datasets, partitions
    from jobserver.store import Store
    from jobserver.store.feed import horizon

    store = Store(url, notify=False)
    try:
        with store.engine.connect() as conn:
            dataset_id = conn.execute(select(datasets.c.id).where(
                datasets.c.name == DATASET)).scalar_one()
            query = (select(partitions).where(
                partitions.c.dataset_id == dataset_id, text(FEED_ROWS),
                tuple_(partitions.c.txid, partitions.c.id) > tuple_(0, 0),
                partitions.c.txid < horizon(conn))
                .order_by(partitions.c.txid, partitions.c.id).limit(LIMIT))
            sql = str(query.compile(conn, compile_kwargs={"literal_binds": True}))
            plan = "\n".join(row[0] for row in conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS) " + sql))
            conn.rollback()
    finally:
        store.dispose()
    return f"-- a fill's ordered read, {label}\n{sql}\n\n-- EXPLAIN (ANALYZE, BUFFERS):\n{plan}\n"
