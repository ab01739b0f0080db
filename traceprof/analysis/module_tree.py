"""Tree assembly: the result tree of module nodes, groups and the bucket, as ModuleNodes.

:func:`parents` receives the module tree and the "not in any module" groups and returns each
node's parent; :func:`tree_shape` orders the children for display (modules by first call,
groups biggest first); :func:`module_nodes` receives every node's sums (own and subtree totals
per pass, calls, memory, ops) and returns the :class:`ModuleNode` list in pre-order with the new
id of each node; :func:`optimizer_totals` sums the optimizer step groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from traceprof.analysis.classify import BACKWARD, FORWARD, OTHER, Context
from traceprof.analysis.hierarchy import Hierarchy, HierarchyNode, Source
from traceprof.analysis.unattributed import Groups
from traceprof.result.memory import MemoryUse
from traceprof.result.model import (
    FUSED_FIELDS,
    UNATTRIBUTED_NAME,
    Fused,
    ModuleNode,
    NodeKind,
    OpStat,
    PassTotals,
    PhaseTimes,
    Times,
)
from traceprof.trace import schema
from traceprof.trace.model import ModuleTable

_METRICS = Times.__struct_fields__


class Shape(msgspec.Struct):
    """The result tree: each node's parent and children in display order, the roots."""

    parent: np.ndarray
    children: dict[int, list[int]]
    roots: list[int]  # module roots by first call, then the bucket


def parents(tree: Hierarchy, groups: Groups) -> np.ndarray:
    """Parent of each node: the module tree's, and the bucket for every group."""
    parent = np.full(groups.n_nodes, -1, np.int64)
    for hn in tree.nodes:
        parent[hn.id] = hn.parent
    parent[groups.n_modules + 1 :] = groups.bucket
    return parent


def tree_shape(
    tree: Hierarchy,
    groups: Groups,
    total: dict[str, np.ndarray],
    parent: np.ndarray,
    table: ModuleTable | None = None,
) -> Shape:
    """Children in display order: modules by first call (ties of nodes made from the
    compiled-kernel table in the order of ``table``), groups biggest first."""
    n_nodes = groups.n_nodes
    n_mod = groups.n_modules
    children: dict[int, list[int]] = {i: [] for i in range(n_nodes)}
    order_key = np.zeros(n_nodes)
    for hn in tree.nodes:
        order_key[hn.id] = hn.first_ts
    # groups: biggest first
    for g in range(n_mod + 1, n_nodes):
        order_key[g] = -(total["gpu_busy_us"][:, g].sum() or total["cpu_us"][:, g].sum() / 1e9)
    order = np.argsort(order_key, kind="stable")
    if tree.event_node is not None and table is not None:
        # nodes made from the compiled-kernel table share the time of a fused kernel: ties
        # go in the model's order (the module table's)
        position = {name: k for k, name in enumerate(table.modules)}
        after = np.full(n_nodes, len(position), np.int64)
        for hn in tree.nodes:
            after[hn.id] = position.get(hn.qualified_name, len(position))
        order = np.lexsort((after, order_key))
    for i in order.tolist():
        if parent[i] >= 0:
            children[int(parent[i])].append(i)
    module_roots = [hn.id for hn in sorted(tree.nodes, key=lambda h: h.first_ts) if hn.parent < 0]
    return Shape(parent, children, module_roots + [groups.bucket])


def module_nodes(
    ctx: Context,
    groups: Groups,
    shape: Shape,
    own: dict[str, np.ndarray],
    total: dict[str, np.ndarray],
    calls: np.ndarray,
    memory_use: Sequence[tuple[MemoryUse, ...]],
    ops_of: Sequence[tuple[OpStat, ...]],
    fused: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None,
) -> tuple[list[ModuleNode], dict[int, int]]:
    """The ModuleNodes in pre-order (parents before children, siblings in display order), and
    the new id of each node."""
    tree = ctx.tree
    n_mod, bucket = groups.n_modules, groups.bucket
    parent, children = shape.parent, shape.children
    names_of_groups = groups.names()
    table = ctx.trace.metadata.module_table

    times = _phase_times(own, total, _METRICS)
    fused_of = _phase_times(*fused, FUSED_FIELDS) if fused is not None else None

    def fused_times(i: int) -> Fused | None:
        """A module node's share of kernels fused across modules (None without the table)."""
        if fused_of is None or i >= n_mod:
            return None
        return Fused(*fused_of[i])

    preorder: list[int] = []
    stack = list(reversed(shape.roots))
    while stack:
        i = stack.pop()
        preorder.append(i)
        stack.extend(reversed(children[i]))
    new_id = {old: new for new, old in enumerate(preorder)}
    nodes: list[ModuleNode] = []
    depth_of: dict[int, int] = {}
    for old in preorder:
        p = int(parent[old])
        depth = depth_of[old] = depth_of[p] + 1 if p >= 0 else 0
        if old < n_mod:
            hn = tree.nodes[old]
            info = table.modules.get(hn.qualified_name) if table else None
            kind, class_name, qual, path = NodeKind.MODULE, hn.class_name, hn.qualified_name, hn.path
            name = _short_name(hn, tree.source)
        elif old == bucket:
            info, kind, class_name = None, NodeKind.UNATTRIBUTED, ""
            name = qual = UNATTRIBUTED_NAME
            path = (UNATTRIBUTED_NAME,)
        else:
            info, kind, class_name = None, NodeKind.GROUP, ""
            name = names_of_groups[old]
            qual = f"{UNATTRIBUTED_NAME}/{name}"
            path = (UNATTRIBUTED_NAME, name)
        nodes.append(
            ModuleNode(
                id=new_id[old],
                parent=new_id[p] if p >= 0 else -1,
                children=tuple(new_id[c] for c in children[old]),
                depth=depth,
                kind=kind,
                name=name,
                class_name=class_name,
                qualified_name=qual,
                path=path,
                calls=float(calls[old]) if old < n_mod else 0.0,
                forward=times[old][FORWARD],
                backward=times[old][BACKWARD],
                other=times[old][OTHER],
                info=info,
                memory=memory_use[old],
                ops=ops_of[old],
                fused=fused_times(old),
            )
        )
    return nodes, new_id


def _phase_times(
    own: dict[str, np.ndarray], total: dict[str, np.ndarray], fields: Sequence[str]
) -> list[list[PhaseTimes]]:
    """PhaseTimes of every node and pass (``[node][pass]``) with the Times ``fields`` of
    ``own`` and ``total`` (``[metric][pass, node]``): each array is stacked into one
    ``[node, pass, field]`` block and turned into Python floats by one ``tolist``."""

    def block(values: dict[str, np.ndarray]) -> list[list[list[float]]]:
        rows: list[list[list[float]]] = (
            np.stack([values[k] for k in fields], axis=-1, dtype=np.float64).transpose(1, 0, 2).tolist()
        )
        return rows

    def times(values: list[float]) -> Times:
        return Times(*values) if leading else Times(**dict(zip(fields, values)))

    leading = tuple(fields) == _METRICS  # every field, in order: positional
    own_rows, total_rows = block(own), block(total)
    return [
        [PhaseTimes(own=times(o), total=times(t)) for o, t in zip(own_node, total_node)]
        for own_node, total_node in zip(own_rows, total_rows)
    ]


def _short_name(hn: HierarchyNode, source: Source) -> str:
    if source in (Source.TRACEPROF, Source.LIGHTNING):
        return hn.qualified_name.rsplit(".", 1)[-1] if hn.qualified_name else hn.class_name
    return hn.key


def optimizer_totals(nodes: list[ModuleNode]) -> PassTotals:
    """The work of the optimizer step groups, per pass."""
    optimizer = PassTotals()
    for n in nodes:
        if n.kind is NodeKind.GROUP and n.name.startswith(schema.OPTIMIZER_STEP_PREFIXES):
            optimizer = PassTotals(
                optimizer.forward + n.forward.total,
                optimizer.backward + n.backward.total,
                optimizer.other + n.other.total,
            )
    return optimizer
