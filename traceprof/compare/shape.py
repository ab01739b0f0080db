"""A diff shaped as ``traceprof analyze`` shapes a profile (docs/diff.md "Shaping"): siblings
ordered by a sort key, the largest children of each node kept and the rest folded into one
``(k more)`` node, nodes down to a depth, modules hidden by pattern.

A diff's numbers are its nodes' totals, so shaping never changes a shown number: a hidden or
folded node's change stays in its parent's (and in the ``(k more)`` node's). The sort keys are
those of :class:`~traceprof.result.transforms.SortKey`, each meaning the size of the *change*
(|Δ|, largest first) of its quantity: ``gpu`` the diff's time (GPU busy time, CPU time on
CPU-only traces; the default, the order :func:`~traceprof.compare.diff.compare` gives),
``fwd``/``bwd``/``other`` that pass's time, ``kernels``, ``flops``, ``calls``; ``name`` by
name, ``order`` the order the modules first ran in.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from traceprof.errors import OptionError
from traceprof.result.model import PASSES, NodeKind, Pass
from traceprof.result.transforms import SortKey

if TYPE_CHECKING:
    from traceprof.compare.diff import DiffNode, DiffProfile, PassDelta

#: the default order of a diff's siblings: the largest change of the diff's time first
DEFAULT_SORT = SortKey.GPU


def sort_key(key: SortKey | str, metric: str) -> SortKey:
    """``key`` as a :class:`SortKey` that a diff of ``metric`` can sort by; an OptionError
    (one line) names the known keys otherwise."""
    try:
        k = SortKey(key)
    except ValueError:
        raise OptionError(
            f"unknown sort key {key!r} (known: {', '.join(k.value for k in SortKey)})"
        ) from None
    if k is SortKey.CPU:
        if metric != "cpu_us":
            raise OptionError(
                "--sort cpu: this diff compares GPU busy time, not CPU time; sort it by gpu, fwd, "
                "bwd, other, kernels, calls, flops, name or order"
            )
        return SortKey.GPU
    return k


def _change(node: DiffNode, field: str) -> float:
    return abs(sum(getattr(p, f"new_{field}") - getattr(p, f"base_{field}") for p in node.passes))


def node_sort_value(key: SortKey) -> Callable[[DiffNode], float | str | int]:
    """The sort key of a node for ``key`` (ascending: negated sizes, largest change first)."""
    if key is SortKey.NAME:
        return lambda n: n.name
    if key is SortKey.ORDER:
        return lambda n: n.order
    if key in (SortKey.FORWARD, SortKey.BACKWARD, SortKey.OTHER):
        p = {SortKey.FORWARD: Pass.FORWARD, SortKey.BACKWARD: Pass.BACKWARD, SortKey.OTHER: Pass.OTHER}[key]
        return lambda n: -abs(n.phase(p).delta_us)
    field = {SortKey.KERNELS: "kernels", SortKey.FLOPS: "flops", SortKey.CALLS: "calls"}.get(key)
    if field is not None:
        return lambda n: -_change(n, field)
    return lambda n: -abs(n.delta_us)


def _hidden(node: DiffNode, patterns: tuple[str, ...]) -> bool:
    if node.kind is not NodeKind.MODULE:
        return False
    names = (node.class_name, node.qualified_name, node.name)
    return any(fnmatch.fnmatchcase(n, p) for n in names if n for p in patterns)


def _summed(group: list[DiffNode]) -> tuple[PassDelta, ...]:
    """The passes of ``group`` added up (no spread, rate or memory peak: those do not add)."""
    from traceprof.compare.diff import PassDelta

    out = []
    for p in PASSES:
        parts = [n.phase(p) for n in group]

        def total(field: str, parts: list[PassDelta] = parts) -> float:
            return sum(getattr(d, field) for d in parts)

        out.append(
            PassDelta(
                p,
                total("base_us"),
                total("new_us"),
                None,
                total("base_flops"),
                total("new_flops"),
                total("base_kernels"),
                total("new_kernels"),
                None,
                None,
                None,
                None,
                total("base_calls"),
                total("new_calls"),
            )
        )
    return tuple(out)


def shape_diff(
    diff: DiffProfile,
    *,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = DEFAULT_SORT,
    ignore: tuple[str, ...] | list[str] = (),
) -> DiffProfile:
    """:meth:`DiffProfile.shaped <traceprof.compare.diff.DiffProfile.shaped>`."""
    from traceprof.compare.diff import DiffNode, Status

    if depth is not None and depth < 0:
        raise OptionError(f"--depth must be 0 or more, not {depth}")
    if top is not None and top < 1:
        raise OptionError(f"--top must be 1 or more, not {top}")
    key = sort_key(sort, diff.metric)
    order_fn = node_sort_value(key)
    top_fn = node_sort_value(SortKey.GPU if key in (SortKey.ORDER, SortKey.NAME) else key)
    patterns = tuple(p for p in ignore if p)
    nodes = diff.nodes
    out: list[DiffNode] = []

    def arrange(children: list[DiffNode], parent: DiffNode | None) -> tuple[list[DiffNode], list[DiffNode]]:
        if parent is not None:
            children = [c for c in children if not _hidden(c, patterns)]
        fixed = [c for c in children if c.kind is NodeKind.UNATTRIBUTED]  # the bucket: last
        movable = sorted((c for c in children if c.kind is not NodeKind.UNATTRIBUTED), key=order_fn)
        folded: list[DiffNode] = []
        if top is not None and len(movable) > top:
            keep = {c.id for c in sorted(movable, key=top_fn)[:top]}
            folded = [c for c in movable if c.id not in keep]
            movable = [c for c in movable if c.id in keep]
        return movable + fixed, folded

    def place(node: DiffNode | None, folded: list[DiffNode], parent: int, level: int) -> int:
        """Append ``node`` (or, for None, the ``(k more)`` node of ``folded``) and its subtree."""
        new_id = len(out)
        if node is None:
            up = out[parent] if parent >= 0 else None
            key_prefix = up.key + "/" if up is not None else ""
            out.append(
                DiffNode(
                    id=new_id,
                    parent=parent,
                    children=(),
                    depth=level,
                    key=f"{key_prefix}(more)",
                    name=f"({len(folded)} more)",
                    class_name="",
                    qualified_name=(up.qualified_name + "/(more)") if up is not None else "(more)",
                    kind=NodeKind.OTHERS,
                    status=Status.MATCHED,
                    passes=_summed(folded),
                    inside=(),
                    order=min(c.order for c in folded),
                )
            )
            return new_id
        out.append(node)  # replaced once its children are known
        kids: list[int] = []
        if depth is None or level < depth:
            kept, more = arrange([nodes[c] for c in node.children], node)
            kids = [place(c, [], new_id, level + 1) for c in kept]
            if more:
                kids.insert(
                    len([c for c in kept if c.kind is not NodeKind.UNATTRIBUTED]),
                    place(None, more, new_id, level + 1),
                )
        out[new_id] = replace(node, id=new_id, parent=parent, children=tuple(kids), depth=level)
        return new_id

    kept_roots, more_roots = arrange([nodes[r] for r in diff.roots], None)
    roots = [place(r, [], -1, 0) for r in kept_roots if r.kind is not NodeKind.UNATTRIBUTED]
    if more_roots:
        roots.append(place(None, more_roots, -1, 0))
    roots += [place(r, [], -1, 0) for r in kept_roots if r.kind is NodeKind.UNATTRIBUTED]
    return replace(
        diff,
        nodes=tuple(out),
        roots=tuple(roots),
        full=diff.full or diff,
        overview=diff.overview or depth is not None or top is not None,
    )
