"""A job's modules shaped as ``traceprof analyze`` shapes a profile (:meth:`Job.shaped
<traceprof.job.model.Job.shaped>`): the modules shown, in the order shown."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from traceprof.job.modules import JobModule, spread_of
from traceprof.result import shaping
from traceprof.result.model import NodeKind
from traceprof.result.shaping import Measure, SortKey

if TYPE_CHECKING:
    from traceprof.job.model import Job


def _median(values: dict[int, float]) -> float:
    s = spread_of(values)
    return s.median if s is not None else 0.0


def _job_size(job: Job) -> Callable[[JobModule, Measure], float]:
    """A module's size by a sort key's measure: its median across the ranks."""

    def size(m: JobModule, measure: Measure) -> float:
        if measure.field == "calls":
            return _median({r: float(n.calls) for r, n in m.nodes.items()})
        return m.spread(measure.field or job.metric, measure.phase).median

    return size


def job_sort_value(job: Job, key: SortKey) -> Any:
    """The sort key of a module for ``key``: its median across the ranks, negated (largest
    first), or its name (None for ``order``: the order the modules are in)."""
    return shaping.sort_value(key, _job_size(job))


def _folded(job: Job, parent: JobModule | None, group: list[JobModule], depth: int) -> JobModule:
    """One ``(k more)`` module holding ``group``'s time on every rank."""
    parent_name = parent.qualified_name if parent is not None else None
    nodes = {}
    for rank in sorted({r for m in group for r in m.nodes}):
        members = [m.nodes[rank] for m in group if rank in m.nodes]
        nodes[rank] = shaping.more_node(
            members,
            id=-1,
            parent=-1,
            depth=depth,
            parent_name=parent_name,
            parent_path=members[0].path[:-1],
        )
    parent_key = parent.key if parent is not None else None
    return JobModule(
        key=(parent_key or ()) + (shaping.MORE,),
        parent=parent_key,
        depth=depth,
        kind=NodeKind.OTHERS,
        name=shaping.more_name(len(group)),
        class_name="",
        qualified_name=shaping.more_qualified_name(parent_name),
        nodes=nodes,
    )


def shape_job(
    job: Job,
    *,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = SortKey.ORDER,
    ignore: tuple[str, ...] | list[str] = (),
    all_rows: bool = True,
) -> Job:
    """The job with its modules shaped as ``traceprof analyze`` shapes a profile: siblings
    ordered by ``sort`` (by the median across the ranks, largest first), the ``top`` largest
    children of each module kept and the rest folded into one ``(k more)`` module, modules down
    to ``depth``, modules matching an ``ignore`` pattern hidden; with ``all_rows=False`` also the
    modules without time on any rank, counted in :attr:`~traceprof.job.model.Job.hidden_modules`.
    The ranks, step times and stragglers stay as they are. :meth:`Job.shaped
    <traceprof.job.model.Job.shaped>` is this function."""
    key = shaping.check_shape(depth, top, sort)
    hidden_by = shaping.ignore_matcher(ignore)
    order_fn = job_sort_value(job, key)
    top_fn = job_sort_value(job, shaping.size_key(key))
    known = {m.key for m in job.modules}
    children: dict[tuple[str, ...] | None, list[JobModule]] = {}
    for m in job.modules:
        children.setdefault(m.parent if m.parent in known else None, []).append(m)

    def subtree(m: JobModule, limit: int | None = None) -> int:
        """The modules of ``m``'s subtree (down to depth ``limit``), counted without recursion."""
        count, stack = 0, [m]
        while stack:
            x = stack.pop()
            count += limit is None or x.depth <= limit
            stack.extend(children.get(x.key, ()))
        return count

    hidden = 0

    def shown(parent: JobModule | None, level: int) -> list[JobModule]:
        """The children of ``parent`` (None: the roots) as shown at ``level``; those hidden for
        having no time are counted."""
        nonlocal hidden
        kids = children.get(parent.key if parent is not None else None, [])
        if parent is not None:
            kids = [c for c in kids if not hidden_by(c)]
        if not all_rows:  # a module without time on any rank: hidden, and counted
            timed = {c.key: any(t > 0 for t in c.times(job.metric).values()) for c in kids}
            hidden += sum(subtree(c, depth) for c in kids if not timed[c.key])
            kids = [c for c in kids if timed[c.key]]
        kept, folded = shaping.arrange(kids, order=order_fn, top=top, size=top_fn)
        more = [_folded(job, parent, folded, level)] if folded else []
        modules = [c for c in kept if c.kind is not NodeKind.UNATTRIBUTED]
        return modules + more + [c for c in kept if c.kind is NodeKind.UNATTRIBUTED]

    def below(m: JobModule, level: int) -> list[JobModule]:
        return shown(m, level + 1) if depth is None or level < depth else []

    # depth first without recursion: a tree is as deep as its traces make it
    out = [m for m, _, entering in shaping.depth_first(shown(None, 0), below) if entering]
    return replace(job, modules=tuple(out), hidden_modules=job.hidden_modules + hidden)
