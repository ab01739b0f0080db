"""Diff of two traces: which module got slower between two runs, and what changed inside it.

Nodes are matched by key (docs/diff.md):

- traces whose module tree comes from traceprof scopes or Lightning scopes: the qualified name
  and class (``layer1.0.conv1`` of class ``Conv2d``);
- other sources (``nn.Module`` python_function events, annotations), or two traces whose
  sources differ: the tree path of class names with each class's call order among its
  siblings (``GPT#0/ModuleDict#0/Block#2``);
- outside the modules: ``(not in any module)`` and its groups by name.

A node present on one side only is *added* or *removed*: a renamed or moved module is one of
each, never matched by guess. Per node and pass (forward, backward, other) a :class:`PassDelta`
holds the time base -> new (GPU busy time, CPU time on CPU-only traces), FLOPs, kernels,
achieved FLOP/s and memory, and, with several steps per trace, the step-to-step spread: a
change within the spread is marked as noise.
"""

from __future__ import annotations

import enum
import math
import os
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec.structs import replace

from traceprof import options
from traceprof.compare.side import BUCKET_PATH, Side, cached_sides, side_of
from traceprof.errors import ModuleLookupError, OptionError
from traceprof.result.model import (
    PASSES,
    ModuleNode,
    ModuleProfile,
    NodeKind,
    Pass,
    did_you_mean,
    find_named,
)
from traceprof.trace import schema
from traceprof.trace.model import Trace

if TYPE_CHECKING:
    from traceprof.progress import Progress
    from traceprof.result.shaping import SortKey
    from traceprof.result.sources import Source

#: exit code of ``traceprof diff --fail-if-slower`` when the new run is slower than allowed
SLOWER_EXIT_CODE = 10
#: kernels or ops listed under each changed node
TOP_INSIDE = 5
#: traces analyzed in parallel processes when together larger than this (smaller ones take less
#: time than starting a process)
PARALLEL_FROM_BYTES = 20_000_000
#: below this share of matched module nodes the two traces are said to be of different models
SAME_MODEL_SHARE = 0.5


class Status(str, enum.Enum):
    MATCHED = "matched"
    ADDED = "added"  # in the new trace only
    REMOVED = "removed"  # in the base trace only


class _Change:
    """Δ, Δ% and the noise mark, from ``base_us``, ``new_us`` and ``spread_us``."""

    __slots__ = ()

    if TYPE_CHECKING:  # given by the subclasses: fields or properties

        @property
        def base_us(self) -> float: ...

        @property
        def new_us(self) -> float: ...

        @property
        def spread_us(self) -> float | None: ...

    @property
    def delta_us(self) -> float:
        return self.new_us - self.base_us

    @property
    def delta_ratio(self) -> float | None:
        """Δ as a fraction of the base time; None when the base time is 0."""
        return self.delta_us / self.base_us if self.base_us > 0 else None

    @property
    def noise(self) -> bool:
        """The change is within the step-to-step spread."""
        return self.spread_us is not None and self.delta_us != 0 and abs(self.delta_us) <= self.spread_us


class PassDelta(_Change, msgspec.Struct, frozen=True):
    """One pass of one node, base -> new. Times per step, microseconds; None: not on that side."""

    phase: Pass
    base_us: float
    new_us: float
    spread_us: float | None  # step-to-step standard deviation (larger side); None: one step
    base_flops: float
    new_flops: float
    base_kernels: float
    new_kernels: float
    base_flop_per_s: float | None
    new_flop_per_s: float | None
    base_memory_peak_bytes: float | None
    new_memory_peak_bytes: float | None
    base_calls: float
    new_calls: float
    #: the node's activations, bytes per step (result.memory.MemoryUse.activation_bytes): in the
    #: forward pass's delta only; None: not known on that side (or another pass)
    base_activation_bytes: float | None = None
    new_activation_bytes: float | None = None


class InsideDelta(msgspec.Struct, frozen=True):
    """A kernel (GPU traces) or op (CPU-only traces) inside a node, base -> new, per step.
    ``status``: added when it ran only in the new trace, removed when only in the base one."""

    kind: str  # "kernel" or "op"
    name: str
    phase: Pass
    base_us: float
    new_us: float
    status: Status

    @property
    def delta_us(self) -> float:
        return self.new_us - self.base_us


class DiffNode(_Change, msgspec.Struct, frozen=True):
    id: int
    parent: int
    children: tuple[int, ...]
    depth: int
    key: str
    name: str
    class_name: str
    qualified_name: str
    kind: NodeKind
    status: Status
    passes: tuple[PassDelta, ...]  # in PASSES order
    inside: tuple[InsideDelta, ...]  # largest |Δ| first, at most TOP_INSIDE
    #: step-to-step standard deviation of the node's time over all passes (larger side)
    spread_us: float | None = None
    #: the node's place in the order the modules first ran (base trace first): ``--sort order``
    order: int = 0
    #: on the base / new side, the ancestor whose compiled kernels fused across modules hold
    #: this module's work (its own time there is 0: "fused into transformer.h.0", not -100%);
    #: None when its work is not in such a kernel, or on a side without compiled kernels
    base_fused_into: str | None = None
    new_fused_into: str | None = None

    def phase(self, p: Pass | str) -> PassDelta:
        return self.passes[PASSES.index(Pass(p))]

    @property
    def base_us(self) -> float:
        return sum(p.base_us for p in self.passes)

    @property
    def new_us(self) -> float:
        return sum(p.new_us for p in self.passes)


class SideSummary(msgspec.Struct, frozen=True):
    path: str
    device: str  # "CPU" or the GPU's name
    has_gpu: bool
    source: str  # hierarchy source
    steps: tuple[int, ...]
    wall_us: float  # mean step wall time
    time_us: float  # mean step GPU busy time (CPU time on CPU-only traces)
    wall_spread_us: float | None
    modules_us: float  # the module roots' time
    outside_us: float  # the "(not in any module)" bucket's time, and compiled roots' (no module)
    collectives_us: float  # collective kernels (NCCL, RCCL), inside modules or not
    collectives_outside_us: float = 0.0  # those of them in the bucket
    #: the trace's complete steps (what ``steps`` are without a step asked for)
    complete_steps: tuple[int, ...] = ()
    #: memory (ModuleProfile.memory_summary): the device, the whole forward's activations per
    #: step, the step's peak and its categories ((name, bytes), result.memory's order); None and
    #: () when the trace has no [memory] events or lifetimes
    memory_device: str | None = None
    activation_bytes: float | None = None
    peak_bytes: float | None = None
    peak_categories: tuple[tuple[str, float | None], ...] = ()

    @property
    def step_alone(self) -> bool:
        """One step asked for (``diff(step=N)``) out of several complete steps: no spread."""
        return len(self.steps) == 1 and len(self.complete_steps) > 1

    @property
    def idle_us(self) -> float:
        """Wall time of the step the GPU was not busy (on CPU-only traces: wall minus CPU)."""
        return self.wall_us - self.time_us


class DiffProfile(msgspec.Struct, frozen=True):
    """The diff of two traces: nodes in display order (siblings by |Δ|, largest first)."""

    base: SideSummary
    new: SideSummary
    metric: str  # "gpu_busy_us" or "cpu_us"
    matched_by: str  # "qualified name" or "class path"
    nodes: tuple[DiffNode, ...]
    roots: tuple[int, ...]
    warnings: tuple[str, ...]
    #: the diff before :meth:`shaped` (None: this is it): what "most changed" ranks
    full: DiffProfile | None = None
    #: shaped by a depth or a top-N: the text tree is an overview (docs/diff.md "Shaping")
    overview: bool = False

    def shaped(
        self,
        *,
        depth: int | None = None,
        top: int | None = None,
        sort: str = "gpu",
        ignore: tuple[str, ...] | list[str] = (),
    ) -> DiffProfile:
        """The diff shaped as ``traceprof analyze`` shapes a profile (docs/diff.md "Shaping"):
        siblings ordered by ``sort`` (the size of the change of a
        :class:`~traceprof.result.transforms.SortKey`'s quantity, largest first; ``"order"``:
        as the modules first ran), the ``top`` largest children of each node kept and the rest
        folded into one ``(k more)`` node, nodes down to ``depth`` (0: the roots), modules
        matching an ``ignore`` pattern (fnmatch on class or qualified name) hidden. Every
        number shown stays as it is: a hidden node's change stays in its parent's."""
        from traceprof.compare.shape import shape_diff

        return shape_diff(self, depth=depth, top=top, sort=sort, ignore=ignore)

    def most_changed(self) -> list[tuple[DiffNode, float]]:
        """The modules by |Δ of their own time| and that Δ (:meth:`ranked`), over every module of
        the diff, also those a :meth:`shaped` diff does not show."""
        whole = self.full or self
        return [(n, whole.own_delta_us(n)) for n in whole.ranked()]

    @property
    def wall_delta_us(self) -> float:
        return self.new.wall_us - self.base.wall_us

    @property
    def wall_delta_ratio(self) -> float | None:
        return self.wall_delta_us / self.base.wall_us if self.base.wall_us > 0 else None

    @property
    def wall_spread_us(self) -> float | None:
        s = [x for x in (self.base.wall_spread_us, self.new.wall_spread_us) if x is not None]
        return max(s) if s else None

    def where(self) -> tuple[tuple[str, float], ...]:
        """Where the step's difference went: modules and outside modules (each without its
        collective kernels), collectives, idle; they add up to the step's wall-time Δ."""
        b, n = self.base, self.new

        def inside(s: SideSummary) -> float:
            return s.collectives_us - s.collectives_outside_us

        parts = (
            ("modules", (n.modules_us - inside(n)) - (b.modules_us - inside(b))),
            (
                "outside modules",
                (n.outside_us - n.collectives_outside_us) - (b.outside_us - b.collectives_outside_us),
            ),
            ("collectives", n.collectives_us - b.collectives_us),
            ("idle", n.idle_us - b.idle_us),
        )
        return tuple((k, v if abs(v) >= 0.001 else 0.0) for k, v in parts)  # float rounding

    def walk(self, start: int | None = None):
        stack = [start] if start is not None else list(reversed(self.roots))
        while stack:
            node = self.nodes[stack.pop()]
            yield node
            stack.extend(reversed(node.children))

    def find(self, name: str) -> DiffNode:
        """A node by qualified name (either side's) or key, else as
        :meth:`ModuleProfile.find <traceprof.result.model.ModuleProfile.find>` looks: a class
        or short name, then a part of one. Raises ``ModuleLookupError`` (a KeyError) with
        close matches."""
        return find_named(self.nodes, name, "either trace", keys=lambda n: (n.key,))

    def __repr__(self) -> str:
        from traceprof.render.notebook import diff_repr  # presentation lives in render/

        return diff_repr(self)

    def _repr_html_(self) -> str:
        """The step's change, the largest changes and an icicle, for Jupyter (docs/notebooks.md)."""
        from traceprof.render.notebook import diff_html

        return diff_html(self)

    def modules(self) -> list[DiffNode]:
        return [n for n in self.nodes if n.kind is NodeKind.MODULE]

    def own_delta_us(self, node: DiffNode) -> float:
        """``node``'s Δ without its children's: the change in its own work."""
        return node.delta_us - sum(self.nodes[c].delta_us for c in node.children)

    def ranked(self) -> list[DiffNode]:
        """Module nodes by |Δ of their own time| (without their children's), largest first:
        where the change is, rather than every ancestor that contains it."""
        return sorted(self.modules(), key=lambda n: (-abs(self.own_delta_us(n)), n.id))

    def slower(self, percent: float, module: str | None = None) -> str | None:
        """A one-line reason when the new run is slower than the base by more than ``percent``
        % (the step's wall time, or ``module``'s time over all passes), else None."""
        if module is None:
            base, new, what = self.base.wall_us, self.new.wall_us, "the step"
        else:
            try:
                node = self.find(module)
            except ModuleLookupError as e:
                if e.matches:  # several modules answer the name: the error names them
                    raise
                raise OptionError(
                    f"module {module!r} is in neither trace{did_you_mean(e.suggestions)}"
                ) from None
            base, new, what = node.base_us, node.new_us, f"module {module}"
        from traceprof import units

        if base <= 0:
            if new <= 0:
                return None
            return f"{what} takes {units.duration(new)} in the new run, 0 before"
        ratio = (new - base) / base
        if ratio * 100 > percent:
            return (
                f"{what} is {units.percent(ratio)} slower ({units.duration(base)} -> "
                f"{units.duration(new)} per step), more than {percent:g}%"
            )
        return None

    def rows(self) -> list[dict]:
        from traceprof.compare.records import diff_rows

        return diff_rows(self)

    def to_dataframe(self):
        """One row per node and pass, sorted by |Δ| (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows())


# --- building


def diff(
    base: Trace | Side | str | os.PathLike,
    new: Trace | Side | str | os.PathLike,
    *,
    hierarchy: Source | str | None = None,
    max_memory: int | str | None = None,
    parallel: bool = True,
    cache: bool | None = None,
    step: int | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    progress: Progress | None = None,
) -> DiffProfile:
    """Compare two traces (paths, :class:`Trace` objects or sides from
    :func:`traceprof.compare.side.side_of`): per module and pass, base -> new.

    Two paths are analyzed in two processes at once when ``parallel`` (each returns only its
    small tables). ``cache``: read the paths' decoded traces from the cache, and write them there
    (default: unless ``$TRACEPROF_CACHE`` is ``off``; see :mod:`traceprof.read.cache`).
    ``step``: compare that ProfilerStep of each trace (the same number in both) instead of the
    mean of their complete steps. ``depth``, ``top``, ``sort``, ``ignore``: the result
    :meth:`DiffProfile.shaped` (``sort`` None: the change of GPU time when shaped, as ``traceprof
    diff`` sorts; unshaped, the modules stay as they first ran). ``progress``: called with what the diff is doing (the stages
    of each trace analyzed in this process, as :func:`traceprof.analyze`'s)."""
    # checked and made plain int once, as the command line does (numpy.int64(2) is 2)
    step = options.argument("step", step, int, min=0)
    depth = options.argument("depth", depth, int, min=0)
    top = options.argument("top", top, int, min=1)
    sides = _sides([base, new], hierarchy, max_memory, parallel, cache, step, progress)
    if progress:
        progress("comparing")
    return _shaped(compare(*sides), depth, top, sort, ignore)


def _shaped(result: DiffProfile, depth, top, sort, ignore) -> DiffProfile:
    if depth is None and top is None and sort is None and not ignore:
        return result
    return result.shaped(depth=depth, top=top, sort=sort or "gpu", ignore=ignore)


def _sides(items, hierarchy, max_memory, parallel, cache=None, step=None, progress=None) -> list[Side]:
    """Each item as a :class:`Side`; the paths among them analyzed by the local engine's process
    pool (one worker per trace, at most the CPUs) when ``parallel``."""
    out = list(items)
    # sides in the cache (a CI baseline): the rest has the cores; content hashes computed once
    given = [i for i, x in enumerate(items) if not isinstance(x, (Side, Trace))]
    contents: dict[int, str | None] = {}
    found = cached_sides(
        [items[i] for i in given], hierarchy=hierarchy, cache=cache, step=step, progress=progress
    )
    for i, (hit, content) in zip(given, found):
        out[i], contents[i] = hit or items[i], content
    paths = [i for i, x in enumerate(out) if not isinstance(x, (Side, Trace))]
    if parallel and len(paths) > 1 and _size(items[i] for i in paths) > PARALLEL_FROM_BYTES:
        from traceprof.engine import LocalEngine, default_jobs

        engine = LocalEngine(min(len(paths), default_jobs()))
        if progress:
            progress(
                f"analyzing {' and '.join(os.path.basename(str(items[i])) for i in paths)}, a process each"
            )
        got = engine.map(
            _side_task,
            [(str(items[i]), hierarchy, max_memory, cache, contents.get(i), step) for i in paths],
        )
        for i, side in zip(paths, got):
            out[i] = side
    for i, x in enumerate(out):
        if not isinstance(x, Side):
            out[i] = side_of(
                x,
                hierarchy=hierarchy,
                max_memory=max_memory,
                cache=cache,
                content=contents.get(i),
                step=step,
                progress=progress,
            )
    return out


def _size(paths) -> int:
    total = 0
    for p in paths:
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total


def _side_task(task) -> Side:
    path, hierarchy, max_memory, cache, content, step = task
    return side_of(path, hierarchy=hierarchy, max_memory=max_memory, cache=cache, content=content, step=step)


def _summary(side: Side) -> SideSummary:
    p = side.profile
    module_us = sum(
        p.nodes[r].total.__getattribute__(side.metric) for r in p.roots if p.nodes[r].kind is NodeKind.MODULE
    )
    bucket = p.unattributed
    # outside the modules: the bucket, and compiled or replayed work no module is around (roots
    # of kind compiled), so that modules + outside + idle add up to the step
    compiled_roots = [p.nodes[r] for r in p.roots if p.nodes[r].kind is NodeKind.COMPILED]
    outside = (getattr(bucket.total, side.metric) if bucket else 0.0) + sum(
        getattr(n.total, side.metric) for n in compiled_roots
    )
    outside_paths = [BUCKET_PATH] + [tuple(n.path) for n in compiled_roots]

    def collective(labels: dict) -> float:
        return sum(
            v
            for k, v in labels.items()
            if side.label_kind == "kernel" and schema.COLLECTIVE_KERNEL_RE.match(k)
        )

    collectives = collective(side.labels)
    outside_collectives = sum(
        collective(side.inside.get((path, code), {})) for path in outside_paths for code in range(len(PASSES))
    )
    time_us = p.selection.gpu_busy_us if p.has_gpu else p.selection.cpu_us
    return SideSummary(
        path=side.path,
        device=", ".join(p.device_names) if p.has_gpu else "CPU",
        has_gpu=p.has_gpu,
        source=p.source,
        steps=side.step_numbers,
        wall_us=p.selection.wall_us,
        time_us=time_us,
        wall_spread_us=_stdev(side.step_wall_us),
        modules_us=module_us,
        outside_us=outside,
        collectives_us=collectives,
        collectives_outside_us=outside_collectives,
        complete_steps=tuple(s for s in p.selection.in_trace if s not in p.selection.incomplete),
        **_memory_fields(p),
    )


def _memory_fields(p: ModuleProfile) -> dict[str, Any]:
    """A side's memory summary for SideSummary: activations, the peak and its categories."""
    m = p.memory_summary
    if m is None:
        return {}
    peak = m.peak
    categories: tuple[tuple[str, float | None], ...] = ()
    if peak is not None:
        categories = (
            ("activations", peak.activations_bytes),
            ("gradients", peak.gradients_bytes),
            ("optimizer state", peak.optimizer_state_bytes),
            ("temporaries", peak.temporaries_bytes),
            ("parameters", peak.parameters_bytes if peak.parameters_in_total else None),
            ("before the trace", peak.before_trace_bytes),
        )
    return {
        "memory_device": m.device,
        "activation_bytes": m.activation_bytes,
        "peak_bytes": peak.total_bytes if peak is not None else None,
        "peak_categories": categories,
    }


def _stdev(values) -> float | None:
    values = list(values)
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


_NAMED_SOURCES = ("traceprof", "lightning")


def _keys(profile: ModuleProfile, by_name: bool) -> dict[int, str]:
    """The matching key of each node of ``profile``."""
    keys: dict[int, str] = {}
    for node in profile.walk():
        if node.kind is not NodeKind.MODULE:
            keys[node.id] = node.qualified_name
        elif by_name:
            keys[node.id] = (
                f"{node.qualified_name} ({node.class_name})"
                if node.qualified_name
                else f"({node.class_name})"
            )
        else:
            parent = keys[node.parent] + "/" if node.parent >= 0 else ""
            siblings = profile.nodes[node.parent].children if node.parent >= 0 else profile.roots
            same = [
                s
                for s in siblings
                if profile.nodes[s].kind is NodeKind.MODULE and profile.nodes[s].class_name == node.class_name
            ]
            keys[node.id] = f"{parent}{node.class_name or node.name}#{same.index(node.id)}"
    return keys


def compare(base: Side, new: Side) -> DiffProfile:
    """The diff of two analyzed sides."""
    warnings: list[str] = []
    bp, np_ = base.profile, new.profile
    by_name = bp.source in _NAMED_SOURCES and np_.source in _NAMED_SOURCES
    if bp.source != np_.source and not by_name:
        warnings.append(
            f"the module trees come from different sources ({bp.source} in the base, "
            f"{np_.source} in the new trace): modules matched by class path"
        )
    metric = base.metric
    if base.metric != new.metric:
        metric = "cpu_us"
        cpu_side = "base" if base.metric == "cpu_us" else "new"
        warnings.append(
            f"the {cpu_side} trace has no GPU work: comparing CPU time only "
            "(GPU time, kernels and collectives cannot be compared)"
        )
    bkeys, nkeys = _keys(bp, by_name), _keys(np_, by_name)
    bnode = {k: bp.nodes[i] for i, k in bkeys.items()}
    nnode = {k: np_.nodes[i] for i, k in nkeys.items()}
    bmods = {k for k, n in bnode.items() if n.kind is NodeKind.MODULE}
    nmods = {k for k, n in nnode.items() if n.kind is NodeKind.MODULE}
    if bmods and nmods:
        share = len(bmods & nmods) / len(bmods | nmods)
        if share < SAME_MODEL_SHARE:
            warnings.append(
                f"the traces look like different models: {len(bmods & nmods)} of "
                f"{len(bmods | nmods)} modules match; unmatched ones are listed as "
                "added or removed, the step and outside-module times still compare"
            )
    parents_b = {k: bkeys[bp.nodes[i].parent] if bp.nodes[i].parent >= 0 else None for i, k in bkeys.items()}
    parents_n = {
        k: nkeys[np_.nodes[i].parent] if np_.nodes[i].parent >= 0 else None for i, k in nkeys.items()
    }
    order = list(dict.fromkeys(list(bkeys.values()) + list(nkeys.values())))
    kinds = base.label_kind if base.label_kind == new.label_kind else "op"
    built: dict[str, tuple] = {}
    for key in order:
        b, n = bnode.get(key), nnode.get(key)
        status = Status.MATCHED if b and n else (Status.REMOVED if b else Status.ADDED)
        passes = tuple(_pass_delta(p, b, n, bp, np_, base, new, metric) for p in PASSES)
        inside = _inside(b, n, base, new, kinds) if base.metric == new.metric else ()
        parent = parents_n.get(key) if n is not None else parents_b.get(key)
        spread = _node_spread(b, base, metric) if b is not None else None
        if n is not None:
            other = _node_spread(n, new, metric)
            spread = other if spread is None else (spread if other is None else max(spread, other))
        built[key] = (b, n, status, passes, inside, parent, spread)
    # tree order: roots as in the traces (modules first, bucket last); siblings by |Δ|
    children: dict[str | None, list[str]] = {}
    for key in order:
        children.setdefault(built[key][5], []).append(key)

    def magnitude(key: str) -> float:
        return abs(sum(p.delta_us for p in built[key][3]))

    ids: dict[str, int] = {}
    flat: list[str] = []
    roots = children.get(None, [])
    roots = sorted((r for r in roots if r != BUCKET_PATH[0]), key=lambda k: -magnitude(k)) + [
        r for r in roots if r == BUCKET_PATH[0]
    ]
    stack = list(reversed(roots))
    while stack:
        key = stack.pop()
        ids[key] = len(flat)
        flat.append(key)
        kids = sorted(children.get(key, []), key=lambda k: -magnitude(k))
        children[key] = kids
        stack.extend(reversed(kids))
    depth: dict[str, int] = {}
    position = {key: i for i, key in enumerate(order)}
    nodes = []
    for key in flat:
        b, n, status, passes, inside, parent, spread = built[key]
        depth[key] = depth[parent] + 1 if parent is not None else 0
        ref: ModuleNode = n or b
        nodes.append(
            DiffNode(
                id=ids[key],
                parent=ids[parent] if parent is not None else -1,
                children=tuple(ids[c] for c in children.get(key, [])),
                depth=depth[key],
                key=key,
                name=ref.name,
                class_name=ref.class_name,
                qualified_name=ref.qualified_name,
                kind=ref.kind,
                status=status,
                passes=passes,
                inside=inside,
                spread_us=spread,
                order=position[key],
            )
        )
    fused_b, fused_n = fused_into(bp), fused_into(np_)
    nodes = [
        replace(
            node,
            base_fused_into=fused_b.get(node.qualified_name) if node.status is not Status.ADDED else None,
            new_fused_into=fused_n.get(node.qualified_name) if node.status is not Status.REMOVED else None,
        )
        if node.kind is NodeKind.MODULE and (node.qualified_name in fused_b or node.qualified_name in fused_n)
        else node
        for node in nodes
    ]
    bs, ns = _summary(base), _summary(new)
    if metric == "cpu_us" and (bs.has_gpu or ns.has_gpu):
        bs, ns = (_cpu_summary(s, side) for s, side in ((bs, base), (ns, new)))
    alone = [(label, s) for label, s in (("base", bs), ("new", ns)) if s.step_alone]
    if alone:  # the trace has more steps, but one was asked for
        traces = "both traces" if len(alone) == 2 else f"the {alone[0][0]} trace"
        warnings.append(
            f"step {alone[0][1].steps[0]} of {traces} is compared alone, not the mean of the "
            "complete steps: no step-to-step spread, changes cannot be told from noise"
        )
    for label, side in (("base", base), ("new", new)):
        if len(side.step_numbers) < 2 and label not in dict(alone):
            warnings.append(
                f"the {label} trace has {len(side.step_numbers) or 'no'} complete "
                "step"
                + ("s" if len(side.step_numbers) != 1 else "")
                + ": no step-to-step spread, changes cannot be told from noise"
            )
    return DiffProfile(
        base=bs,
        new=ns,
        metric=metric,
        matched_by="qualified name" if by_name else "class path",
        nodes=tuple(nodes),
        roots=tuple(ids[r] for r in roots),
        warnings=tuple(dict.fromkeys(warnings)),
    )


def fused_into(profile: ModuleProfile) -> dict[str, str]:
    """Module -> the ancestor that holds its work in kernels fused across modules, for the
    modules whose own work in ``profile`` is nothing but that (a compiled LayerNorm whose ops
    Inductor fused into its block's kernels): the qualified name of the node whose own ops
    list the module among a fused kernel's modules (:attr:`OpStat.modules`), the deepest such
    node where kernels of several passes sit on different ancestors; the model's root by its
    class."""
    own = {n.qualified_name: n for n in profile.nodes if n.kind is NodeKind.MODULE}
    holders: dict[str, ModuleNode] = {}
    for node in own.values():
        for op in node.ops:
            for module in (op.modules or "").split(", "):
                above = node.qualified_name == "" or module.startswith(node.qualified_name + ".")
                if module and module != node.qualified_name and module in own and above:
                    # kernels of several passes may sit on different ancestors: the deepest
                    if module not in holders or node.depth > holders[module].depth:
                        holders[module] = node
    field = "gpu_busy_us" if profile.has_gpu else "cpu_us"
    return {m: holder.label for m, holder in holders.items() if getattr(own[m].own, field) == 0}


def _node_spread(node: ModuleNode, side: Side, metric: str) -> float | None:
    """Step-to-step standard deviation of the node's time summed over the passes."""
    if side.metric != metric:
        return None
    per_pass = [side.node_steps.get((node.path, code)) for code in range(len(PASSES))]
    per_pass = [p for p in per_pass if p is not None]
    if not per_pass:
        return None
    return _stdev([sum(values) for values in zip(*per_pass)])


def _cpu_summary(s: SideSummary, side: Side) -> SideSummary:
    """A side's summary in CPU time (one of the traces has no GPU work)."""
    p = side.profile
    modules = sum(p.nodes[r].total.cpu_us for r in p.roots if p.nodes[r].kind is NodeKind.MODULE)
    bucket = p.unattributed

    return replace(
        s,
        time_us=p.selection.cpu_us,
        modules_us=modules,
        outside_us=bucket.total.cpu_us if bucket else 0.0,
        collectives_us=0.0,
        collectives_outside_us=0.0,
    )


def _pass_delta(
    phase: Pass,
    b: ModuleNode | None,
    n: ModuleNode | None,
    bp: ModuleProfile,
    np_: ModuleProfile,
    base: Side,
    new: Side,
    metric: str,
) -> PassDelta:
    def side(node, profile, s: Side):
        if node is None:
            return 0.0, 0.0, 0.0, None, None, 0.0, None, None
        t = node.phase(phase).total
        rate = profile.throughput(t).flop_per_s if t.flops else None
        mem = profile.memory_of(node)
        peak = mem.phase(phase).peak_bytes if mem is not None else None
        held = mem.activation_bytes if mem is not None and phase is Pass.FORWARD else None
        steps = s.node_steps.get((node.path, PASSES.index(phase))) if s.metric == metric else None
        return (
            getattr(t, metric),
            t.flops,
            t.kernels,
            rate,
            peak,
            node.calls if phase is not Pass.OTHER else 0.0,
            _stdev(steps or ()),
            held,
        )

    bt, bf, bk, br, bm, bc, bsd, ba = side(b, bp, base)
    nt, nf, nk, nr, nm, nc, nsd, na = side(n, np_, new)
    spreads = [x for x in (bsd, nsd) if x is not None]
    return PassDelta(
        phase, bt, nt, max(spreads) if spreads else None, bf, nf, bk, nk, br, nr, bm, nm, bc, nc, ba, na
    )


def _inside(
    b: ModuleNode | None, n: ModuleNode | None, base: Side, new: Side, kind: str
) -> tuple[InsideDelta, ...]:
    out = []
    for code, phase in enumerate(PASSES):
        bi = base.inside.get((b.path, code), {}) if b is not None else {}
        ni = new.inside.get((n.path, code), {}) if n is not None else {}
        for name in dict.fromkeys(list(bi) + list(ni)):
            bv, nv = bi.get(name), ni.get(name)
            if bv is not None and nv is not None:
                status = Status.MATCHED
            else:
                status = Status.ADDED if bv is None else Status.REMOVED
            if status is Status.MATCHED and nv == bv:
                continue
            out.append(InsideDelta(kind, name, phase, bv or 0.0, nv or 0.0, status))
    out.sort(key=lambda d: (-abs(d.delta_us), d.name, PASSES.index(d.phase)))
    return tuple(out[:TOP_INSIDE])


def diff_jobs(
    base_dir: str | os.PathLike,
    new_dir: str | os.PathLike,
    *,
    hierarchy: Source | str | None = None,
    max_memory: int | str | None = None,
    step: int | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    progress: Progress | None = None,
) -> DiffProfile:
    """Compare two jobs (directories of one trace per rank, found as ``traceprof analyze`` finds
    them: :func:`traceprof.read.discovery.find_traces`): rank by rank; the result is the diff of the rank
    whose step changed most, with every rank's step change in its warnings. ``step``, ``depth``,
    ``top``, ``sort``, ``ignore``, ``progress``: as :func:`diff`'s."""
    from traceprof.read.discovery import find_traces

    step = options.argument("step", step, int, min=0)
    depth = options.argument("depth", depth, int, min=0)
    top = options.argument("top", top, int, min=1)
    hierarchy = None if hierarchy == "auto" else hierarchy
    sides = []
    for d in (base_dir, new_dir):
        paths = find_traces([str(d)])
        got = _sides(paths, hierarchy, max_memory, parallel=True, step=step, progress=progress)
        by_rank = {}
        for s in got:
            rank = s.profile.metadata.rank
            by_rank[rank if rank is not None else 0] = s
        if len(by_rank) != len(got):
            raise OptionError(f"{d}: several traces of one rank; give one trace per rank")
        sides.append(by_rank)
    common = sorted(set(sides[0]) & set(sides[1]))
    if not common:
        raise OptionError(f"{base_dir} and {new_dir} have no rank in common")
    if progress:
        progress("comparing")
    diffs = {r: compare(sides[0][r], sides[1][r]) for r in common}
    worst = max(common, key=lambda r: (abs(diffs[r].wall_delta_us), -r))
    from traceprof import units

    notes = [
        f"jobs compared rank by rank ({len(common)} ranks in common); shown: rank {worst}, "
        "the largest step change; steps per rank: "
        + ", ".join(f"rank {r} {units.signed_duration(diffs[r].wall_delta_us)}" for r in common)
    ]
    only = sorted(set(sides[0]) ^ set(sides[1]))
    if only:
        notes.append("ranks in one job only: " + ", ".join(map(str, only)))
    shown = diffs[worst]

    return _shaped(replace(shown, warnings=tuple(notes) + shown.warnings), depth, top, sort, ignore)
