"""The call sites and nodes of a compiled-kernel table's graphs, worked out once per graph: each
site's module and whether its kernel is fused across modules, which site's cost each node is,
the nodes decomposed from one op call, and a generated kernel's cost by module (from its nodes,
through the FLOP registry; forward ops a backward graph computes again reported apart)."""

from __future__ import annotations

from collections import Counter

import msgspec
from msgspec import UnsetType

from traceprof.analysis.compiled_args import node_cost
from traceprof.flops import Registry
from traceprof.flops.shapes import OpCost
from traceprof.trace import schema
from traceprof.trace.model import CompiledCall, CompiledGraph, CompiledNode, CompiledTable
from traceprof.trace.module_names import common_module


class Site(msgspec.Struct):
    """What one call site of a graph says, worked out once."""

    module: str  # relative to the compiled root ("": the root)
    known: tuple[str, ...]  # modules of its nodes with a module stack, sorted, each once
    fused: bool
    generated: bool  # a generated kernel: its cost comes from its nodes


def module_classes(table: CompiledTable) -> dict[str, str]:
    """Relative module name -> class name, from the nodes of every graph."""
    out: dict[str, str] = {}
    for graph in table.graphs.values():
        for node in graph.nodes.values():
            if node.module and node.module_class and node.module_from is not None:
                out.setdefault(node.module, node.module_class)
    return out


def call_site(graph: CompiledGraph, index: int, owner: dict[str, int], registry: Registry) -> Site:
    """A call site's module: the table's, except for a kernel of several nodes, whose module is
    the deepest common one of the nodes it computes itself (its own, see owners) that do work:
    views and reshapes (ops without cost) and the nodes of other calls it reads do not pull it
    up. Fused: those nodes belong to several modules."""
    call = graph.calls[index]
    stacked = [
        graph.nodes[n] for n in call.nodes if n in graph.nodes and graph.nodes[n].module_from is not None
    ]
    known = sorted({n.module for n in stacked})
    module = call.module or ""
    primary = _primary(call)
    if primary is None:
        working = sorted(
            {
                graph.nodes[n].module
                for n in call.nodes
                if n in graph.nodes
                and graph.nodes[n].module_from is not None
                and owner.get(n) == index
                and _does_work(graph.nodes[n].op, registry)
            }
        )
        if working:
            known, module = working, common_module(working)
    return Site(
        module=module,
        known=tuple(known),
        fused=primary is None and len(known) > 1,
        generated=call.kind in schema.COMPILED_GENERATED_KINDS,
    )


def _does_work(op: str, registry: Registry) -> bool:
    """A dispatcher op that is not registered as costing nothing (a view, a reshape)."""
    name = schema.compiled_op_event_name(op)
    if name is None:
        return False
    entry = registry.get(name)
    return entry is None or entry.has_cost


def owners(graph: CompiledGraph) -> dict[str, int]:
    """The call site whose cost each node is: an extern call's or a fallback's own node is its
    event's (an aten op with shapes, counted as in eager traces); any other node the first
    generated kernel listing it (a kernel's nodes include the nodes it reads that others
    computed: counted once)."""
    owner: dict[str, int] = {}
    for i, call in enumerate(graph.calls):
        if call.kind not in schema.COMPILED_GENERATED_KINDS:
            primary = _primary(call)
            for name in call.nodes if primary is None else (primary,):
                owner.setdefault(name, i)
    for i, call in enumerate(graph.calls):
        if call.kind in schema.COMPILED_GENERATED_KINDS:
            for name in call.nodes:
                owner.setdefault(name, i)
    return owner


def original_groups(graph: CompiledGraph, registry: Registry) -> dict[str, str]:
    """Groups of nodes decomposed from one op call (``original_group``) that are costed as that
    op: group -> the node that carries the op's arguments (``original_inputs``, on the node of
    its first output), for ops the registry has a formula for."""
    out: dict[str, str] = {}
    for name, node in graph.nodes.items():
        group, aten = _text(node.original_group), _text(node.original_aten)
        if group is None or aten is None or not isinstance(node.original_inputs, tuple):
            continue
        event = schema.compiled_op_event_name(aten)
        entry = registry.get(event) if event is not None else None
        if entry is not None and entry.formula is not None:
            out.setdefault(group, name)
    return out


def site_costs(
    graph: CompiledGraph,
    index: int,
    owner: dict[str, int],
    originals: dict[str, str],
    registry: Registry,
    sizes: dict[str, int],
    memo: dict[bytes, tuple[OpCost, int] | None],
    problems: Counter[str] | None = None,
) -> list[tuple[str, OpCost, int, float]]:
    """The cost of a generated kernel's nodes (those it owns, see owners) by module: (module,
    cost, family of its largest node, FLOPs of recomputed forward ops); ``sizes``: the run's
    symbolic sizes; ``memo``: the costs of the distinct (op, arguments) met so far.

    Forward ops that a backward graph computes again (nodes with a module stack of their own in
    a backward graph) cost nothing in it: their FLOPs are the last element, reported apart.

    The nodes of one decomposed op call (a group of ``originals``, see original_groups) count
    as that op, once: the node with its arguments takes the op's cost (its own when the op's
    arguments are not understood), the group's other nodes none."""
    by_module: dict[str, list[tuple[OpCost, int, float]]] = {}
    backward = graph.direction == schema.COMPILED_BACKWARD_DIRECTION
    for name in graph.calls[index].nodes:
        node = graph.nodes.get(name)
        if node is None or owner.get(name) != index:
            continue
        found = None
        group = _text(node.original_group)
        if group is not None and group in originals:
            if originals[group] != name:
                continue  # counted with its group's op
            inputs = node.original_inputs if isinstance(node.original_inputs, tuple) else ()
            original = CompiledNode(_text(node.original_aten) or node.op, inputs)
            signature = msgspec.json.encode((original.op, original.inputs))
            if signature not in memo:
                memo[signature] = node_cost(original, registry, sizes, problems)
            found = memo[signature]
        if found is None:
            signature = msgspec.json.encode((node.op, node.inputs))
            if signature not in memo:
                memo[signature] = node_cost(node, registry, sizes, problems)
            found = memo[signature]
        if found is None:
            continue
        cost, family = found
        if backward and node.module_from == schema.COMPILED_OWN_STACK:
            # a forward op the backward graph computes again: reported apart, not in the pass's
            # FLOPs, so that a module's FLOPs are the same compiled or not (model FLOPs)
            by_module.setdefault(node.module, []).append(
                (OpCost(0.0, 0.0, 0.0, 0.0, cost.dtype), family, cost.flops)
            )
            continue
        by_module.setdefault(node.module, []).append((cost, family, 0.0))
    out = []
    for module, parts in by_module.items():
        largest = max(parts, key=lambda p: p[0].flops)
        total = OpCost(
            sum(p[0].flops for p in parts),
            sum(p[0].macs for p in parts),
            sum(p[0].bytes_read for p in parts),
            sum(p[0].bytes_written for p in parts),
            largest[0].dtype,
        )
        out.append((module, total, largest[1], sum(p[2] for p in parts)))
    return out


def _primary(call: CompiledCall) -> str | None:
    """An extern call's own node (None: absent from the table, or null)."""
    return call.primary_node if isinstance(call.primary_node, str) else None


def _text(value: str | UnsetType | None) -> str | None:
    """A text field of a node that the table may leave out (UNSET) or give as null: None then."""
    return value if isinstance(value, str) else None
