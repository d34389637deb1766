"""YAML from users, loaded within bounds: aliases repeat little, nothing nests deep.

An alias (``*a``) stands for the whole node its anchor (``&a``) names, and aliases may
name nodes full of aliases: a 1 KB file of nine anchors, each a list of nine aliases
of the one before, stands for 9^9 strings (2.9 GB and 35 s once expanded for JSON).
An anchor named inside its own node (``&a [*a]``) stands for an endless list.
PyYAML composes either cheaply (an alias is the same node again) and leaves the
expansion to whoever walks the result.

:class:`BoundedLoader` counts while it composes, before anything is constructed: every
node knows how many nodes it stands for once expanded, and each alias adds that many
to the stream's total, which may not pass :data:`MAX_ALIAS_NODES`. An alias of a node
still being composed (a recursive alias) and nesting deeper than :data:`MAX_DEPTH` are
refused too. Each refusal is a :class:`YamlBoundError` naming the line. Our resources
never need more: an alias repeats a shared step list or a ``<<: *defaults`` mapping a
few times, a few hundred nodes.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, SequenceNode

#: How many nodes all the aliases of one stream may repeat, together.
MAX_ALIAS_NODES = 10_000
#: How deeply collections may nest (the API refuses JSON deeper than 100 levels).
MAX_DEPTH = 100


class YamlBoundError(Exception):
    """A document beyond the bounds: ``line`` (1-based) and what is wrong there."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line, self.reason = line, reason


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses, while composing, what would expand beyond the
    bounds (see the module's docstring). Invariant: ``_sizes[id(node)]`` is the count
    of nodes ``node`` stands for, for every node composed in the current document."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._repeated = 0  # nodes repeated by the stream's aliases so far
        self._sizes: dict[int, int] = {}
        self._open: set[str] = set()  # anchors of collections being composed
        self._depth = 0

    def compose_document(self) -> Any:
        try:
            return super().compose_document()
        finally:
            self._sizes.clear()  # the ids are of this document's nodes only

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self._count_alias(event)
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        collection = isinstance(event, (SequenceStartEvent, MappingStartEvent))
        if collection and self._depth >= MAX_DEPTH:
            raise YamlBoundError(event.start_mark.line + 1,
                                 f"nested deeper than {MAX_DEPTH} levels")
        anchor = event.anchor if collection else None
        if anchor is not None:
            self._open.add(anchor)
        self._depth += collection
        try:
            node: Node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
            if anchor is not None:
                self._open.discard(anchor)
        self._sizes[id(node)] = 1 + sum(self._sizes.get(id(child), 1)
                                        for child in _children(node))
        return node

    def _count_alias(self, event: AliasEvent) -> None:
        line = event.start_mark.line + 1
        if event.anchor in self._open:
            raise YamlBoundError(line, f"alias *{event.anchor} is inside the node it names "
                                       "(a recursive alias)")
        target = self.anchors.get(event.anchor)
        if target is None:
            return  # PyYAML refuses an undefined alias itself
        self._repeated += self._sizes.get(id(target), 1)
        if self._repeated > MAX_ALIAS_NODES:
            raise YamlBoundError(line, f"alias *{event.anchor} repeats more nodes than "
                                       f"aliases may ({MAX_ALIAS_NODES} in one file)")


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def load_all(text: str) -> list[Any]:
    """Every document of ``text``; :class:`YamlBoundError` beyond the bounds,
    ``yaml.YAMLError`` when it is not YAML."""
    # What yaml.safe_load_all does, with the bounded loader (a SafeLoader): spelled out
    # so that no call of the generic loader, which takes any Loader, is in the code.
    loader = BoundedLoader(text)
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()
