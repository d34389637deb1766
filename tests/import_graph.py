"""The shape of the import graph, in figures anyone can reproduce.

    .venv/bin/python -m tests.import_graph

prints how many imports run from the core (store, API, node, scheduler modes, lock
backends) to a planner by name, the groups of top-level units (``jobserver.X``
packages and modules) that import each other in a circle, and the pairs that import
each other both ways. ``lint-imports`` (``[tool.importlinter]`` in pyproject.toml)
enforces the first figure as a ratchet; this module only counts, so a change to the
seam can state its before and after.
"""

from __future__ import annotations

from collections import defaultdict

import grimp

PLANNERS = ("schedules", "datasets", "views", "batches")
CORE = ("jobserver.store", "jobserver.api", "jobserver.node", "schedulers", "locks")


def unit(module: str) -> str:
    """The top-level unit a module belongs to: ``jobserver.store.jobs`` →
    ``jobserver.store``, ``locks.zookeeper`` → ``locks``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "jobserver" else parts[0]


def core_to_planner(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    found = []
    for module in graph.modules:
        if any(module == c or module.startswith(c + ".") for c in CORE):
            for imported in graph.find_modules_directly_imported_by(module):
                parts = imported.split(".")
                if parts[0] == "jobserver" and len(parts) > 1 and parts[1] in PLANNERS:
                    found.append((module, imported))
    return sorted(found)


def unit_edges(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    units = sorted({unit(m) for m in graph.modules} - {"jobserver"})
    return {(a, b) for a in units for b in units if a != b and graph.direct_import_exists(
        importer=a, imported=b, as_packages=True)}


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected groups of more than one unit (Tarjan's algorithm)."""
    following: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        following[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in following[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted({a for a, _ in edges} | {b for _, b in edges}):
        if node not in index:
            visit(node)
    return groups


def main() -> None:
    graph = grimp.build_graph("jobserver", "schedulers", "locks", cache_dir=None)
    report(graph)
    print("\n-- without imports made only for type checking (the graph at run time) --")
    report(grimp.build_graph("jobserver", "schedulers", "locks",
                             exclude_type_checking_imports=True, cache_dir=None))


def report(graph: grimp.ImportGraph) -> None:
    upward = core_to_planner(graph)
    edges = unit_edges(graph)
    groups = circles(edges)
    both_ways = sorted((a, b) for a, b in edges if (b, a) in edges and a < b)
    print(f"core -> planner imports: {len(upward)}")
    for importer, imported in upward:
        print(f"  {importer} -> {imported}")
    print(f"units in circles: {sum(map(len, groups))} in {len(groups)} group(s)")
    for group in groups:
        print("  " + ", ".join(group))
    print(f"pairs importing each other: {len(both_ways)}")
    for a, b in both_ways:
        print(f"  {a} <-> {b}")


if __name__ == "__main__":
    main()
