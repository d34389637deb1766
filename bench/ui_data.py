"""What the dashboard's planner pages show, put into a running cluster through its API:
the examples' schedules, dataset, views and batches, with volume to taste.

Used by the ``ui`` scenario (:mod:`bench.ui`, at volume) and by ``make screenshots``
(``tests/browser/screenshots.py``, small). Everything goes in as a user's would: the
example files applied as ``jobserver apply`` does, partitions POSTed, view flags
written under the nodes' ``views.data_root`` and ``materialize`` asked for, batch runs
started; then :func:`add_planner_data` waits until the jobs this started have ended.

* schedules: ``examples/schedules.yaml``, a ticker every ``Sizes.ticker_seconds``
  (schedule-jobs and evaluations to show), and ``Sizes.schedules`` more daily ones,
  disabled;
* datasets: ``examples/datasets.yaml`` (its consume schedule disabled, so that the
  consumer has lag), ``Sizes.partitions`` hourly partitions of ``raw``, and a second
  consumer whose one run fails (FAILED partitions with their error);
* views: ``examples/views.yaml``, the stage views of ``Sizes.shops`` shops for
  ``Sizes.days`` days materialized, and the sources of a few days more arrived;
* batches: ``examples/batches`` run for ``Sizes.batch_locations`` until nothing is
  new, and a second system whose SNAPSHOT stage fails.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jobserver.apply import apply_documents, load
from jobserver.client import Client
from jobserver.demo import batches as demo_batches
from tests.helpers import wait_for

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NAMESPACE = "default"
#: The first day of the views' lattice and of the dataset's partitions.
FIRST_DAY = date(2015, 5, 1)
SHOPS = ("SHOP10", "SHOP11", "SHOP12", "SHOP13", "SHOP14")
#: The stage views materialized, and the grid's pattern over them.
STAGE = "app.eci.stage/e(Search,SearchWeekly)/{shop}/rymd({first}-{last})"
TICKER = "ui-ticker"
#: The widest grid a page draws (the parser refuses over 1,000 partitions): two views
#: of the first shop for 490 days.
WIDEST = STAGE.format(shop=SHOPS[0], first=FIRST_DAY.strftime("%Y%m%d"),
                      last=(FIRST_DAY + timedelta(days=489)).strftime("%Y%m%d"))
#: Days whose source data arrived after the last materialize (see :func:`add_views`).
ARRIVED = 3
AUDITOR = "audit"


@dataclass(frozen=True)
class Sizes:
    """How much of each: extra schedules, partitions of ``raw``, the views' shops ×
    days materialized, and the locations the batch example is run for, up to
    ``batch_runs`` runs each (until it has nothing new: 10 business dates each, a
    catch-up of 3 dates a run)."""

    schedules: int = 0
    partitions: int = 72
    shops: int = 2
    days: int = 14
    batch_locations: tuple[str, ...] = ("IN", "US")
    batch_runs: int = 4
    #: How often the ticker schedule launches its no-op job.
    ticker_seconds: int = 5


@dataclass(frozen=True)
class PlannerData:
    """What went in, for the pages that show it."""

    grid_pattern: str
    batch_id: int
    failed_batch_id: int
    sizes: Sizes

    def pages(self) -> list[tuple[str, str]]:
        """``(label, path)`` of each planner page, filled."""
        raw = f"/ui/datasets/{NAMESPACE}/raw"
        last = FIRST_DAY + timedelta(days=max(0, self.sizes.partitions // 24 - 1))
        return [
            ("schedules", "/ui/schedules"),
            ("schedule (ticker)", f"/ui/schedules/{NAMESPACE}/{TICKER}"),
            ("schedule live", f"/ui/schedules/{NAMESPACE}/{TICKER}/live"),
            ("datasets", "/ui/datasets"),
            ("dataset raw", raw),
            ("dataset raw, where", f"{raw}?where={quote('hour >= 20')}"),
            ("dataset raw, key range", f"{raw}?field=date&from={last.isoformat()}"
                                       f"&to={last.isoformat()}&order=oldest"),
            ("views", "/ui/views"),
            ("views grid", f"/ui/views?pattern={quote(self.grid_pattern)}"),
            ("views materialize plan",
             f"/ui/views/materialize?pattern={quote(self.grid_pattern)}"),
            ("views grid, 980 cells", f"/ui/views?pattern={quote(WIDEST)}"),
            ("views plan, 980 cells", f"/ui/views/materialize?pattern={quote(WIDEST)}"),
            ("views grid live, 980 cells", f"/ui/views/grid?pattern={quote(WIDEST)}"),
            ("batches", "/ui/batches"),
            ("batches grid live", "/ui/batches/grid"),
            ("batch audit", f"/ui/batches/{self.batch_id}"),
            ("batch audit, failed", f"/ui/batches/{self.failed_batch_id}"),
        ]


def batch_settings(data_dir: Path) -> dict[str, str]:
    """The node settings (without ``JOBSERVER_``) naming the batch example's databases,
    which this creates under ``data_dir``."""
    return {key.removeprefix("JOBSERVER_"): value
            for key, value in demo_batches.prepare(data_dir).items()}


def apply_example(client: Client, name: str) -> None:
    """``jobserver apply examples/<name>``."""
    err = io.StringIO()
    if apply_documents(client, load((EXAMPLES / name).read_text()), out=io.StringIO(),
                       err=err) != 0:
        raise RuntimeError(f"examples/{name} refused: {err.getvalue()}")


def add_schedules(client: Client, extra: int, ticker_seconds: int) -> None:
    apply_example(client, "schedules.yaml")
    client.put_schedule(NAMESPACE, TICKER, {
        "description": f"a no-op job every {ticker_seconds} seconds", "enabled": True,
        "trigger": {"type": "time", "interval": ticker_seconds},
        "template": {"name": "tick", "steps": [{"name": "tick", "type": "noop"}]}})
    for number in range(extra):
        client.put_schedule(NAMESPACE, f"report-{number:04d}", {
            "description": f"report {number}", "enabled": False,
            "trigger": {"type": "time", "cron": f"{number % 60} {number % 24} * * *",
                        "timezone": "Europe/Berlin"},
            "template": {"name": f"report-{number:04d}",
                         "steps": [{"name": "report", "type": "noop"}]}})


def add_dataset(client: Client, partitions: int) -> int:
    """The example dataset with ``partitions`` hourly partitions (from FIRST_DAY), and
    a consumer whose run fails; returns the failing job's id."""
    apply_example(client, "datasets.yaml")
    client.schedule_action(NAMESPACE, "cleanse-raw", "disable")
    client.request("PUT", f"/api/v1/datasets/{NAMESPACE}/raw/consumers/{AUDITOR}",
                   {"filter": ["hour >= 22"], "processing_limit": 5, "max_retries": 0})
    for first in range(0, partitions, 10_000):
        client.add_partitions(NAMESPACE, "raw", {"if_absent": True, "partitions": [
            {"key": {"date": (FIRST_DAY + timedelta(days=n // 24)).isoformat(), "hour": n % 24},
             "location": f"s3://raw/{FIRST_DAY + timedelta(days=n // 24)}/{n % 24:02d}",
             "metadata": {"rows": 100 * (n % 24)}}
            for n in range(first, min(partitions, first + 10_000))]})
    job = client.submit(_json({"name": "audit-raw", "inputs": [
        {"dataset": "raw", "consumer": AUDITOR}], "steps": [
        {"name": "read", "type": "shell",
         "argv": ["sh", "-c", "echo 'row 17: unreadable timestamp' >&2; exit 3"]}]}))
    return int(job["id"])


def add_views(client: Client, views_root: Path, shops: int, days: int) -> str:
    """The example views, the stage views of ``shops`` × ``days`` materialized, the
    sources of the next ``ARRIVED`` days flagged but not yet transformed; returns the
    pattern of the first shop's grid, which goes a week past the materialized days
    (cells of each kind: materialized, data arrived, no data yet)."""
    apply_example(client, "views.yaml")
    for env in ("prod", "staging"):
        _flag(views_root / "source" / "shops" / env)
    last = FIRST_DAY + timedelta(days=days - 1)
    for shop in SHOPS[:shops]:
        for offset in range(days + ARRIVED):
            day = FIRST_DAY + timedelta(days=offset)
            _flag(views_root / "source" / "search" / shop / day.strftime("%Y%m%d"))
        client.materialize(_stage(shop, FIRST_DAY, last), "DEFAULT", plan=False)
    return _stage(SHOPS[0], FIRST_DAY, last + timedelta(days=7))


def _stage(shop: str, first: date, last: date) -> str:
    return STAGE.format(shop=shop, first=first.strftime("%Y%m%d"),
                        last=last.strftime("%Y%m%d"))


def _flag(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_SUCCESS").touch()


#: A second system whose SNAPSHOT stage fails (the grid's failed cells), after the
#: browser tests' configuration.
FAILING_SYSTEM = "SHIPMENT"
FAILING_CONFIG: dict[str, Any] = {
    "valid_systems": [FAILING_SYSTEM], "valid_stages": ["STG", "FND", "SNAPSHOT"],
    "valid_locations": ["IN"],
    "system_stage_mapping": [{"system": FAILING_SYSTEM, "stages": ["STG", "FND", "SNAPSHOT"],
                              "start_date": "2024-01-01"}],
    "job_group_mapping": [{"system": FAILING_SYSTEM, "stage": stage, "job_group": [f"{stage}_S"]}
                          for stage in ("STG", "FND", "SNAPSHOT")],
    "job_groups": [
        {"name": "STG_S", "jobs": [{"name": "extract", "type": "noop"},
                                   {"name": "load", "type": "noop"}]},
        {"name": "FND_S", "jobs": [{"name": "dedup", "type": "noop"}]},
        {"name": "SNAPSHOT_S", "jobs": [{"name": "snapshot", "type": "shell", "argv": [
            "sh", "-c", "echo 'snapshot_shipments is locked by another load' >&2; exit 1"]}]}],
    "stage_pairs": [["FND", "SNAPSHOT"]], "catch_up_limit": 3}


def run_failing_batches(client: Client, timeout: float = 60.0) -> int:
    """STG of :data:`FAILING_SYSTEM` for three dates, then FND+SNAPSHOT, which fails;
    returns the failed batch's id."""
    client.request("PUT", "/api/v1/batches/configs/shipments-example", FAILING_CONFIG)
    for fields in ({"stage": "STG", "watermark": "2024-01-03"}, {"stage": "FND"}):
        run_batch(client, {"system": FAILING_SYSTEM, "location": "IN", **fields}, timeout)
    return _oldest_batch(client, FAILING_SYSTEM, "IN")


def run_batch(client: Client, body: dict[str, Any], timeout: float) -> str:
    """``POST /api/v1/batches/run`` and wait for the run to end; its status."""
    run = client.request("POST", "/api/v1/batches/run", body)
    if run["status"] != "NOTHING":
        path = f"/api/v1/batches/runs/{run['id']}"
        wait_for(lambda: client.request("GET", path)["status"] != "RUNNING", timeout, 0.5,
                 f"batch run {run['id']}")
    return str(run["status"])


def _oldest_batch(client: Client, system: str, location: str) -> int:
    found = client.request("GET", "/api/v1/batches", query={
        "system": system, "location": location})["batches"]
    return int(found[-1]["id"])


def run_batches(client: Client, locations: tuple[str, ...], runs: int,
                timeout: float = 120.0) -> int:
    """Batch runs of the example for each of ``locations`` until one finds nothing
    new or ``runs`` have run (one at a time); returns the id of the oldest batch of
    the first location."""
    apply_example(client, "batches/batches.yaml")
    for location in locations:
        for _ in range(runs):
            body = {"system": demo_batches.SYSTEM, "location": location}
            if run_batch(client, body, timeout) == "NOTHING":
                break
    return _oldest_batch(client, demo_batches.SYSTEM, locations[0])


def add_planner_data(client: Client, views_root: Path, sizes: Sizes) -> PlannerData:
    """All of the above; returns once the jobs they started have ended."""
    add_schedules(client, sizes.schedules, sizes.ticker_seconds)
    add_dataset(client, sizes.partitions)
    pattern = add_views(client, views_root, sizes.shops, sizes.days)
    batch_id = run_batches(client, sizes.batch_locations, sizes.batch_runs)
    failed_batch_id = run_failing_batches(client)
    wait_idle(client)
    return PlannerData(pattern, batch_id, failed_batch_id, sizes)


def wait_idle(client: Client, timeout: float = 300.0, busy_allowed: int = 0) -> None:
    """Until no more than ``busy_allowed`` jobs are READY or RUNNING (the ticker's
    come and go within a second; jobs held back for later are not counted)."""
    def idle() -> bool:
        busy = len(client.jobs(state="RUNNING", limit=200)["jobs"])
        ready = [job for job in client.jobs(state="READY", limit=200)["jobs"]
                 if not job.get("not_before")]
        return busy + len(ready) <= busy_allowed
    wait_for(idle, timeout, 0.5, "the planners' jobs to end")


def _json(spec: dict[str, Any]) -> bytes:
    return json.dumps(spec).encode()
