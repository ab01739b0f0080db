"""Tree assembly: the result tree of module nodes, groups and the bucket, as ModuleNodes.

:func:`parents` receives the module tree and the "not in any module" groups and returns each
node's parent; :func:`tree_shape` orders the children for display (modules by first call,
groups biggest first); :func:`module_nodes` receives every node's sums (own and subtree totals
per pass, calls, memory, ops) and returns the :class:`ModuleNode` list in pre-order with the new
id of each node, the modules of the module table that no step called among them (zero time,
their parameters: :func:`uncalled_modules`); :func:`optimizer_totals` sums the optimizer step
groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

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
    is_optimizer_group,
)
from traceprof.trace import schema
from traceprof.trace.model import ModuleInfo, ModuleTable

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
    *,
    own: dict[str, np.ndarray],
    total: dict[str, np.ndarray],
    calls: np.ndarray,
    memory_use: Sequence[tuple[MemoryUse, ...]],
    ops_of: Sequence[tuple[OpStat, ...]],
    fused: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None,
) -> tuple[list[ModuleNode], dict[int, int]]:
    """The ModuleNodes in pre-order (parents before children, siblings in display order), and
    the new id of each node."""
    n_mod = groups.n_modules
    names_of_groups = groups.names()
    table = ctx.trace.metadata.module_table

    times = _phase_times(own, total, _METRICS)
    fused_of = _phase_times(*fused, FUSED_FIELDS) if fused is not None else None

    # modules of the table never called (an expert that got no token): zero time, their params
    uncalled = uncalled_modules(ctx.tree, table, groups.n_nodes)
    children, parent_of = _with_uncalled(shape, uncalled, groups.n_nodes)
    preorder = _preorder(shape.roots, children)
    new_id = {old: new for new, old in enumerate(preorder)}
    nodes: list[ModuleNode] = []
    depth_of: dict[int, int] = {}
    for old in preorder:
        p = parent_of[old]
        depth = depth_of[old] = depth_of[p] + 1 if p >= 0 else 0
        if old >= groups.n_nodes:
            kids = tuple(new_id[c] for c in children[old])  # uncalled submodules of an uncalled one
            nodes.append(
                _uncalled_node(uncalled[old - groups.n_nodes], new_id, old, p, depth, kids, fused_of)
            )
            continue
        nodes.append(
            ModuleNode(
                id=new_id[old],
                parent=new_id[p] if p >= 0 else -1,
                children=tuple(new_id[c] for c in children[old]),
                depth=depth,
                calls=float(calls[old]) if old < n_mod else 0.0,
                forward=times[old][FORWARD],
                backward=times[old][BACKWARD],
                other=times[old][OTHER],
                memory=memory_use[old],
                ops=ops_of[old],
                fused=_fused_times(fused_of, n_mod, old),
                **_named(ctx, groups, names_of_groups, old)._asdict(),
            )
        )
    return nodes, new_id


def _with_uncalled(
    shape: Shape, uncalled: list[Uncalled], n_nodes: int
) -> tuple[dict[int, list[int]], dict[int, int]]:
    """The children and the parent of each node, with the uncalled modules (ids ``n_nodes + k``)
    appended under their parents."""
    children = {i: list(c) for i, c in shape.children.items()}
    parent_of = {i: int(shape.parent[i]) for i in range(len(shape.parent))}
    for k, u in enumerate(uncalled):
        children[u.parent].append(n_nodes + k)
        children[n_nodes + k] = []
        parent_of[n_nodes + k] = u.parent
    return children, parent_of


def _preorder(roots: list[int], children: dict[int, list[int]]) -> list[int]:
    """The nodes under ``roots``, parents before children, siblings in the order given."""
    preorder: list[int] = []
    stack = list(reversed(roots))
    while stack:
        i = stack.pop()
        preorder.append(i)
        stack.extend(reversed(children[i]))
    return preorder


class _Named(NamedTuple):
    """What a node of the attribution is called: its kind, names, path and module table row
    (the :class:`ModuleNode` fields of those names, which it is given whole)."""

    info: ModuleInfo | None
    kind: NodeKind
    class_name: str
    name: str
    qualified_name: str
    path: tuple[str, ...]


def _named(ctx: Context, groups: Groups, names_of_groups: dict[int, str], old: int) -> _Named:
    """The names of node ``old``: a module, the "not in any module" bucket, or one of its groups."""
    tree, table = ctx.tree, ctx.trace.metadata.module_table
    if old < groups.n_modules:
        hn = tree.nodes[old]
        info = table.modules.get(hn.qualified_name) if table else None
        kind, name = NodeKind.MODULE, _short_name(hn, tree.source)
        if hn.group:  # compiled work without module information (analysis.compiled_regions)
            kind, name = NodeKind.COMPILED, hn.key
        return _Named(info, kind, hn.class_name, name, hn.qualified_name, hn.path)
    if old == groups.bucket:
        return _Named(
            None, NodeKind.UNATTRIBUTED, "", UNATTRIBUTED_NAME, UNATTRIBUTED_NAME, (UNATTRIBUTED_NAME,)
        )
    name = names_of_groups[old]
    return _Named(None, NodeKind.GROUP, "", name, f"{UNATTRIBUTED_NAME}/{name}", (UNATTRIBUTED_NAME, name))


def _fused_times(fused_of: list[list[PhaseTimes]] | None, n_mod: int, i: int) -> Fused | None:
    """A module node's share of kernels fused across modules (None without the table)."""
    if fused_of is None or i >= n_mod:
        return None
    return Fused(*fused_of[i])


class Uncalled(msgspec.Struct, frozen=True):
    """A module of the module table that no step called: where it goes in the tree."""

    parent: int  # the node (an attribution id, or ``first_id + k`` for the k-th uncalled)
    path: tuple[str, ...]
    info: ModuleInfo


def uncalled_modules(tree: Hierarchy, table: ModuleTable | None, first_id: int) -> list[Uncalled]:
    """The modules of the table (traceprof.capture's) that the tree lacks, because the trace
    never called them (MoE experts that got no token, an embedding used only through another
    name), each under its parent in the table's order; the k-th gets the id ``first_id + k``.
    Only for trees of traceprof's scopes, whose qualified names are the table's."""
    if table is None or tree.source is not Source.TRACEPROF:
        return []
    node_of: dict[str, int] = {}
    path_of: dict[int, tuple[str, ...]] = {}
    for hn in tree.nodes:
        if hn.qualified_name not in node_of:
            node_of[hn.qualified_name] = hn.id
            path_of[hn.id] = hn.path
    out: list[Uncalled] = []
    for name, info in table.modules.items():  # named_modules order: parents first
        if name in node_of or not name:
            continue
        up = node_of.get(name.rsplit(".", 1)[0] if "." in name else "")
        if up is None:
            continue
        node_of[name] = path_id = first_id + len(out)
        path_of[path_id] = path_of[up] + (name,)
        out.append(Uncalled(up, path_of[path_id], info))
    return out


def _uncalled_node(
    u: Uncalled,
    new_id: dict[int, int],
    old: int,
    parent: int,
    depth: int,
    children: tuple[int, ...],
    fused_of: list[list[PhaseTimes]] | None,
) -> ModuleNode:
    """The node of a module never called: no calls, no work, the table's row."""
    return ModuleNode(
        id=new_id[old],
        parent=new_id[parent],
        children=children,
        depth=depth,
        kind=NodeKind.MODULE,
        name=u.info.name.rsplit(".", 1)[-1],
        class_name=u.info.class_name,
        qualified_name=u.info.name,
        path=u.path,
        calls=0.0,
        forward=PhaseTimes(),
        backward=PhaseTimes(),
        other=PhaseTimes(),
        info=u.info,
        memory=(),
        ops=(),
        fused=Fused() if fused_of is not None else None,
    )


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


def optimizer_totals(nodes: list[ModuleNode], annotations: bool = False) -> PassTotals:
    """The work of the optimizer step, per pass: the optimizer step groups (outside the
    modules), and on a tree of annotations the outermost annotations that name the optimizer
    (``## optimizer ##``, ``Optimizer.step#...``; schema.is_optimizer_annotation)."""
    optimizer = PassTotals()
    counted: set[int] = set()
    for n in nodes:  # parents before children
        if n.parent >= 0 and n.parent in counted:
            counted.add(n.id)  # inside an annotation already counted
            continue
        group = is_optimizer_group(n)
        annotation = annotations and n.kind is NodeKind.MODULE and schema.is_optimizer_annotation(n.name)
        if group or annotation:
            counted.add(n.id)
            optimizer = PassTotals(
                optimizer.forward + n.forward.total,
                optimizer.backward + n.backward.total,
                optimizer.other + n.other.total,
            )
    return optimizer
