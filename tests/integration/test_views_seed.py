"""Views as Schedoscope's scheduling text says (seed 000), on a real ``jobserver serve``
per store, each test with a ledger of what ran (issue 34, items 1 and 2).

* A view in ``retrying`` is not yet ``failed``: with ``views.retries=2``, a view that
  fails once and then succeeds holds its dependent until the retry succeeded; the
  dependent then reads complete data, and a plan afterwards has nothing to do.
* Invalidating a NoOp view recomputes its dependents: ``jobserver invalidate`` of the
  source partition, then ``jobserver materialize``, sets the source again with a new
  timestamp and transforms every view downstream once more.

The lattice of each test (its own package: the node is shared)::

    <pkg>.src/Raw (noop: <data_dir>/views/<pkg>/raw/<day>/_SUCCESS)
        ──the same day──▶ <pkg>.stage/Clean (a shell step) ──▶ <pkg>.mart/Top (shell)

Each shell step appends a line to the test's ledger file when it runs.
"""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.integration.attack import AttackNode, attack_node, unique  # noqa: F401
from tests.integration.nodes import JOBSERVER, TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
DAY = [{"name": "day", "type": "string"}]
FIELDS = {"fields": [{"name": "id", "type": "bigint"}]}


@pytest.fixture(scope="module")
def attack_env() -> dict[str, str]:
    return {"JOBSERVER_VIEWS__RETRIES": "2", "JOBSERVER_VIEWS__POLL_INTERVAL": "0.2"}


def shell(script: str) -> dict[str, Any]:
    return {"job": {"steps": [{"name": "run", "type": "shell", "argv": ["sh", "-c", script]}]}}


class Lattice:
    """Raw → Clean → Top under a package of its own, defined on ``node``."""

    def __init__(self, node: AttackNode, clean: str, top: str) -> None:
        self.node = node
        self.package = unique("seed")
        self.raw, self.clean, self.top = (f"{self.package}.{kind}/{name}/01" for kind, name in
                                          (("src", "Raw"), ("stage", "Clean"), ("mart", "Top")))
        for body in (
                {"name": f"{self.package}.src/Raw", "transformation": "noop",
                 "location": f"{self.package}/raw/${{day}}"},
                {"name": f"{self.package}.stage/Clean", "transformation": shell(clean),
                 "dependencies": [{"view": f"{self.package}.src/Raw", "map": {"day": "$day"}}]},
                {"name": f"{self.package}.mart/Top", "transformation": shell(top),
                 "dependencies": [{"view": f"{self.package}.stage/Clean",
                                   "map": {"day": "$day"}}]}):
            status, reply = node.call("PUT", f"/api/v1/view-definitions/{body['name']}",
                                      {"parameters": DAY, "structure": FIELDS, **body})
            assert status == 201, reply

    def deliver(self, at: float) -> None:
        """The outside ETL's ``_SUCCESS`` flag of Raw, written at ``at``."""
        folder = self.node.data_dir / "views" / self.package / "raw" / "01"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "_SUCCESS").touch()
        os.utime(folder / "_SUCCESS", (at, at))

    def materialize(self, plan: bool = False) -> dict[str, Any]:
        """``POST /api/v1/views/materialize`` of Top: the reply."""
        status, reply = self.node.call("POST", "/api/v1/views/materialize",
                                       {"pattern": self.top, "plan": plan})
        assert status == 200, reply
        return reply  # type: ignore[no-any-return]

    def partitions(self) -> dict[str, dict[str, Any]]:
        status, reply = self.node.call("GET", f"/api/v1/views?pattern={self.top}"
                                              "&dependencies=true")
        assert status == 200, reply
        return {item["path"]: item for item in reply["views"]}

    def settled(self) -> dict[str, dict[str, Any]]:
        """Every partition materialized: waits for it, returns them."""
        def materialized() -> dict[str, dict[str, Any]] | None:
            found = self.partitions()
            return found if {item["status"] for item in found.values()} == {
                "materialized"} else None
        return wait_for(materialized, 30, 0.1,  # type: ignore[arg-type]
                        "every partition of the lattice to be materialized")

    def job_runs(self, path: str) -> list[Any]:
        """The jobs of ``path``, oldest first, as the store holds them."""
        found, _ = self.node.store.jobs.list(name=f"view {path}", limit=20)
        return sorted(found, key=lambda job: job.id)


def cli(node: AttackNode, *args: str) -> list[list[str]]:
    """``jobserver <args>`` against ``node``: its output's lines, split into words."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVER_")}
    env.update(JOBSERVER_URL=node.url, JOBSERVER_TOKEN=TOKEN)
    done = subprocess.run(JOBSERVER + list(args), env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done
    return [line.split() for line in done.stdout.splitlines()]


def moment(text: str) -> datetime:
    """An API time as a time: compared as text, "…42Z" sorts after "…42.128Z"."""
    return datetime.fromisoformat(text)


def ledger_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_retrying_view_holds_its_dependent_until_its_retry_succeeded(
        attack_node: AttackNode, tmp_path: Path) -> None:  # noqa: F811
    ledger, marker, data = tmp_path / "ledger", tmp_path / "failed-once", tmp_path / "clean"
    # Clean fails its first run; its retry takes a second, then writes its data.
    lattice = Lattice(attack_node, clean=(
        f'if [ -e "{marker}" ]; then sleep 1; touch "{data}"; '
        f'echo "clean succeeded" >> "{ledger}"; exit 0; fi; '
        f'touch "{marker}"; echo "clean failed" >> "{ledger}"; exit 3'), top=(
        f'if [ -e "{data}" ]; then echo "top ran on clean data" >> "{ledger}"; '
        f'else echo "top ran without clean data" >> "{ledger}"; fi'))
    lattice.deliver(time.time() - 3600)
    assert lattice.materialize()["counts"] == {"set": 1, "transform": 2}

    lattice.settled()
    assert ledger_of(ledger) == ["clean failed", "clean succeeded", "top ran on clean data"]
    first, retry = lattice.job_runs(lattice.clean)
    [top] = lattice.job_runs(lattice.top)
    assert (first.state.value, retry.state.value, top.state.value) == (
        "ERROR", "SUCCEED", "SUCCEED")
    assert top.started_at >= retry.finished_at, (top.started_at, retry.finished_at)
    # Both materialized and consistent: nothing is left to do.
    assert lattice.materialize(plan=True)["counts"] == {"skip": 3}


def test_invalidating_a_noop_view_recomputes_its_dependents(
        attack_node: AttackNode, tmp_path: Path) -> None:  # noqa: F811
    ledger = tmp_path / "ledger"
    lattice = Lattice(attack_node, clean=f'echo clean >> "{ledger}"',
                      top=f'echo top >> "{ledger}"')
    lattice.deliver(time.time() - 3600)  # delivered an hour ago
    lattice.materialize()
    before = lattice.settled()
    assert ledger_of(ledger) == ["clean", "top"]

    # The outside ETL corrected Raw's data in place: the operator invalidates it.
    assert cli(attack_node, "invalidate", "-v", lattice.raw) == [
        "1 of 1 view partition(s) invalidated".split()]
    plan = {line[0]: line[1:] for line in cli(attack_node, "materialize", "-v", lattice.top,
                                              "--plan")}
    assert plan[lattice.raw][:3] == ["set", "-", "invalidated;"], plan
    assert [plan[path][0] for path in (lattice.clean, lattice.top)] == ["transform"] * 2, plan
    cli(attack_node, "materialize", "-v", lattice.top)
    wait_for(lambda: len(ledger_of(ledger)) == 4, 30, 0.1, "Clean and Top to run again")
    after = lattice.settled()
    assert ledger_of(ledger) == ["clean", "top", "clean", "top"]
    stamp = {path: (moment(before[path]["transformed_at"]),
                    moment(after[path]["transformed_at"]))
             for path in (lattice.raw, lattice.clean, lattice.top)}
    assert all(new > old for old, new in stamp.values()), stamp
    assert stamp[lattice.raw][1] < stamp[lattice.clean][1] < stamp[lattice.top][1], stamp
    # Set once with its new timestamp: the next plan does nothing.
    assert lattice.materialize(plan=True)["counts"] == {"skip": 3}
