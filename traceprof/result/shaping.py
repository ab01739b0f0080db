"""The rules that shape a tree of modules for display, written once and used by a profile
(:mod:`traceprof.result.transforms`), a diff (:mod:`traceprof.compare.shape`), a job
(:meth:`Job.shaped <traceprof.job.model.Job.shaped>`) and the ops rows
(:mod:`traceprof.render.ops`): the sort keys and their one-line error, the checks of ``--depth``
and ``--top``, the ``--ignore`` matcher, what each sort key measures, and the fold of the
smallest siblings into one ``(k more)`` node.

``--top N`` keeps the N largest siblings by the sort key (by the view's time for ``name`` and
``order``); ``--sort`` orders what is kept; the ``(not in any module)`` bucket is never folded
and stays last.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from traceprof.errors import OptionError
from traceprof.result.model import PASSES, ZERO, Fused, ModuleNode, Named, NodeKind, OpStat, Pass, PhaseTimes


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


def sort_key(key: SortKey | str) -> SortKey:
    """``key`` as a :class:`SortKey`; a one-line OptionError naming the known keys otherwise."""
    try:
        return SortKey(key)
    except ValueError:
        raise OptionError(
            f"unknown sort key {key!r} (known: {', '.join(k.value for k in SortKey)})"
        ) from None


def check_depth(depth: int | None) -> None:
    if depth is not None and depth < 0:
        raise OptionError(f"--depth must be 0 or more, not {depth}")


def check_top(top: int | None) -> None:
    if top is not None and top < 1:
        raise OptionError(f"--top must be 1 or more, not {top}")


def check_shape(depth: int | None, top: int | None, sort: SortKey | str) -> SortKey:
    """The shaping options' one-line errors, before any work; the sort key."""
    check_depth(depth)
    check_top(top)
    return sort_key(sort)


def size_key(key: SortKey) -> SortKey:
    """The key ``--top`` keeps the largest siblings by: ``key``, or the view's time for the keys
    that are no size (``name``, ``order``)."""
    return SortKey.GPU if key in (SortKey.ORDER, SortKey.NAME) else key


class Measure(NamedTuple):
    """What a sort key by size measures of a node."""

    phase: Pass | None  # None: all passes
    field: str | None  # a :class:`Times` field, or "calls"; None: the view's time


MEASURES: dict[SortKey, Measure] = {
    SortKey.GPU: Measure(None, None),
    SortKey.FORWARD: Measure(Pass.FORWARD, None),
    SortKey.BACKWARD: Measure(Pass.BACKWARD, None),
    SortKey.OTHER: Measure(Pass.OTHER, None),
    SortKey.CPU: Measure(None, "cpu_us"),
    SortKey.KERNELS: Measure(None, "kernels"),
    SortKey.CALLS: Measure(None, "calls"),
    SortKey.FLOPS: Measure(None, "flops"),
}


class Shaped(Named, Protocol):
    """What shaping reads of a node of any kind (profile, diff or job node): its names (see
    :class:`~traceprof.result.model.Named`) and kind."""

    @property
    def kind(self) -> NodeKind: ...


N = TypeVar("N", bound=Shaped)
T = TypeVar("T")


def sort_value(
    key: SortKey,
    size: Callable[[N, Measure], float],
    *,
    order: Callable[[N], Any] | None = None,
    ties: Callable[[N, Measure], tuple[Any, ...]] | None = None,
) -> Callable[[N], Any] | None:
    """The ascending sort key of a node for ``key``: ``size`` of what the key measures, negated
    (largest first), then ``ties``; its name; or ``order`` (None: keep the given order)."""
    if key is SortKey.ORDER:
        return order
    if key is SortKey.NAME:
        return lambda n: n.name
    measure = MEASURES[key]
    if ties is None:
        return lambda n: -size(n, measure)
    return lambda n: (-size(n, measure), *ties(n, measure))


def ignore_matcher(patterns: Iterable[str]) -> Callable[[Shaped], bool]:
    """Whether ``--ignore`` hides a node: a module whose class name, qualified name or name
    matches one of ``patterns`` (``fnmatch``: ``Dropout``, ``*Norm*``,
    ``encoder.layer.*.attention``). The bucket, its groups and ``(k more)`` nodes never match."""
    kept = tuple(p for p in patterns if p)

    def hidden(node: Shaped) -> bool:
        if not kept or node.kind is not NodeKind.MODULE:
            return False
        names = (node.class_name, node.qualified_name, node.name)
        return any(fnmatch.fnmatchcase(n, p) for n in names if n for p in kept)

    return hidden


def depth_first(
    roots: Iterable[T], children: Callable[[T, int], Iterable[T]]
) -> Iterator[tuple[T, int, bool]]:
    """Every item of the trees under ``roots``, depth first, without recursion (a tree is as
    deep as its trace makes it): ``(item, level, True)`` before its subtree, then
    ``(item, level, False)`` after it. ``children(item, level)`` is called once the caller has
    handled the first, so that it may use what the caller did then (the item's new id)."""
    stack: list[tuple[T, int, Iterator[T] | None]] = [(r, 0, None) for r in reversed(list(roots))]
    while stack:
        item, level, pending = stack[-1]
        if pending is None:
            yield item, level, True
            pending = iter(children(item, level))
            stack[-1] = (item, level, pending)
        child = next(pending, _DONE)
        if child is _DONE:
            stack.pop()
            yield item, level, False
        else:
            stack.append((child, level + 1, None))


_DONE: Any = object()


def keep_largest(items: Sequence[T], n: int, size: Callable[[T], Any]) -> tuple[list[T], list[T]]:
    """The ``n`` largest of ``items`` (the first ``n`` by the ascending key ``size``), in the
    order given, and the others, in the order given."""
    if len(items) <= n:
        return list(items), []
    keep = set(sorted(range(len(items)), key=lambda i: size(items[i]))[:n])
    return [x for i, x in enumerate(items) if i in keep], [x for i, x in enumerate(items) if i not in keep]


def arrange(
    children: Sequence[N],
    *,
    order: Callable[[N], Any] | None = None,
    top: int | None = None,
    size: Callable[[N], Any] | None = None,
) -> tuple[list[N], list[N]]:
    """Siblings as shown: the modules ordered by ``order`` (None: as given), the ``top`` largest
    by ``size`` kept, then the bucket; and the siblings to fold into one ``(k more)`` node (in
    that order), which goes after the kept modules, before the bucket."""
    fixed = [c for c in children if c.kind is NodeKind.UNATTRIBUTED]
    movable = [c for c in children if c.kind is not NodeKind.UNATTRIBUTED]
    if order is not None:
        movable = sorted(movable, key=order)
    folded: list[N] = []
    if top is not None:
        assert size is not None, "a top needs a size"
        movable, folded = keep_largest(movable, top, size)
    return movable + fixed, folded


#: the last part of the path and qualified name of a ``(k more)`` node
MORE = "(more)"


def more_name(folded: int) -> str:
    """The name of the node that holds ``folded`` siblings."""
    return f"({folded} more)"


def more_qualified_name(parent: str | None) -> str:
    """The qualified name of the ``(k more)`` node under the node named ``parent`` (None: a
    root)."""
    return f"{parent}/{MORE}" if parent is not None else MORE


class _Phased(Protocol):
    def phase(self, p: Pass | str) -> PhaseTimes: ...


def summed_phases(group: Iterable[_Phased]) -> tuple[PhaseTimes, PhaseTimes, PhaseTimes]:
    """The forward, backward and other pass of ``group``'s totals (nodes, or their fused work)
    summed, as one node's own."""
    nodes = list(group)
    out = []
    for p in PASSES:
        total = ZERO
        for n in nodes:
            total = total + n.phase(p).total
        out.append(PhaseTimes(own=total, total=total))
    return out[0], out[1], out[2]


def more_node(
    group: Sequence[ModuleNode],
    *,
    id: int,
    parent: int,
    depth: int,
    parent_name: str | None,
    parent_path: tuple[str, ...],
    ops: tuple[OpStat, ...] = (),
    fused: Fused | None = None,
) -> ModuleNode:
    """The ``(k more)`` node holding ``group``'s time (their totals, as its own) under the node
    ``parent_name`` at ``parent_path`` (None and (): a root), at index ``id`` of its profile."""
    forward, backward, other = summed_phases(group)
    return ModuleNode(
        id=id,
        parent=parent,
        children=(),
        depth=depth,
        kind=NodeKind.OTHERS,
        name=more_name(len(group)),
        class_name="",
        qualified_name=more_qualified_name(parent_name),
        path=parent_path + (MORE,),
        calls=0.0,
        forward=forward,
        backward=backward,
        other=other,
        ops=ops,
        fused=fused,
    )
