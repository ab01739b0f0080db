"""A diff shaped as ``traceprof analyze`` shapes a profile (docs/diff.md "Shaping"): siblings
ordered by a sort key, the largest children of each node kept and the rest folded into one
``(k more)`` node, nodes down to a depth, modules hidden by pattern.

A diff's numbers are its nodes' totals, so shaping never changes a shown number: a hidden or
folded node's change stays in its parent's (and in the ``(k more)`` node's). The sort keys are
those of :class:`~traceprof.result.transforms.SortKey`, each meaning the size of the *change*
(|Δ|, largest first) of its quantity: ``gpu`` the diff's time (GPU busy time, CPU time on
CPU-only traces; the default, the order :func:`~traceprof.compare.match.compare` gives),
``fwd``/``bwd``/``other`` that pass's time, ``kernels``, ``flops``, ``calls``; ``name`` by
name, ``order`` the order the modules first ran in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from traceprof.compare.nodes import DiffNode, PassDelta, Status
from traceprof.errors import OptionError
from traceprof.result import shaping
from traceprof.result.metric import TimeMetric
from traceprof.result.model import PASSES, NodeKind
from traceprof.result.shaping import Measure, SortKey

if TYPE_CHECKING:  # the diff imports this module: DiffProfile.shaped
    from traceprof.compare.model import DiffProfile

#: the default order of a diff's siblings: the largest change of the diff's time first
DEFAULT_SORT = SortKey.GPU


def sort_key(key: SortKey | str, metric: TimeMetric) -> SortKey:
    """``key`` as a :class:`SortKey` that a diff of ``metric`` can sort by; an OptionError
    (one line) names the known keys otherwise."""
    k = shaping.sort_key(key)
    if k is SortKey.CPU:
        if metric is not TimeMetric.CPU:
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
    out = []
    for p in PASSES:
        parts = [n.phase(p) for n in group]

        def total(field: str, parts: list[PassDelta] = parts) -> float:
            return sum(getattr(d, field) for d in parts)

        out.append(
            PassDelta(
                phase=p,
                base_us=total("base_us"),
                new_us=total("new_us"),
                spread_us=None,
                base_flops=total("base_flops"),
                new_flops=total("new_flops"),
                base_kernels=total("base_kernels"),
                new_kernels=total("new_kernels"),
                base_flop_per_s=None,
                new_flop_per_s=None,
                base_memory_peak_bytes=None,
                new_memory_peak_bytes=None,
                base_calls=total("base_calls"),
                new_calls=total("new_calls"),
            )
        )
    return tuple(out)


def _more_node(folded: list[DiffNode], new_id: int, parent: int, up: DiffNode | None, level: int) -> DiffNode:
    """The ``(k more)`` node of ``folded``, node ``new_id`` under the new node ``parent``
    (``up``)."""
    key_prefix = up.key + "/" if up is not None else ""
    return DiffNode(
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


def shape_diff(
    diff: DiffProfile,
    *,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = DEFAULT_SORT,
    ignore: tuple[str, ...] | list[str] = (),
) -> DiffProfile:
    """:meth:`DiffProfile.shaped <traceprof.compare.model.DiffProfile.shaped>`."""
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

    def more(folded: list[DiffNode], parent: int, level: int) -> int:
        """Append the ``(k more)`` node of ``folded`` under the new node ``parent``."""
        out.append(_more_node(folded, len(out), parent, out[parent] if parent >= 0 else None, level))
        return len(out) - 1

    # per node being placed: its new id and parent's, its children's new ids, its folded ones
    placing: dict[int, tuple[int, int, list[int], list[DiffNode]]] = {}
    parent_of: dict[int, int] = {}

    def enter(node: DiffNode, level: int) -> list[DiffNode]:
        new_id, parent = len(out), parent_of.pop(node.id)
        out.append(node)  # replaced once its children are known
        if parent >= 0:
            placing[out[parent].id][2].append(new_id)
        kept, folded = (
            arrange([nodes[c] for c in node.children], node) if depth is None or level < depth else ([], [])
        )
        placing[node.id] = (new_id, parent, [], folded)
        for c in kept:
            parent_of[c.id] = new_id
        return kept

    def place(root: DiffNode, parent: int) -> int:
        """Append ``root`` and its subtree, depth first without recursion (a tree is as deep as
        its traces make it); the root's new id."""
        root_id = len(out)
        parent_of[root.id] = parent
        for node, level, entering in shaping.depth_first([root], enter):
            if entering:
                continue
            new_id, up, kids, folded = placing.pop(node.id)
            if folded:
                unattributed = len([c for c in kids if out[c].kind is NodeKind.UNATTRIBUTED])
                kids.insert(len(kids) - unattributed, more(folded, new_id, level + 1))
            out[new_id] = replace(node, id=new_id, parent=up, children=tuple(kids), depth=level)
        return root_id

    kept_roots, more_roots = arrange([nodes[r] for r in diff.roots], None)
    roots = [place(r, -1) for r in kept_roots if r.kind is not NodeKind.UNATTRIBUTED]
    if more_roots:
        roots.append(more(more_roots, -1, 0))
    roots += [place(r, -1) for r in kept_roots if r.kind is NodeKind.UNATTRIBUTED]
    return replace(
        diff,
        nodes=tuple(out),
        roots=tuple(roots),
        full=diff.full or diff,
        overview=diff.overview or depth is not None or top is not None,
    )
