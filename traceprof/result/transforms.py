"""Profile -> profile functions: depth limit, sorting, top-N. Each returns a new, complete profile
whose invariants still hold (``self_check``)."""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Callable

from msgspec.structs import replace

from traceprof.errors import OptionError
from traceprof.result.model import (
    PASSES,
    ZERO,
    Fused,
    ModuleNode,
    ModuleProfile,
    NodeKind,
    OpStat,
    Pass,
    PhaseTimes,
    Times,
    bounded,
)


class SortKey(str, enum.Enum):
    ORDER = "order"  # first-call order (as the model runs)
    GPU = "gpu"  # the report's time (GPU busy time; CPU time on CPU-only traces), all passes
    FORWARD = "fwd"  # the report's time in the forward pass
    BACKWARD = "bwd"
    OTHER = "other"  # neither forward nor backward (Pass.OTHER)
    CPU = "cpu"
    KERNELS = "kernels"
    CALLS = "calls"
    FLOPS = "flops"  # FLOPs of all passes
    NAME = "name"


def _shown_time(profile: ModuleProfile) -> Callable[[Times], float]:
    """The time the reports show: GPU busy time, or CPU time on a trace without GPU work."""
    if profile.has_gpu:
        return lambda t: t.gpu_busy_us
    return lambda t: t.cpu_us


#: a sort key of nodes: a number (negated: largest first) or a name
NodeKey = Callable[[ModuleNode], float | str]


def _keys(profile: ModuleProfile) -> dict[SortKey, NodeKey]:
    time = _shown_time(profile)

    def in_pass(p: Pass) -> NodeKey:
        return lambda n: -time(n.phase(p).total)

    return {
        SortKey.GPU: lambda n: -time(n.total),
        SortKey.FORWARD: in_pass(Pass.FORWARD),
        SortKey.BACKWARD: in_pass(Pass.BACKWARD),
        SortKey.OTHER: in_pass(Pass.OTHER),
        SortKey.CPU: lambda n: -n.total.cpu_us,
        SortKey.KERNELS: lambda n: -n.total.kernels,
        SortKey.CALLS: lambda n: -n.calls,
        SortKey.FLOPS: lambda n: -n.total.flops,
        SortKey.NAME: lambda n: n.name,
    }


def _key(key: SortKey | str) -> SortKey:
    try:
        return SortKey(key)
    except ValueError:
        raise OptionError(
            f"unknown sort key {key!r} (known: {', '.join(k.value for k in SortKey)})"
        ) from None


def sort_children(profile: ModuleProfile, key: SortKey | str) -> ModuleProfile:
    """Siblings ordered by ``key`` (largest first); the bucket stays last among roots."""
    key = _key(key)
    if key is SortKey.ORDER:
        return profile
    fn = _keys(profile)[key]

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        fixed = [c for c in children if c.kind is NodeKind.UNATTRIBUTED]
        movable = sorted((c for c in children if c.kind is not NodeKind.UNATTRIBUTED), key=fn)
        return movable + fixed, [], False

    return _rebuild(profile, arrange)


def limit_depth(profile: ModuleProfile, depth: int) -> ModuleProfile:
    """Drop nodes deeper than ``depth`` (0 = roots only); their time stays in their ancestors,
    whose own time becomes their total."""
    if depth < 0:
        raise OptionError(f"--depth must be 0 or more, not {depth}")

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        if node is not None and node.depth >= depth:
            return [], children, False
        return children, [], False

    return _rebuild(profile, arrange)


def top_children(profile: ModuleProfile, n: int, key: SortKey | str = SortKey.GPU) -> ModuleProfile:
    """Keep the ``n`` largest children of every node by ``key``, in their order; fold the rest
    into one "(k more)" node."""
    if n < 1:
        raise OptionError(f"--top must be 1 or more, not {n}")
    key = _key(key)
    fn = _keys(profile)[SortKey.GPU if key in (SortKey.ORDER, SortKey.NAME) else key]

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        movable = [c for c in children if c.kind is not NodeKind.UNATTRIBUTED]
        if len(movable) <= n:
            return children, [], False
        keep = {id(c) for c in sorted(movable, key=fn)[:n]}
        kept = [c for c in children if id(c) in keep or c.kind is NodeKind.UNATTRIBUTED]
        folded = [c for c in movable if id(c) not in keep]
        return kept, folded, True

    return _rebuild(profile, arrange)


def ignore_modules(profile: ModuleProfile, patterns: list[str] | tuple[str, ...]) -> ModuleProfile:
    """Hide module nodes whose class name or qualified name matches one of ``patterns``
    (``fnmatch``: ``Dropout``, ``*Norm*``, ``encoder.layer.*.attention``), with everything below
    them; like ``limit_depth``, their time stays in their parent's own time. A matching root
    stays (there is no parent to hold its time); the bucket and its groups are never hidden."""
    patterns = tuple(p for p in patterns if p)
    if not patterns:
        return profile

    def hidden(node: ModuleNode) -> bool:
        if node.kind is not NodeKind.MODULE:
            return False
        names = (node.class_name, node.qualified_name, node.name)
        return any(fnmatch.fnmatchcase(n, p) for n in names if n for p in patterns)

    def arrange(node: ModuleNode | None, children: list[ModuleNode]) -> Arranged:
        if node is None:
            return children, [], False
        return [c for c in children if not hidden(c)], [c for c in children if hidden(c)], False

    return _rebuild(profile, arrange)


#: (kept children in order, folded children, whether the folded ones become an "others" node)
Arranged = tuple[list[ModuleNode], list[ModuleNode], bool]
Arrange = Callable[[ModuleNode | None, list[ModuleNode]], Arranged]


def _rebuild(profile: ModuleProfile, arrange: Arrange) -> ModuleProfile:
    """Rebuild the node list. ``arrange(parent, children)`` returns (kept children in order,
    folded children, whether the folded ones become an "others" sibling node (True) or are
    absorbed into the parent's own time (False))."""
    nodes = profile.nodes
    out: list[ModuleNode] = []

    def sum_phase(group: list[ModuleNode], phase: Pass) -> PhaseTimes:
        total = ZERO
        for c in group:
            total = total + c.phase(phase).total
        return PhaseTimes(own=total, total=total)

    def summed(group: list[ModuleNode]) -> tuple[PhaseTimes, PhaseTimes, PhaseTimes]:
        """The forward, backward and other pass of ``group`` summed."""
        return (sum_phase(group, Pass.FORWARD), sum_phase(group, Pass.BACKWARD), sum_phase(group, Pass.OTHER))

    def subtree_ops(group: list[ModuleNode]) -> list[OpStat]:
        """The ops rows of every node of the subtrees of ``group`` (their own ops, merged by
        the node that takes over their time)."""
        rows: list[OpStat] = []
        stack = [c.id for c in group]
        while stack:
            n = nodes[stack.pop()]
            rows.extend(n.ops)
            stack.extend(n.children)
        return rows

    def fused_of(group: list[ModuleNode]) -> Fused | None:
        """The fused work of ``group``'s subtrees, as a node's own (None: none has any)."""
        parts = [c.fused for c in group if c.fused is not None]
        if not parts:
            return None
        summed = []
        for p in PASSES:
            total = ZERO
            for f in parts:
                total = total + f.phase(p).total
            summed.append(PhaseTimes(own=total, total=total))
        return Fused(*summed)

    def emit(node: ModuleNode, new_parent: int, depth: int) -> int:
        new_id = len(out)
        out.append(node)  # placeholder, replaced below once children are known
        kids = [nodes[c] for c in node.children]
        kept, folded, as_sibling = arrange(node, kids)
        child_ids = [emit(c, new_id, depth + 1) for c in kept]
        phases = {p.value: node.phase(p) for p in PASSES}
        if folded and as_sibling:
            forward, backward, other = summed(folded)
            others = ModuleNode(
                id=len(out),
                parent=new_id,
                children=(),
                depth=depth + 1,
                kind=NodeKind.OTHERS,
                name=f"({len(folded)} more)",
                class_name="",
                qualified_name=node.qualified_name + "/(more)",
                path=node.path + ("(more)",),
                calls=0.0,
                forward=forward,
                backward=backward,
                other=other,
                ops=bounded(subtree_ops(folded)),
                fused=fused_of(folded),
            )
            out.append(others)
            child_ids.append(others.id)
        ops = node.ops
        fused = node.fused
        if folded and not as_sibling:
            phases = {
                p.value: PhaseTimes(
                    own=node.phase(p).own + sum_phase(folded, p).total, total=node.phase(p).total
                )
                for p in PASSES
            }
            ops = bounded(list(node.ops) + subtree_ops(folded))
            inner = fused_of(folded)
            if fused is not None and inner is not None:
                fused = Fused(
                    *(
                        PhaseTimes(own=fused.phase(p).own + inner.phase(p).own, total=fused.phase(p).total)
                        for p in PASSES
                    )
                )
        out[new_id] = replace(
            node,
            id=new_id,
            parent=new_parent,
            children=tuple(child_ids),
            depth=depth,
            ops=ops,
            fused=fused,
            **phases,
        )
        return new_id

    roots = [nodes[r] for r in profile.roots]
    kept_roots, folded_roots, _as_sibling = arrange(None, roots)
    root_ids = [emit(r, -1, 0) for r in kept_roots]
    if folded_roots:
        forward, backward, other = summed(folded_roots)
        others = ModuleNode(
            id=len(out),
            parent=-1,
            children=(),
            depth=0,
            kind=NodeKind.OTHERS,
            name=f"({len(folded_roots)} more)",
            class_name="",
            qualified_name="(more)",
            path=("(more)",),
            calls=0.0,
            forward=forward,
            backward=backward,
            other=other,
            ops=bounded(subtree_ops(folded_roots)),
            fused=fused_of(folded_roots),
        )
        out.append(others)
        bucket = [i for i in root_ids if out[i].kind is NodeKind.UNATTRIBUTED]
        root_ids = [i for i in root_ids if i not in bucket] + [others.id] + bucket
    return replace(profile, nodes=tuple(out), roots=tuple(root_ids))
