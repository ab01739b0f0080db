"""ModuleProfile: the result of an analysis. Immutable; numbers only, no formatting.

Times are per step (the mean over the selected steps), in microseconds.

GPU busy time is the wall time during which the GPU was running work, *shared* between work
items that ran at the same time: an instant when ``k`` kernels run concurrently (on different
streams) counts ``1/k`` of its duration for each. So busy times add up: a node's total is its
own time plus its children's totals, and the roots plus the "not in any module" bucket give the
union of all GPU work intervals of the selection. ``gpu_work_us`` is the plain sum of the work
items' durations (kernels, memcpy, memset).

FLOPs, MACs and bytes are per step too, computed from the ops' shapes (docs/flops.md); they add
up like times. Achieved FLOP/s, MFU and bandwidth use are derived from them on demand
(:meth:`ModuleProfile.throughput`), never stored.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import msgspec

from traceprof.errors import ModuleLookupError
from traceprof.result.memory import MemorySummary, MemoryUse
from traceprof.result.sources import Source
from traceprof.result.timeline import Timeline

# the leaves of a profile (result/times.py), re-exported: the package imports them from here
from traceprof.result.times import FUSED_FIELDS as FUSED_FIELDS
from traceprof.result.times import MAX_ROWS as MAX_ROWS
from traceprof.result.times import OP_SUMMED, PASS_ATTRS, ByPass
from traceprof.result.times import PASSES as PASSES
from traceprof.result.times import ZERO as ZERO
from traceprof.result.times import Fused as Fused
from traceprof.result.times import NodeKind as NodeKind
from traceprof.result.times import OpKind as OpKind
from traceprof.result.times import OpStat as OpStat
from traceprof.result.times import Pass as Pass
from traceprof.result.times import PhaseTimes as PhaseTimes
from traceprof.result.times import Times as Times
from traceprof.result.times import bounded as bounded
from traceprof.trace.model import ModuleInfo, TraceMetadata
from traceprof.trace.schema import OPTIMIZER_STEP_PREFIXES

if TYPE_CHECKING:
    import pandas as pd


UNATTRIBUTED_NAME = "(not in any module)"
#: what names a GPU that the trace does not name
UNNAMED_GPU = "GPU (not named in the trace)"


class ModuleNode(msgspec.Struct, ByPass, frozen=True, gc=False, array_like=True):
    id: int
    parent: int  # -1 for a root
    children: tuple[int, ...]
    depth: int
    kind: NodeKind
    name: str  # its own part of the path (an attribute, a scope or annotation name), or the class
    class_name: str
    qualified_name: str
    path: tuple[str, ...]
    calls: float  # calls per step
    forward: PhaseTimes
    backward: PhaseTimes
    other: PhaseTimes = PhaseTimes()  # neither forward nor backward (Pass.OTHER)
    info: ModuleInfo | None = None
    memory: tuple[MemoryUse, ...] = ()  # per device, from [memory] events (profile_memory=True)
    #: the node's own ops and kernels per pass, largest first (traceprof.analysis.module_ops)
    ops: tuple[OpStat, ...] = ()
    #: its share of compiled kernels fused across modules; None when the trace has no
    #: compiled work joined to the compiled-kernel table
    fused: Fused | None = None

    @property
    def label(self) -> str:
        """The name reports show for the node: its qualified name, or for a model's root, whose
        qualified name is ``""`` (as in torch's ``named_modules()``, so that
        ``model.get_submodule(node.qualified_name)`` finds every node), its class name."""
        return self.qualified_name or self.class_name or self.name

    def __repr__(self) -> str:
        """One line: its name, class, calls and time per pass (not every field)."""
        from traceprof.render.notebook import node_repr  # presentation lives in render/

        return node_repr(self)

    def _repr_html_(self) -> str:
        """Its numbers per pass and its largest ops, for Jupyter (docs/notebooks.md)."""
        from traceprof.render.notebook import node_html

        return node_html(self)


def is_optimizer_group(node: ModuleNode) -> bool:
    """Whether the node is a group of the "not in any module" bucket that is the optimizer step
    (its name starts with one of ``schema.OPTIMIZER_STEP_PREFIXES``)."""
    return node.kind is NodeKind.GROUP and node.name.startswith(OPTIMIZER_STEP_PREFIXES)


class PassTotals(msgspec.Struct, frozen=True):
    """Totals per pass of a set of nodes."""

    forward: Times = ZERO
    backward: Times = ZERO
    other: Times = ZERO

    def phase(self, p: Pass | str) -> Times:
        times: Times = getattr(self, PASS_ATTRS.get(p) or Pass(p).value)
        return times

    @property
    def total(self) -> Times:
        return self.forward + self.backward + self.other


class StepSelection(msgspec.Struct, frozen=True):
    """Which steps the numbers are the mean of."""

    numbers: tuple[int, ...]  # ProfilerStep numbers used; () when the trace has no steps
    in_trace: tuple[int, ...]  # every ProfilerStep number in the trace
    incomplete: tuple[int, ...]  # steps left out by default: GPU work launched in them is missing
    count: int  # the divisor: number of steps (1 for a trace without steps)
    wall_us: float  # mean CPU wall time of a selected step (trace span without steps)
    gpu_busy_us: float  # mean union of GPU work intervals per step
    gpu_work_us: float
    #: exclusive time of every CPU slice of the step: ops, annotations, Python frames, and the
    #: time between ops (cpu_between_ops_us) = what the tree's nodes add up to
    cpu_us: float
    kernels: float
    flops: float = 0.0
    macs: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    unsupported_ops: float = 0.0
    #: time of the step's threads inside ProfilerStep#N but outside every op, annotation and
    #: Python frame (Python code the profiler does not see, waits); part of cpu_us, in the
    #: "(step, between ops)" group of the other pass
    cpu_between_ops_us: float = 0.0
    #: GPU work in the selection launched before the trace began (its launch's correlation id
    #: is below the trace's first): counted in gpu_busy_us (it ran during the step), attributed
    #: to no module
    gpu_launched_before_trace_us: float = 0.0
    #: GPU work in the selection whose launch is not in the trace for another reason
    gpu_launch_missing_us: float = 0.0

    @property
    def cpu_in_ops_us(self) -> float:
        """CPU time spent in ops, annotations and Python frames: per thread, the union of the
        step's top-level slices (``cpu_us`` without the time between ops)."""
        return self.cpu_us - self.cpu_between_ops_us


class UnsupportedOp(msgspec.Struct, frozen=True):
    """Ops of one name without a FLOP formula (docs/flops.md), per step."""

    name: str
    calls: float
    time_us: float  # GPU busy time of the work they launched (CPU time on CPU-only traces)
    share_of_step: float  # of the step's GPU busy time (CPU time on CPU-only traces)


class Peak(msgspec.Struct, frozen=True):
    """The device's peak for the precision that carries most of the FLOPs."""

    device: str  # the peaks-table entry (traceprof.trace.hardware), e.g. "H100 SXM"
    precision: str  # "bf16", "fp16", "tf32", "fp32", "fp8", ...
    flop_per_s: float | None  # None: the device has no peak for this precision
    bytes_per_s: float
    source: str


class FlopSummary(msgspec.Struct, frozen=True):
    has_shapes: bool  # False: the trace was recorded without shapes, no FLOPs were computed
    flops_by_precision: tuple[tuple[str, float], ...] = ()  # per step, largest first
    peak: Peak | None = None  # None on CPU-only traces and unknown devices
    unsupported: tuple[UnsupportedOp, ...] = ()  # largest time first

    @property
    def precision(self) -> str | None:
        return self.flops_by_precision[0][0] if self.flops_by_precision else None

    @property
    def unsupported_share(self) -> float:
        """The share of the step's GPU busy time (CPU time on CPU-only traces) in ops without a
        FLOP formula: the FLOPs of ops covering only ``1 - unsupported_share`` of it are known."""
        return sum(u.share_of_step for u in self.unsupported)

    @property
    def partial(self) -> bool:
        """Ops without a FLOP formula take more than :data:`PARTIAL_SHARE` of the step: the
        achieved FLOP/s and MFU are lower bounds."""
        return self.unsupported_share > PARTIAL_SHARE


#: above this share of the step's time in ops without a FLOP formula, FLOP/s and MFU are
#: reported as lower bounds (docs/flops.md)
PARTIAL_SHARE = 0.05
NO_FLOPS = FlopSummary(has_shapes=False)


class Throughput(msgspec.Struct, frozen=True):
    """Achieved rates over a time (GPU busy time; CPU time on CPU-only traces). None where the
    time is 0 or the peak is unknown."""

    flop_per_s: float | None
    bytes_per_s: float | None
    mfu: float | None  # fraction of the peak FLOP/s of the profile's precision
    bandwidth_use: float | None  # fraction of the peak memory bandwidth
    flops_per_byte: float | None  # arithmetic intensity


class LinkStats(msgspec.Struct, frozen=True):
    events: int
    kernels: int
    memcpys: int
    memsets: int
    gpu_work_with_launch: int
    gpu_work_without_launch: int
    backward_nodes: int
    backward_nodes_linked: int
    nesting_conflicts: int


class CompiledSummary(msgspec.Struct, frozen=True):
    """The compiled graphs' work joined to modules through the compiled-kernel table
    (docs/attribution.md "Compiled models"), per step."""

    graphs: int  # graphs of the table that ran in the selection
    runs: float  # graph runs per step
    events: float  # kernel calls per step: the direct children of the runs' scopes
    matched: float  # ... of them joined to a call site of the table
    #: FLOPs of forward ops that backward graphs computed again (activation recomputation),
    #: reported apart: not part of the backward's FLOPs (docs/attribution.md)
    recomputed_flops: float = 0.0
    nodes_from_table: int = 0  # module nodes made from the table (no scope of their own)
    #: graph runs whose graph the table does not have (cache hits on graphs it never saw)
    runs_without_graph: float = 0.0
    #: time of the compiled code outside its kernel calls: Dynamo's cache lookups (guards), the
    #: regions' and compiled backward's wrappers (GPU busy time; CPU time on CPU-only traces):
    #: on the compiled roots, part of their own time
    overhead_us: float = 0.0


class Kinded(Protocol):
    """A node of any tree (a profile's, a diff's, a job's): what :func:`module_node_count`
    reads of it."""

    @property
    def kind(self) -> NodeKind: ...


def module_node_count(nodes: Iterable[Kinded]) -> int:
    """How many module nodes ``nodes`` holds: the modules of the tree, called or not (those of
    the module table no step ran: MoE experts without tokens, modules the compiler removed);
    compiled and replayed work's group nodes, the bucket and its groups are no modules."""
    return sum(1 for n in nodes if n.kind is NodeKind.MODULE)


class Parent(Protocol):
    """A node of a tree kept as a list, its children by index (a profile's, a diff's): what
    :func:`pre_order` reads of it."""

    @property
    def children(self) -> tuple[int, ...]: ...


_P = TypeVar("_P", bound=Parent)


def pre_order(nodes: Sequence[_P], roots: Sequence[int], start: int | None = None) -> Iterator[_P]:
    """``nodes`` in pre-order (parents before children, siblings in stored order): the subtree
    of the node at ``start``, else the trees of every root."""
    stack = [start] if start is not None else list(reversed(roots))
    while stack:
        node = nodes[stack.pop()]
        yield node
        stack.extend(reversed(node.children))


#: relative margin above the step's wall time within which the roots' time is not explained
WALL_MARGIN = 1e-3


class ModuleProfile(msgspec.Struct, frozen=True):
    metadata: TraceMetadata
    source: Source  # the events the module tree was built from
    source_description: str
    nodes: tuple[ModuleNode, ...]  # index == id; parents before children, siblings in order
    roots: tuple[int, ...]  # module roots first, the unattributed bucket last
    selection: StepSelection
    stats: LinkStats
    #: the number of module nodes of the full tree (module_node_count; before any depth, top-N
    #: or ignore transform): the one count every output gives (header, HTML, notebook, jobs)
    module_nodes: int
    warnings: tuple[str, ...] = ()
    flops: FlopSummary = NO_FLOPS
    #: the "not in any module" groups that are the optimizer step (schema.OPTIMIZER_STEP_PREFIXES),
    #: found before any transform, so --depth and --top cannot hide it
    optimizer_step: PassTotals = PassTotals()
    #: the device whose memory the flat outputs and the tree report: the first accelerator with
    #: [memory] events in the selection, else "cpu"; None when there are none
    memory_device: str | None = None
    #: one step drawn as lanes, and the memory curve over it (traceprof.analysis.step_timeline); None
    #: when not computed
    timeline: Timeline | None = None
    #: compiled graphs joined to modules by the compiled-kernel table; None without it
    compiled: CompiledSummary | None = None
    #: what holds the memory device's memory: activations, the peak and the end of the forward
    #: by category (traceprof.analysis.memory_holders); None without [memory] events
    memory_summary: MemorySummary | None = None

    def memory_of(self, node: ModuleNode, device: str | None = None) -> MemoryUse | None:
        """``node``'s memory use on ``device`` (default: :attr:`memory_device`), or None."""
        device = device or self.memory_device
        return next((m for m in node.memory if m.device == device), None)

    def with_path(self, path: str) -> ModuleProfile:
        """This profile with its trace's path spelled ``path`` (an analysis read from the cache
        for a file of the same content under another name)."""
        if self.metadata.path == path:
            return self
        return msgspec.structs.replace(self, metadata=msgspec.structs.replace(self.metadata, path=path))

    @property
    def has_gpu(self) -> bool:
        return self.stats.kernels + self.stats.memcpys + self.stats.memsets > 0

    def over_wall(self) -> str | None:
        """Why the time of the tree's roots (the modules and ``(not in any module)``, every pass;
        GPU busy time, CPU time on CPU-only traces) is above the step's wall time, or None when
        it is not: on a CPU-only trace the time is CPU time, and that of threads running at the
        same time adds up; the GPU busy time of a step is that of the work launched in it, which
        runs on after the step's CPU time ends when the CPU queues work ahead of the GPU. The one
        explanation the report's iter latency and a job's heat map give."""
        wall = self.selection.wall_us
        metric = "gpu_busy_us" if self.has_gpu else "cpu_us"
        roots = sum(getattr(self.nodes[r].total, metric) for r in self.roots)
        if wall <= 0 or roots <= wall * (1 + WALL_MARGIN):
            return None
        if self.has_gpu:
            return (
                "the GPU ran the step's work longer than the step's CPU wall time (the CPU queued it "
                "ahead of the GPU: GPU-bound)"
            )
        return "CPU time of several threads running at the same time adds up (the latencies are CPU time)"

    @property
    def device_names(self) -> tuple[str, ...]:
        """The names of the trace's GPUs, sorted; :data:`UNNAMED_GPU` for a trace that ran GPU
        work or lists devices without naming them (ROCm traces may leave ``name`` empty); ()
        for a trace that ran on the CPU alone."""
        names = tuple(sorted({d.name for d in self.metadata.devices if d.name}))
        return names or ((UNNAMED_GPU,) if self.has_gpu or self.metadata.devices else ())

    @property
    def unattributed(self) -> ModuleNode | None:
        for r in self.roots:
            if self.nodes[r].kind is NodeKind.UNATTRIBUTED:
                return self.nodes[r]
        return None

    def check_links(self) -> None:
        """Its tree and timeline as the analysis builds them, checked on a profile read from
        elsewhere (a cache entry, mapped as untrusted input): every id, parent, child and root
        a node of it, in pre-order; a ValueError naming the first that is not. The numbers are
        :meth:`self_check`'s."""
        n = len(self.nodes)
        for i, node in enumerate(self.nodes):
            if node.id != i or not -1 <= node.parent < i:
                raise ValueError(f"node {i} is out of place")
            if any(not i < c < n or self.nodes[c].parent != i for c in node.children):
                raise ValueError(f"node {i} has a child out of place")
        if any(not 0 <= r < n or self.nodes[r].parent != -1 for r in self.roots):
            raise ValueError("a root is out of place")
        if self.timeline is not None:
            self.timeline.check()

    def walk(self, start: int | None = None) -> Iterator[ModuleNode]:
        """Nodes in pre-order (parents before children, siblings in stored order)."""
        return pre_order(self.nodes, self.roots, start)

    def find(self, name: str) -> ModuleNode:
        """The node ``name`` names: a qualified name (``""`` is the root of a traceprof
        capture), else a class or short name (``"ResNet18"``), else a part of one, ignoring case
        (``"encoder"`` finds ``BertEncoder_0``). A miss, or a name several nodes answer, raises
        :class:`ModuleLookupError` (a KeyError) with close matches in its one-line message."""
        return find_named(self.nodes, name, _trace_name(self.metadata.path))

    def __repr__(self) -> str:
        from traceprof.render.notebook import profile_repr  # presentation lives in render/

        return profile_repr(self)

    def _repr_html_(self) -> str:
        """The summary and a static icicle, for Jupyter (docs/notebooks.md)."""
        from traceprof.render.notebook import profile_html

        return profile_html(self)

    def share_of_step(self, node: ModuleNode) -> float:
        """The node's GPU busy time (all passes) as a fraction of the step's; CPU time
        for traces without GPU work."""
        if self.has_gpu:
            denom, num = self.selection.gpu_busy_us, node.total.gpu_busy_us
        else:
            denom, num = self.selection.cpu_us, node.total.cpu_us
        return num / denom if denom > 0 else 0.0

    def throughput(self, t: Times | StepSelection) -> Throughput:
        """Achieved FLOP/s and bytes/s of ``t`` (a node's times, or the step's) over the time its
        GPU work ran (a node's ``gpu_kernel_us``; the step's GPU busy time), CPU time on CPU-only
        traces, and their fractions of the device's peaks."""
        if self.has_gpu:
            time_us = t.gpu_busy_us if isinstance(t, StepSelection) else t.gpu_kernel_us or t.gpu_busy_us
        else:  # a step's CPU time without the time between ops, as the header shows it
            time_us = t.cpu_in_ops_us if isinstance(t, StepSelection) else t.cpu_us
        moved = t.bytes_read + t.bytes_written
        if time_us <= 0 or not self.flops.has_shapes:
            return Throughput(None, None, None, None, t.flops / moved if moved else None)
        flop_rate = t.flops / (time_us * 1e-6)
        byte_rate = moved / (time_us * 1e-6)
        peak = self.flops.peak  # on CPU-only traces only when given (--peak-tflops)
        mfu = flop_rate / peak.flop_per_s if peak and peak.flop_per_s else None
        bandwidth = byte_rate / peak.bytes_per_s if peak and peak.bytes_per_s else None
        return Throughput(flop_rate, byte_rate, mfu, bandwidth, t.flops / moved if moved else None)

    def self_check(self, rel_tol: float = 1e-6) -> None:
        """Assert the invariants: totals = own + children, roots add up to the step."""

        def close(a: float, b: float) -> bool:
            return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-6 * max(1.0, abs(b)))

        for node in self.nodes:
            for phase in PASSES:
                p: PhaseTimes = node.phase(phase)
                expect = p.own
                for c in node.children:
                    expect = expect + self.nodes[c].phase(phase).total
                for f in Times.__struct_fields__:
                    a, b = getattr(p.total, f), getattr(expect, f)
                    assert close(a, b), f"{node.qualified_name} {phase} {f}: {a} != {b}"
            for c in node.children:
                assert self.nodes[c].parent == node.id, f"bad parent link under {node.id}"
            # a module's work is forward or backward; an annotation may be neither (an optimizer
            # or data-copy annotation is other-pass work, docs/attribution.md)
            if node.kind is NodeKind.MODULE and self.source is not Source.ANNOTATIONS:
                assert node.other.total == ZERO, f"{node.qualified_name} has other-pass work"
            if node.fused is not None:  # fused work adds up, and is part of the node's
                for phase in PASSES:
                    fused = node.fused.phase(phase)
                    expect = fused.own
                    for c in node.children:
                        child = self.nodes[c].fused
                        expect = expect + (child.phase(phase).total if child is not None else ZERO)
                    for key in FUSED_FIELDS:
                        a, b = getattr(fused.total, key), getattr(expect, key)
                        assert close(a, b), f"{node.qualified_name} {phase} fused {key}: {a} != {b}"
                        own, part = getattr(node.phase(phase).own, key), getattr(fused.own, key)
                        assert part <= own or close(part, own), (
                            f"{node.qualified_name} {phase} fused {key}: {part} > own {own}"
                        )
            for use in node.memory:  # activations add up: subtree = own + the children's
                if use.activation_bytes is None or use.own_activation_bytes is None:
                    continue
                held = use.own_activation_bytes
                for c in node.children:
                    below = next((m for m in self.nodes[c].memory if m.device == use.device), None)
                    held += (below.activation_bytes or 0.0) if below is not None else 0.0
                assert close(use.activation_bytes, held), (
                    f"{node.qualified_name} activations on {use.device}: {use.activation_bytes} != {held}"
                )
            if node.ops:  # the ops rows add up to the node's own work, per pass
                for phase in PASSES:
                    own = node.phase(phase).own
                    rows = [o for o in node.ops if o.phase == phase.value]
                    for kind, keys in (
                        (OpKind.OP, OP_SUMMED[1:]),
                        (OpKind.KERNEL, ("kernels", "gpu_busy_us", "gpu_work_us")),
                    ):
                        for key in keys:
                            got = sum(getattr(o, key) for o in rows if o.kind is kind)
                            assert close(got, getattr(own, key)), (
                                f"{node.qualified_name} {phase} {kind.value} rows {key}: "
                                f"{got} != {getattr(own, key)}"
                            )
        roots = ZERO
        for r in self.roots:
            roots = roots + self.nodes[r].total
        sel = self.selection
        for name, want in (
            ("gpu_busy_us", sel.gpu_busy_us),
            ("gpu_work_us", sel.gpu_work_us),
            ("cpu_us", sel.cpu_us),
            ("kernels", sel.kernels),
            ("flops", sel.flops),
            ("macs", sel.macs),
            ("bytes_read", sel.bytes_read),
            ("bytes_written", sel.bytes_written),
            ("unsupported_ops", sel.unsupported_ops),
        ):
            got = getattr(roots, name)
            assert close(got, want), f"roots {name} {got} != selection {want}"

    def to_parquet(self, path: str) -> None:
        """Write :meth:`to_dataframe` as a Parquet file, atomically (needs pyarrow)."""
        from traceprof.output import write_atomic_bytes
        from traceprof.result.records import parquet_bytes

        write_atomic_bytes(path, parquet_bytes(self))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per node, in pre-order, with typed columns (needs pandas)."""
        from traceprof.result.records import profile_dataframe

        return profile_dataframe(self)


class Named(Protocol):
    """What :func:`find_named` looks at: a node of a profile, a diff or a job."""

    @property
    def qualified_name(self) -> str: ...

    @property
    def class_name(self) -> str: ...

    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=Named)
#: names listed in the message of a lookup that failed
_LISTED = 5


def _no_keys(item: Named) -> tuple[str, ...]:
    return ()


def find_named(
    items: Sequence[_N], query: str, where: str, keys: Callable[[_N], Iterable[str]] = _no_keys
) -> _N:
    """The item ``query`` names, tried in order: a qualified name (or one of the item's
    ``keys``), the first such in ``items``; a class or short name; the end of a qualified name
    (``"attention.self"``); a part of a short or class name, then of a qualified name, ignoring
    case. Raises :class:`ModuleLookupError` when nothing matches, or when several items match
    at the first of these steps that matches any."""
    for item in items:
        if query == item.qualified_name or query in keys(item):
            return item
    lowered, suffix = query.lower(), "." + query
    for matches in (
        [i for i in items if query in (i.class_name, i.name)],
        [i for i in items if i.qualified_name.endswith(suffix)],
        [i for i in items if lowered in i.name.lower() or lowered in i.class_name.lower()],
        [i for i in items if lowered in i.qualified_name.lower()],
    ):
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise ModuleLookupError(
                f"{query!r} matches {len(matches)} nodes in {where}: {_listed(matches)}; "
                "give a qualified name",
                matches=tuple(_label(i) for i in matches),
            )
    close = _close_names(items, query)
    raise ModuleLookupError(f"no node {query!r} in {where}{did_you_mean(close)}", suggestions=close)


def did_you_mean(names: Sequence[str]) -> str:
    """``"; did you mean a, b?"``, or "" without names."""
    return f"; did you mean {', '.join(names)}?" if names else ""


def _label(item: Named) -> str:
    return item.qualified_name or item.class_name or item.name


def _listed(items: Sequence[Named]) -> str:
    shown = ", ".join(_label(i) for i in items[:_LISTED])
    return shown + (", ..." if len(items) > _LISTED else "")


def _close_names(items: Sequence[Named], query: str) -> tuple[str, ...]:
    """Names like ``query`` (difflib), then names that hold its last dotted part."""
    import difflib  # only when a lookup fails

    names: dict[str, str] = {}  # lowercased -> as written
    for item in items:
        for n in (_label(item), item.name, item.class_name):
            if n:
                names.setdefault(n.lower(), n)
    lowered = query.lower()
    close = difflib.get_close_matches(lowered, list(names), n=_LISTED, cutoff=0.6)
    tail = lowered.rsplit(".", 1)[-1]
    parts = [n for n in names if tail and tail != lowered and tail in n]
    return tuple(dict.fromkeys(names[n] for n in close + parts))[:_LISTED]


def _trace_name(path: str) -> str:
    return os.path.basename(path) or "the profile"
