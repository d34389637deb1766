"""A planner from another package, installed by an entry point: a route, a dashboard
page and a planner loop, each through the planner seam only
(tests/integration/test_planner_plugin.py)."""

from __future__ import annotations

import os
from pathlib import Path

from flask import Blueprint

from jobserver.api import api
from jobserver.planner import PlannerLoop
from jobserver.planners.base import NodeContext, NodeParts, Page, Planner, Route

blueprint = Blueprint("tiny", __name__, url_prefix="/api/v1/tiny")


def rounds_file(data_dir: Path) -> Path:
    return data_dir / "tiny-rounds"


@blueprint.get("")
def rounds() -> dict[str, int]:
    """How many rounds the planner loop has made, on whichever node holds the seat."""
    path = rounds_file(api().config.data_dir)
    return {"rounds": int(path.read_text()) if path.exists() else 0}


class Counter(PlannerLoop):
    """Counts its rounds under the planner seat's lease."""

    def __init__(self, node: NodeContext) -> None:
        super().__init__("tiny", node.seat, 0.2, stopping=node.stopping)
        self.path = rounds_file(node.config.data_dir)
        self.done = 0

    def round(self, lease: object) -> float:
        self.done += 1
        # Replaced whole, never truncated in place: the route reads it meanwhile.
        scratch = self.path.with_suffix(".new")
        scratch.write_text(str(self.done))
        os.replace(scratch, self.path)
        return 0.2


class TinyPlanner(Planner):
    name = "tiny"

    def blueprints(self) -> list[Blueprint]:
        return [blueprint]

    def routes(self) -> dict[str, Route]:
        return {"tiny.rounds": Route("read")}

    def pages(self) -> list[Page]:
        return [Page("tiny_pages", "Tiny", "ui.tiny")]

    def node_parts(self, node: NodeContext) -> NodeParts:
        return NodeParts(planning=[Counter(node)])
