"""A module matched across a job's ranks (:class:`JobModule`), the spread of one quantity across
the ranks (:class:`Spread`), and a node's own part of its rank's step time.

Below the job's model, its records and its shaping, which all read these."""

from __future__ import annotations

import msgspec

from traceprof.analysis.labels import BETWEEN_OPS_GROUP
from traceprof.result.model import ModuleNode, NodeKind, OpKind, Pass
from traceprof.trace import schema


class Spread(msgspec.Struct, frozen=True):
    """One quantity across the ranks that have it."""

    min: float
    median: float
    max: float
    spread: float  # max - min
    slowest_rank: int  # the rank with the max (the lowest such rank on ties)
    imbalance: float | None  # max / median; None when the median is 0


def spread_of(values: dict[int, float]) -> Spread | None:
    """The spread of ``values`` (rank -> value); None for no ranks."""
    if not values:
        return None
    ranks = sorted(values)
    v = sorted(values[r] for r in ranks)
    n = len(v)
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    hi = v[-1]
    slowest = next(r for r in ranks if values[r] == hi)
    return Spread(v[0], median, hi, hi - v[0], slowest, hi / median if median > 0 else None)


def is_collective_group(node: ModuleNode | JobModule) -> bool:
    """A "not in any module" group of a CPU-side collective (``gloo:all_reduce``)."""
    return node.kind is NodeKind.GROUP and schema.COLLECTIVE_CPU_RE.match(node.name) is not None


class JobModule(msgspec.Struct, frozen=True):
    """One module node matched across the ranks (by qualified name, or by tree position)."""

    key: tuple[str, ...]  # the node's path in the tree (qualified names for traceprof scopes)
    parent: tuple[str, ...] | None
    depth: int
    kind: NodeKind
    name: str
    class_name: str
    qualified_name: str
    #: per rank (ranks without the node are absent): the node's total in each pass
    nodes: dict[int, ModuleNode]

    def time(self, rank: int, metric: str, p: Pass | None = None, own: bool = False) -> float:
        node = self.nodes[rank]
        part = "own" if own else "total"
        if p is not None:
            return sum((getattr(getattr(node.phase(p), part), metric),))
        # the passes in PASSES order, read as attributes (a report asks this thousands of times)
        return sum(
            (
                getattr(getattr(node.forward, part), metric),
                getattr(getattr(node.backward, part), metric),
                getattr(getattr(node.other, part), metric),
            )
        )

    def times(self, metric: str, p: Pass | None = None, own: bool = False) -> dict[int, float]:
        # as time() for each rank, the lookups hoisted: a job report asks this for every module,
        # metric and pass
        part, nodes = ("own" if own else "total"), self.nodes
        if p is not None:
            phase = Pass(p).value
            return {r: 0.0 + getattr(getattr(getattr(nodes[r], phase), part), metric) for r in sorted(nodes)}
        return {
            r: getattr(getattr(n.forward, part), metric)
            + getattr(getattr(n.backward, part), metric)
            + getattr(getattr(n.other, part), metric)
            for r, n in sorted(nodes.items())
        }

    def spread(self, metric: str, p: Pass | None = None) -> Spread:
        s = spread_of(self.times(metric, p))
        assert s is not None  # the node is on one rank at least
        return s


def own_compute_us(node: ModuleNode, gpu: bool) -> float:
    """A node's own part of its rank's step time (``gpu``: GPU compute, else CPU compute): the
    summed durations of its own kernels less its collective kernels', or its own CPU time (none
    for a collective group or the time between ops, which the step time leaves out)."""
    if gpu:
        collective = sum(
            op.gpu_work_us
            for op in node.ops
            if op.kind is OpKind.KERNEL and schema.COLLECTIVE_KERNEL_RE.match(op.name)
        )
        return max(node.own.gpu_work_us - collective, 0.0)
    if is_collective_group(node) or (node.kind is NodeKind.GROUP and node.name == BETWEEN_OPS_GROUP):
        return 0.0
    return node.own.cpu_us
