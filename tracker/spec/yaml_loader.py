"""The YAML reader of the study spec (and of YAML values on the command line): PyYAML's safe
loader with two rules of its own.

- A key given twice in one mapping is refused (PyYAML would keep the last one silently);
  ``<<: *anchor`` merge keys may still be overridden.
- Aliases may not blow the document up: counted as if every alias were a copy of what its
  anchor names, a document holds at most :data:`MAX_NODES` nodes, and no alias may name a
  node that contains it. A spec is a few hundred nodes; a "billion laughs" document (a few
  lines of nested aliases that expand to 10^9 strings) is refused as soon as it is parsed,
  before anything is built from it. The count is linear in the size of the text.

Both raise :class:`yaml.YAMLError` subclasses with the position and the rule, which
``load_spec`` turns into a one-line message.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

#: the most nodes a document may expand to, aliases counted as copies
MAX_NODES = 10_000


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: Node, limit: int = MAX_NODES) -> int:
    """How many nodes ``root`` stands for with every alias expanded (each node once per
    place it appears). ComposerError naming the rule and the node's position once that is
    more than ``limit``, or when a node contains itself through an alias. Each distinct node
    is visited once, so this is quick however large the expansion."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > limit:
                raise ComposerError(
                    None, None, f"aliases may expand a document to at most {limit} nodes, but "
                    f"this one expands to {size} or more (nested aliases, a 'billion laughs' "
                    "document?); write the values out instead", node.start_mark)
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ComposerError(None, None, "an alias may not name a node that contains it, but "
                                "this one does (a recursive structure)", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a document whose aliases expand to more than MAX_NODES nodes,
    and a key given twice in one mapping."""

    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        if node is not None:
            expanded_size(node)
        return node


def _construct_mapping(loader: BoundedLoader, node: MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden
            continue
        key = loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool):
            continue
        if key in seen:
            raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node))


BoundedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str) -> Any:
    """The one document of ``text``, read by :class:`BoundedLoader`; yaml.YAMLError when it
    is not YAML or breaks one of the rules."""
    return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader subclass


def compose_yaml(text: str) -> Node | None:
    """The node graph of ``text`` (positions kept), with the same rules."""
    node: Node | None = yaml.compose(text, Loader=BoundedLoader)
    return node
