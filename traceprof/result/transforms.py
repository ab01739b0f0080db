"""Profile -> profile functions: depth limit, sorting, top-N. Each returns a new, complete profile
whose invariants still hold (``self_check``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from traceprof.result import shaping
from traceprof.result.memory import MemoryPhase, MemoryUse
from traceprof.result.model import (
    PASSES,
    ZERO,
    Fused,
    ModuleNode,
    ModuleProfile,
    NodeKind,
    OpStat,
    PhaseTimes,
    Times,
    bounded,
)
from traceprof.result.shaping import Measure, SortKey

__all__ = ["SortKey", "ignore_modules", "limit_depth", "shaped", "sort_children", "top_children"]


def _shown_time(profile: ModuleProfile) -> Callable[[Times], float]:
    """The time the reports show: GPU busy time, or CPU time on a trace without GPU work."""
    if profile.has_gpu:
        return lambda t: t.gpu_busy_us
    return lambda t: t.cpu_us


def _size(profile: ModuleProfile) -> Callable[[ModuleNode, Measure], float]:
    """A node's size by a sort key's measure (:data:`shaping.MEASURES`)."""
    time = _shown_time(profile)

    def size(node: ModuleNode, measure: Measure) -> float:
        if measure.field == "calls":
            return node.calls
        times = node.total if measure.phase is None else node.phase(measure.phase).total
        return time(times) if measure.field is None else float(getattr(times, measure.field))

    return size


def sort_children(profile: ModuleProfile, key: SortKey | str) -> ModuleProfile:
    """Siblings ordered by ``key`` (largest first); the bucket stays last among roots."""
    fn = shaping.sort_value(shaping.sort_key(key), _size(profile))
    if fn is None:
        return profile

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        return shaping.arrange(children, order=fn)[0], [], False

    return _rebuild(profile, arrange)


def limit_depth(profile: ModuleProfile, depth: int) -> ModuleProfile:
    """Drop nodes deeper than ``depth`` (0 = roots only); their time stays in their ancestors,
    whose own time becomes their total."""
    shaping.check_depth(depth)

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        if node is not None and node.depth >= depth:
            return [], children, False
        return children, [], False

    return _rebuild(profile, arrange)


def top_children(profile: ModuleProfile, n: int, key: SortKey | str = SortKey.GPU) -> ModuleProfile:
    """Keep the ``n`` largest children of every node by ``key``, in their order; fold the rest
    into one "(k more)" node."""
    shaping.check_top(n)
    fn = shaping.sort_value(shaping.size_key(shaping.sort_key(key)), _size(profile))

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        kept, folded = shaping.arrange(children, top=n, size=fn)
        return kept, folded, True

    return _rebuild(profile, arrange)


def ignore_modules(profile: ModuleProfile, patterns: list[str] | tuple[str, ...]) -> ModuleProfile:
    """Hide module nodes whose class name or qualified name matches one of ``patterns``
    (``fnmatch``: ``Dropout``, ``*Norm*``, ``encoder.layer.*.attention``), with everything below
    them; like ``limit_depth``, their time stays in their parent's own time. A matching root
    stays (there is no parent to hold its time); the bucket and its groups are never hidden."""
    if not any(patterns):
        return profile
    hidden = shaping.ignore_matcher(patterns)

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        if node is None:
            return children, [], False
        return [c for c in children if not hidden(c)], [c for c in children if hidden(c)], False

    return _rebuild(profile, arrange)


def shaped(
    profile: ModuleProfile,
    *,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = SortKey.ORDER,
    ignore: tuple[str, ...] | list[str] = (),
) -> ModuleProfile:
    """The profile shaped as ``traceprof analyze`` shapes it, as ``Job.shaped`` and
    ``DiffProfile.shaped`` shape theirs: siblings ordered by ``sort``
    (:func:`sort_children`), the ``top`` largest children of each node kept and the rest folded
    (:func:`top_children`), nodes down to ``depth`` (:func:`limit_depth`), then modules matching
    an ``ignore`` pattern hidden (:func:`ignore_modules`)."""
    if sort != SortKey.ORDER:
        profile = sort_children(profile, sort)
    if top is not None:
        profile = top_children(profile, top, sort)
    if depth is not None:
        profile = limit_depth(profile, depth)
    if ignore:
        profile = ignore_modules(profile, ignore)
    return profile


def _summed_memory(group: list[ModuleNode]) -> tuple[MemoryUse, ...]:
    """The memory of a ``(k more)`` node: its group's per device, summed (peaks: the highest)."""
    by_device: dict[str, list[MemoryUse]] = {}
    for c in group:
        for m in c.memory:
            by_device.setdefault(m.device, []).append(m)

    def total(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if len(known) == len(values) else None

    out = []
    for device, uses in by_device.items():
        phases = []
        for i in range(3):
            ph = [u.phases[i] for u in uses]
            peaks = [p.peak_bytes for p in ph if p.peak_bytes is not None]
            phases.append(
                MemoryPhase(
                    allocated_bytes=sum(p.allocated_bytes for p in ph),
                    freed_bytes=sum(p.freed_bytes for p in ph),
                    peak_bytes=max(peaks) if peaks else None,
                    events=sum(p.events for p in ph),
                )
            )
        held = total([u.activation_bytes for u in uses])  # a node without memory holds none
        forward, backward, other = phases
        out.append(MemoryUse(device, forward, backward, other, held, held))
    return tuple(out)


def _with_folded_activations(
    memory: tuple[MemoryUse, ...], folded: list[ModuleNode]
) -> tuple[MemoryUse, ...]:
    """A node's memory with the activations of the children folded into it counted as its own
    (as their times become its own time); its subtree's activations are unchanged."""
    out = []
    for use in memory:
        if use.own_activation_bytes is None:
            out.append(use)
            continue
        inner = sum(m.activation_bytes or 0.0 for c in folded for m in c.memory if m.device == use.device)
        out.append(replace(use, own_activation_bytes=use.own_activation_bytes + inner))
    return tuple(out)


#: (kept children in order, folded children, whether the folded ones become an "others" node)
Arranged = tuple[list[ModuleNode], list[ModuleNode], bool]
Arrange = Callable[[ModuleNode | None, list[ModuleNode]], Arranged]


def _subtree_ops(nodes: tuple[ModuleNode, ...], group: list[ModuleNode]) -> list[OpStat]:
    """The ops rows of every node of the subtrees of ``group`` (their own ops, merged by the node
    that takes over their time)."""
    rows: list[OpStat] = []
    stack = [c.id for c in group]
    while stack:
        n = nodes[stack.pop()]
        rows.extend(n.ops)
        stack.extend(n.children)
    return rows


def _fused_of(group: list[ModuleNode]) -> Fused | None:
    """The fused work of ``group``'s subtrees, as a node's own (None: none has any)."""
    parts = [c.fused for c in group if c.fused is not None]
    return Fused(*shaping.summed_phases(parts)) if parts else None


def _others(
    nodes: tuple[ModuleNode, ...],
    folded: list[ModuleNode],
    *,
    id: int,
    parent: int,
    depth: int,
    parent_name: str | None,
    parent_path: tuple[str, ...],
) -> ModuleNode:
    """The ``(k more)`` node of the ``folded`` siblings: their time, ops, fused work and memory."""
    others = shaping.more_node(
        folded,
        id=id,
        parent=parent,
        depth=depth,
        parent_name=parent_name,
        parent_path=parent_path,
        ops=bounded(_subtree_ops(nodes, folded)),
        fused=_fused_of(folded),
    )
    return replace(others, memory=_summed_memory(folded))


def _absorbing(nodes: tuple[ModuleNode, ...], node: ModuleNode, folded: list[ModuleNode]) -> dict[str, Any]:
    """The fields of ``node`` that take in its ``folded`` children: their time, ops, fused work
    and activations become its own."""
    phases: dict[str, Any] = {}
    for p in PASSES:
        taken = ZERO
        for c in folded:
            taken = taken + c.phase(p).total
        phases[p.value] = PhaseTimes(own=node.phase(p).own + taken, total=node.phase(p).total)
    fused, inner = node.fused, _fused_of(folded)
    if fused is not None and inner is not None:
        fused = Fused(
            *(
                PhaseTimes(own=fused.phase(p).own + inner.phase(p).own, total=fused.phase(p).total)
                for p in PASSES
            )
        )
    return {
        **phases,
        "ops": bounded(list(node.ops) + _subtree_ops(nodes, folded)),
        "memory": _with_folded_activations(node.memory, folded),
        "fused": fused,
    }


def _rebuild(profile: ModuleProfile, arrange: Arrange) -> ModuleProfile:
    """Rebuild the node list. ``arrange(parent, children)`` returns (kept children in order,
    folded children, whether the folded ones become an "others" sibling node (True) or are
    absorbed into the parent's own time (False))."""
    nodes = profile.nodes
    out: list[ModuleNode] = []
    # per node being rebuilt: its new id, parent's new id, folded children, how to fold them,
    # and its children's new ids (the tree is walked without recursion: shaping.depth_first)
    placed: dict[int, tuple[int, int, list[ModuleNode], bool, list[int]]] = {}

    def enter(node: ModuleNode, new_parent: int, depth: int) -> list[ModuleNode]:
        new_id = len(out)
        out.append(node)  # placeholder, replaced in finish once the children are known
        kept, folded, as_sibling = arrange(node, [nodes[c] for c in node.children])
        placed[node.id] = (new_id, new_parent, folded, as_sibling, [])
        if new_parent >= 0:
            placed[out[new_parent].id][4].append(new_id)
        return kept

    def finish(node: ModuleNode, depth: int) -> int:
        new_id, new_parent, folded, as_sibling, child_ids = placed.pop(node.id)
        if folded and as_sibling:
            others = _others(
                nodes,
                folded,
                id=len(out),
                parent=new_id,
                depth=depth + 1,
                parent_name=node.qualified_name,
                parent_path=node.path,
            )
            out.append(others)
            child_ids.append(others.id)
        fields = _absorbing(nodes, node, folded) if folded and not as_sibling else {}
        out[new_id] = replace(
            node, id=new_id, parent=new_parent, children=tuple(child_ids), depth=depth, **fields
        )
        return new_id

    def emit(root: ModuleNode) -> int:
        """Rebuild ``root``'s subtree; its new id."""
        new_id = len(out)
        parent_of = {root.id: -1}

        def kids(node: ModuleNode, depth: int) -> list[ModuleNode]:
            kept = enter(node, parent_of.pop(node.id), depth)
            for c in kept:
                parent_of[c.id] = placed[node.id][0]
            return kept

        for node, depth, entering in shaping.depth_first([root], kids):
            if not entering:
                finish(node, depth)
        return new_id

    roots = [nodes[r] for r in profile.roots]
    kept_roots, folded_roots, _as_sibling = arrange(None, roots)
    root_ids = [emit(r) for r in kept_roots]
    if folded_roots:
        others = _others(
            nodes, folded_roots, id=len(out), parent=-1, depth=0, parent_name=None, parent_path=()
        )
        out.append(others)
        bucket = [i for i in root_ids if out[i].kind is NodeKind.UNATTRIBUTED]
        root_ids = [i for i in root_ids if i not in bucket] + [others.id] + bucket
    return replace(profile, nodes=tuple(out), roots=tuple(root_ids))
