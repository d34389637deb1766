"""The datasets part of ``make run``'s demo: ``examples/datasets.yaml`` with a day of
partitions.

:func:`place` applies the example (the ``raw`` dataset, its ``cleanse`` consumer,
which leaves the night hours alone, and the ``cleanse-raw`` schedule, which runs the
cleanse job each time 10 new partitions are there for that consumer) and adds the 24
hourly partitions of :data:`DAY`. The 18 from 06:00 on fire the schedule once, and
its job takes them all, so the Datasets page shows partitions, a consumer that has
processed some and the job that did it. Partitions that exist are skipped
(``if_absent``).
"""

from __future__ import annotations

from jobserver.client import Client
from jobserver.demo.examples import apply_example

NAMESPACE, DATASET = "default", "raw"
#: The day of the demo's partitions: before the ones docs/datasets.md adds by hand.
DAY = "2026-10-31"
HOURS = 24


def partitions() -> list[dict[str, object]]:
    """The demo's partitions: one an hour of :data:`DAY`."""
    return [{"key": {"date": DAY, "hour": hour},
             "location": f"s3://raw/{DAY}/{hour:02d}", "metadata": {"rows": 100 + 7 * hour}}
            for hour in range(HOURS)]


def place(client: Client) -> list[str]:
    """Apply the example and add the day's partitions; banner lines."""
    apply_example(client, "datasets.yaml")
    added = client.add_partitions(NAMESPACE, DATASET,
                                  {"if_absent": True, "partitions": partitions()})
    return [f"  demo datasets: examples/datasets.yaml, {NAMESPACE}/{DATASET} with "
            f"{added['added']} hourly partitions of {DAY} added (the cleanse-raw "
            "schedule consumes those from 06:00)"]


def commands(url: str) -> list[str]:
    """What to try, for the banner."""
    return ["Datasets (docs/datasets.md):",
            f"  .venv/bin/jobserver partitions list {DATASET}",
            f"  {url}/ui/datasets/{NAMESPACE}/{DATASET}"]
