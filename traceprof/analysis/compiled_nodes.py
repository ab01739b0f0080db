"""The module tree as the compiled-kernel table's join grows it: a module's node found by
qualified name under its compiled root, made where the trace has no scope for it (the hooks of
submodules do not run inside compiled code), with the levels in between that the module table
lists, as an eager trace's tree has them."""

from __future__ import annotations

import re
from collections import Counter

import msgspec
import numpy as np

from traceprof.analysis.compiled_sites import module_classes
from traceprof.analysis.hierarchy import Hierarchy, HierarchyNode
from traceprof.read.limits import MAX_TREE_DEPTH
from traceprof.trace.model import CompiledTable, ModuleTable
from traceprof.trace.module_names import joined_name

#: module classes that hold modules without being called (Dynamo's module stacks never name them)
CONTAINER_CLASSES = frozenset({"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
#: one part of a module's qualified name: an attribute or an index (printable, no dot)
_PART = re.compile(r"[^\x00-\x1f\x7f.\s]{1,200}")


class ModuleNodes:
    """The tree's nodes, growing: nodes made from the table are appended after the trace's own."""

    def __init__(self, tree: Hierarchy, table: CompiledTable, module_table: ModuleTable | None) -> None:
        self.nodes = list(tree.nodes)
        self.n_scoped = len(tree.nodes)
        self.index = {(n.parent, n.key): n.id for n in tree.nodes}
        self.classes = module_classes(table)
        #: relative modules the table knows: of nodes, and of call sites (common ancestors)
        self.known = set(self.classes) | {
            c.module for g in table.graphs.values() for c in g.calls if c.module
        }
        self.module_table = module_table
        #: module paths of the table that name no module of the model, and how often met
        self.named_nothing: Counter[str] = Counter()

    def created(self) -> np.ndarray:
        """Bool per node: made from the table (no scope of its own)."""
        out = np.zeros(len(self.nodes), bool)
        out[self.n_scoped :] = True
        return out

    def containers(self) -> np.ndarray:
        """Bool per node: a container that is never called (a ModuleList), as eager traces have it."""
        return np.array([n.class_name in CONTAINER_CLASSES for n in self.nodes], bool)

    def class_of(self, qualified: str, relative: str) -> str:
        if self.module_table is not None and qualified in self.module_table.modules:
            return self.module_table.modules[qualified].class_name
        return self.classes.get(relative, "")

    def add(self, parent: int, qualified: str, class_name: str, first_ts: float) -> int:
        node = len(self.nodes)
        path = (self.nodes[parent].path if parent >= 0 else ()) + (qualified,)
        self.nodes.append(HierarchyNode(node, parent, path, qualified, class_name, qualified, first_ts))
        self.index[(parent, qualified)] = node
        return node

    def root_node(self, qualified: str, first_ts: float) -> int:
        """A node of the tree with this qualified name (the first), else one made under the
        deepest module node that holds it; without one, under the model's root when the module
        table lists the model (``""``), else a new root."""
        named = {n.qualified_name: n.id for n in reversed(self.nodes) if not n.group}
        if qualified in named:
            return named[qualified]
        parts = qualified.split(".") if qualified else []
        for k in range(len(parts) - 1, -1, -1):
            holder = named.get(".".join(parts[:k]))
            if holder is not None:
                return self.node_for(holder, ".".join(parts[k:]), first_ts)
        if parts and self.module_table is not None and "" in self.module_table.modules:
            return self.node_for(self.add(-1, "", self.class_of("", ""), first_ts), qualified, first_ts)
        return self.add(-1, qualified, self.class_of(qualified, ""), first_ts)

    def node_for(self, root: int, module: str, first_ts: float) -> int:
        """The node of ``module`` (relative) under ``root``: found by qualified name level by
        level, made where missing; the levels in between only where the module table lists them
        (a ModuleList), as an eager trace's tree has them."""
        if not module:
            return root
        holder = root
        base = self.nodes[root].qualified_name
        parts = module.split(".")
        if (
            not all(_PART.fullmatch(p) for p in parts)
            or len(parts) + len(self.nodes[root].path) > MAX_TREE_DEPTH
        ):
            # no module's name: an empty part ("a..b"), control characters, past any depth
            self.named_nothing[module[:80]] += 1
            return root
        listed = self.module_table.modules if self.module_table is not None else {}
        if listed and joined_name(base, module) not in listed:
            # a module the model does not have: on its deepest ancestor that it has
            self.named_nothing[module[:80]] += 1
            while parts and joined_name(base, ".".join(parts)) not in listed:
                parts.pop()
            if not parts:
                return root
        for k in range(1, len(parts) + 1):
            relative = ".".join(parts[:k])
            qualified = joined_name(base, relative)
            found = self.index.get((holder, qualified))
            if found is not None:
                holder = found
            elif k == len(parts) or qualified in listed or relative in self.known:
                holder = self.add(holder, qualified, self.class_of(qualified, relative), first_ts)
        return holder

    def order_created(self, ts: np.ndarray, events: np.ndarray, node: np.ndarray) -> None:
        """A made node's first_ts: the first kernel event in its subtree (display order)."""
        order_made(self.nodes, self.n_scoped, node, ts[events])


def order_made(nodes: list[HierarchyNode], n_scoped: int, node: np.ndarray, ts: np.ndarray) -> None:
    """The first_ts of each node after the first ``n_scoped`` (nodes a join made): the earliest
    of ``ts``, the times of the work placed on ``node``, in its subtree (display order)."""
    if len(nodes) == n_scoped:
        return
    first = np.full(len(nodes), np.inf)
    np.minimum.at(first, node, ts)
    for i in range(len(nodes) - 1, n_scoped - 1, -1):  # children after parents
        p = nodes[i].parent
        if p >= n_scoped:
            first[p] = min(first[p], first[i])
    for i in range(n_scoped, len(nodes)):
        if np.isfinite(first[i]):
            nodes[i] = msgspec.structs.replace(nodes[i], first_ts=float(first[i]))
