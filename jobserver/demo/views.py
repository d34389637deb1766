"""The views part of ``make run``'s demo: ``examples/views.yaml`` and the data its
walkthrough (docs/views.md) reads.

:func:`place` applies the example's five view definitions and delivers what its noop
sources wait for: the ``_SUCCESS`` flags of ``app.eci.source/Search`` for shop
SHOP10 from 2015-04-25 to 2015-05-31 (the May datamart partition reads the weekly
figures of every day of May, each the last 7 days) and of ``app.eci.source/Shops``
for ``prod`` and ``staging``, under ``views.data_root``. Nothing is materialized:
``jobserver materialize -v`` :data:`PATTERN` ``--plan`` then says what the
walkthrough shows (set 39, transform 69), and the dashboard's Views page draws it.

A flag that exists is left as it is: touching it again would make its data newer,
and the next materialize would transform everything downstream once more.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

from jobserver.client import Client
from jobserver.demo.examples import apply_example

#: What the walkthrough materializes: one shop's May 2015 export.
PATTERN = "app.eci.datamart/SearchExport/SHOP10/2015/05"
SHOP = "SHOP10"
#: The first day a May weekly figure reads (May 1st's 7 days) and the month's last.
FIRST_DAY, LAST_DAY = date(2015, 4, 25), date(2015, 5, 31)
ENVS = ("prod", "staging")


def source_locations() -> list[str]:
    """The relative locations of the source partitions the walkthrough needs."""
    days = (LAST_DAY - FIRST_DAY).days + 1
    search = [f"source/search/{SHOP}/{FIRST_DAY + timedelta(days=n):%Y%m%d}"
              for n in range(days)]
    return search + [f"source/shops/{env}" for env in ENVS]


def deliver(views_root: Path) -> int:
    """Create the missing ``_SUCCESS`` flags; how many were created."""
    created = 0
    for location in source_locations():
        flag = views_root / location / "_SUCCESS"
        if not flag.exists():
            flag.parent.mkdir(parents=True, exist_ok=True)
            flag.touch()
            created += 1
    return created


def place(client: Client, views_root: Path) -> list[str]:
    """Apply the example views and deliver their sources; banner lines."""
    apply_example(client, "views.yaml")
    deliver(views_root)
    return [f"  demo views: examples/views.yaml, {len(source_locations())} source "
            f"partitions delivered under {views_root}"]


def commands(url: str) -> list[str]:
    """What to try, for the banner."""
    return ["Views (docs/views.md):",
            f"  .venv/bin/jobserver materialize -v {PATTERN} --plan",
            f"  {url}/ui/views?pattern={PATTERN}"]
