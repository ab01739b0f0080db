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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from traceprof.errors import OptionError
from traceprof.result import shaping
from traceprof.result.model import PASSES, NodeKind
from traceprof.result.shaping import Measure, SortKey

if TYPE_CHECKING:
    from traceprof.compare.diff import DiffNode, DiffProfile, PassDelta

#: the default order of a diff's siblings: the largest change of the diff's time first
DEFAULT_SORT = SortKey.GPU


def sort_key(key: SortKey | str, metric: str) -> SortKey:
    """``key`` as a :class:`SortKey` that a diff of ``metric`` can sort by; an OptionError
    (one line) names the known keys otherwise."""
    k = shaping.sort_key(key)
    if k is SortKey.CPU:
        if metric != "cpu_us":
            raise OptionError(
                "--sort cpu: this diff compares GPU busy time, not CPU time; sort it by gpu, fwd, "
                "bwd, other, kernels, calls, flops, name or order"
            )
        return SortKey.GPU
    return k


def _sides(node: DiffNode, measure: Measure) -> tuple[float, float]:
    """The base and the new amount of what ``measure`` measures (the view's time: the diff's)."""
    if measure.phase is not None:
        d = node.phase(measure.phase)
        return d.base_us, d.new_us
    if measure.field is None or measure.field == "cpu_us":  # cpu: a CPU-only diff's time
        return node.base_us, node.new_us
    base = sum(getattr(p, f"base_{measure.field}") for p in node.passes)
    return base, sum(getattr(p, f"new_{measure.field}") for p in node.passes)


def _change(node: DiffNode, measure: Measure) -> float:
    """The size of the change of what ``measure`` measures."""
    if measure.phase is not None:
        return abs(node.phase(measure.phase).delta_us)
    if measure.field is None or measure.field == "cpu_us":
        return abs(node.delta_us)
    field = measure.field
    return abs(sum(getattr(p, f"new_{field}") - getattr(p, f"base_{field}") for p in node.passes))


#: the diff's time: what equal changes of another quantity fall back to
_TIME = shaping.MEASURES[SortKey.GPU]


def _ties(node: DiffNode, measure: Measure) -> tuple[float, ...]:
    """Equal changes: the larger node first (the larger of its base and new amount), then (for
    another quantity than the diff's time) the larger change and size of the diff's time, then
    the order the modules first ran in."""
    if measure == _TIME:
        return -max(_sides(node, measure)), node.order
    return -max(_sides(node, measure)), -_change(node, _TIME), -max(_sides(node, _TIME)), node.order


def node_sort_value(key: SortKey) -> Callable[[DiffNode], Any]:
    """The sort key of a node for ``key`` (ascending: the largest change first, equal changes
    as :func:`_ties` orders them)."""
    fn = shaping.sort_value(key, _change, order=lambda n: n.order, ties=_ties)
    assert fn is not None  # order has one
    return fn


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

    shaping.check_depth(depth)
    shaping.check_top(top)
    key = sort_key(sort, diff.metric)
    order_fn = node_sort_value(key)
    top_fn = node_sort_value(shaping.size_key(key))
    hidden = shaping.ignore_matcher(ignore)
    nodes = diff.nodes
    out: list[DiffNode] = []

    def arrange(children: list[DiffNode], parent: DiffNode | None) -> tuple[list[DiffNode], list[DiffNode]]:
        if parent is not None:
            children = [c for c in children if not hidden(c)]
        return shaping.arrange(children, order=order_fn, top=top, size=top_fn)

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
                    key=key_prefix + shaping.MORE,
                    name=shaping.more_name(len(folded)),
                    class_name="",
                    qualified_name=shaping.more_qualified_name(up.qualified_name if up is not None else None),
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
