"""What a node of a result measures, and the kinds it is made of: the additive quantities
(:class:`Times`), their split into a node's own and its subtree's (:class:`PhaseTimes`) per
:class:`Pass`, the share of kernels fused across modules (:class:`Fused`), the kinds of nodes
and of the rows of a node's ops table (:class:`OpStat`), and how those rows are merged and
bounded. The leaves :mod:`traceprof.result.model` builds a profile from, and what the flat
records read: they import nothing of the profile itself.
"""

from __future__ import annotations

import enum
import operator

import msgspec
from msgspec.structs import astuple


class Times(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """Additive per-step quantities of a node: times, counts, FLOPs and bytes."""

    gpu_busy_us: float = 0.0
    gpu_work_us: float = 0.0
    cpu_us: float = 0.0
    kernels: float = 0.0
    flops: float = 0.0  # floating-point operations of the counted ops (a multiply-add is 2)
    macs: float = 0.0  # multiply-accumulates (matrix products, convolutions, attention)
    bytes_read: float = 0.0  # every input of every counted op read once (a lower bound)
    bytes_written: float = 0.0  # every output written once
    unsupported_ops: float = 0.0  # calls of ops without a FLOP formula (docs/flops.md)
    #: the time the node's GPU work really ran: per node, the union of its own work items'
    #: intervals (work of other nodes running at the same time, such as NCCL kernels, not
    #: subtracted as in gpu_busy_us); a subtree's is the sum of its nodes'. Achieved FLOP/s,
    #: bytes/s, MFU and bandwidth use divide by it (docs/flops.md)
    gpu_kernel_us: float = 0.0

    def __add__(self, other: Times) -> Times:
        return Times(*map(operator.add, astuple(self), astuple(other)))  # field by field

    def __sub__(self, other: Times) -> Times:
        return Times(*map(operator.sub, astuple(self), astuple(other)))


ZERO = Times()


class PhaseTimes(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A node's times in one pass (forward, backward or other): its own work and its subtree's.
    (The type's name is older than the word: everywhere else, code, reports and docs, a
    forward, backward or other part of the work is a *pass*.)"""

    own: Times = ZERO
    total: Times = ZERO


class ByPass:
    """What a record with its times split per pass (``forward``, ``backward``, ``other``, each a
    :class:`PhaseTimes`) answers of them: a mixin of such structs (a node, its fused share)."""

    __slots__ = ()
    forward: PhaseTimes
    backward: PhaseTimes
    other: PhaseTimes

    def phase(self, p: Pass | str) -> PhaseTimes:
        """The times in pass ``p``."""
        times: PhaseTimes = getattr(self, PASS_ATTRS.get(p) or Pass(p).value)
        return times

    @property
    def total(self) -> Times:
        """The subtree's times, all passes together."""
        return self.forward.total + self.backward.total + self.other.total

    @property
    def own(self) -> Times:
        """Its own times, all passes together."""
        return self.forward.own + self.backward.own + self.other.own


class Fused(msgspec.Struct, ByPass, frozen=True, gc=False):
    """A node's share of the work of compiled kernels that fuse ops of several modules
    (docs/attribution.md "Compiled models"). Such a kernel is one timed unit: its time goes to
    the lowest common ancestor of the modules it works for, and is *part of* that node's times,
    not in addition to them. ``own``: the fused kernels booked to the node itself; ``total``:
    to its subtree. Only the time fields and ``kernels`` are set (a fused kernel's FLOPs go to
    the modules of its nodes, like an eager op's)."""

    forward: PhaseTimes = PhaseTimes()
    backward: PhaseTimes = PhaseTimes()
    other: PhaseTimes = PhaseTimes()


#: the fields of Times that a Fused record sets
FUSED_FIELDS = ("gpu_busy_us", "gpu_work_us", "cpu_us", "kernels")


class Pass(str, enum.Enum):
    """The passes every quantity is split into. Every CPU event and every GPU work item belongs
    to exactly one (docs/attribution.md)."""

    FORWARD = "forward"  # inside a module's forward, or an op autograd recorded (the loss)
    BACKWARD = "backward"  # inside a backward node op (or re-run forward of a checkpoint)
    #: neither: the optimizer step, zero_grad, input copies, time between ops, GPU work whose
    #: launch is not in the trace
    OTHER = "other"

    @property
    def short(self) -> str:
        """The label in reports: fwd, bwd, other."""
        return _PASS_SHORT[self]


_PASS_SHORT = {Pass.FORWARD: "fwd", Pass.BACKWARD: "bwd", Pass.OTHER: "other"}
#: the passes in the order reports show them
PASSES: tuple[Pass, ...] = tuple(Pass)
#: the attribute of each pass, by a Pass or its value (a Pass is the str it stands for, and an
#: enum's .value costs a descriptor call: records of a large tree look passes up 50,000 times)
PASS_ATTRS: dict[str, str] = {**{p: p.value for p in PASSES}, **{p.value: p.value for p in PASSES}}


class NodeKind(str, enum.Enum):
    MODULE = "module"  # a module call path (or an annotation when the trace has no modules)
    UNATTRIBUTED = "unattributed"  # the bucket of work not inside any module
    GROUP = "group"  # inside the bucket: work under one top-level op or annotation
    OTHERS = "others"  # siblings folded together by a transform (--top)
    #: work of compiled regions or graph replays without module information, grouped under the
    #: module around them: per compiled graph or replayed graph, then per kernel family
    #: (``[compiled 0/0 forward]``, ``[graph replay 0]``, ``[pointwise]``; docs/attribution.md)
    COMPILED = "compiled"


class OpKind(str, enum.Enum):
    OP = "op"  # a CPU op, with the GPU work it launched
    KERNEL = "kernel"  # GPU kernels (memcpy, memset) of one name


OP_SUMMED = ("calls", "kernels", "gpu_busy_us", "gpu_work_us", "cpu_us", "flops")


class OpStat(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One row of a node's ops table (traceprof.analysis.module_ops): the ops (or kernels) of one name,
    input shapes and pass inside the node itself, per step."""

    kind: OpKind
    name: str
    phase: str  # the pass: a Pass value
    input_shapes: str | None = None  # the op's recorded input dims, JSON text; None: none
    calls: float = 0.0  # op calls (for a kernel row: kernels, memcpys and memsets) per step
    kernels: float = 0.0  # kernels per step
    gpu_busy_us: float = 0.0  # concurrency-shared, as the node's
    gpu_work_us: float = 0.0  # plain sum of durations
    cpu_us: float = 0.0  # exclusive CPU time inside the op (0 in kernel rows)
    flops: float = 0.0  # FLOPs of the counted ops inside the op (0 in kernel rows)
    #: a compiled kernel fused across modules: the modules its nodes belong to ("a, b"); None
    #: for every other row
    modules: str | None = None

    def key(self) -> tuple[OpKind, str, str, str | None]:
        return (self.kind, self.name, self.phase, self.input_shapes)

    def __add__(self, other: OpStat) -> OpStat:
        return msgspec.structs.replace(
            self,
            modules=_joined(self.modules, other.modules),
            **{f: getattr(self, f) + getattr(other, f) for f in OP_SUMMED},
        )


def _joined(a: str | None, b: str | None) -> str | None:
    """Two lists of modules ("a, b") as one, each module once, in order."""
    if a is None or b is None:
        return b if a is None else a
    return ", ".join(dict.fromkeys(a.split(", ") + b.split(", ")))


#: rows kept per node, kind and pass; the rest are folded into one "(N more)" row
MAX_ROWS = 40


#: OpStat.key() of a row, without the method call (a large tree's rows are tens of thousands)
_OP_KEY = operator.attrgetter("kind", "name", "phase", "input_shapes")


def bounded(rows: list[OpStat] | tuple[OpStat, ...], limit: int = MAX_ROWS) -> tuple[OpStat, ...]:
    """Rows with equal keys summed, largest first (GPU busy time, then CPU time, FLOPs, calls);
    past ``limit`` rows of a kind and pass, the rest folded into one ``(N more)`` row."""
    merged: dict[tuple[OpKind, str, str, str | None], OpStat] = {}
    for k, r in zip(map(_OP_KEY, rows), rows):
        earlier = merged.get(k)
        merged[k] = r if earlier is None else earlier + r
    ranked = sorted(merged.values(), key=lambda r: (-r.gpu_busy_us, -r.cpu_us, -r.flops, -r.calls, r.name))
    if len(ranked) <= limit:  # no kind and pass has more (most nodes): nothing to fold
        return tuple(ranked)
    kept: list[OpStat] = []
    rest: dict[tuple[OpKind, str], list[OpStat]] = {}
    seen: dict[tuple[OpKind, str], int] = {}
    for r in ranked:
        group = (r.kind, r.phase)
        seen[group] = seen.get(group, 0) + 1
        if seen[group] <= limit:
            kept.append(r)
        else:
            rest.setdefault(group, []).append(r)
    for (kind, phase), folded in rest.items():
        total = OpStat(kind, f"({len(folded)} more)", phase)
        for r in folded:
            total = total + r
        kept.append(total)
    return tuple(kept)
