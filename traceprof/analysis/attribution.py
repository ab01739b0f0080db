"""Attribution: GPU work and CPU time -> module nodes, forward and backward, per step.

Every quantity is attributed through a CPU event: a GPU work item through its anchor (the launch,
see :mod:`traceprof.analysis.link`), CPU time through the slice it was spent in (exclusive time).
A CPU event belongs to

- the **forward** of the node of its innermost scope, when it is not inside a backward node op;
- the **backward** of the node of a scope re-run inside the backward (activation checkpointing);
- otherwise the **backward** of the node of the forward op that created its backward node op;
- otherwise the "not in any module" bucket, grouped by its top-level op or annotation.

Steps: each item belongs to the ``ProfilerStep#N`` whose CPU interval holds its launch (or its
own start when it has no launch). Numbers are the mean over the selected steps.

FLOPs and bytes are those of the counted ops (:mod:`traceprof.analysis.op_costs`), attributed
like every other CPU event: a backward op goes to the module of the forward op that created it.

Compiled models: a trace with the compiled-kernel table gets its compiled kernels' modules first
(:mod:`.compiled`: the tree's ``event_node``, nodes made by qualified name, FLOPs from the
table's nodes), before the stages below; the compiled regions' and graph replays' work without
module information gets group nodes (:mod:`.compiled_regions`: per graph, per kernel family).
Between the two, the labels PyTorch's own tools write on GPU work (:mod:`.kernel_labels`: a
module's qualified name, a source stack) place the work they name in its module.

This module runs the stages in order, each in its own module:

- :mod:`.steps`: the steps of the trace and the selected ones;
- :mod:`.classify`: the selection and each CPU event's node and pass;
- :mod:`.cpu_time`, :mod:`.gpu_work`, :mod:`.counted_ops`: CPU time, GPU work and ops of the
  selection, attributed;
- :mod:`.unattributed`: the "not in any module" groups of the rest;
- :mod:`.memory_events`: the ``[memory]`` events, attributed;
- :mod:`.node_metrics`, :mod:`.module_tree`: the per-node sums and the tree of ModuleNodes;
- :mod:`.event_detail`: each node's ops and the step timeline;
- :mod:`.selection_totals`: the totals of the selection and the linker's statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from traceprof.analysis.classify import Context, make_context
from traceprof.analysis.compiled import (
    TABLE_DESCRIPTION,
    CompiledWork,
    compiled_summary,
    join_compiled,
    with_compiled_costs,
)
from traceprof.analysis.compiled_regions import compiled_work_warnings, group_unexplained, grouped_description
from traceprof.analysis.counted_ops import Ops, flop_summary, ops_in_selection, with_peak
from traceprof.analysis.cpu_time import CpuTime, cpu_time
from traceprof.analysis.event_detail import first_step_timeline, node_ops
from traceprof.analysis.gpu_work import GpuWork, gpu_work
from traceprof.analysis.hierarchy import Hierarchy, Source, build_hierarchy, check_depth
from traceprof.analysis.kernel_labels import LabelWork, place_labelled_work
from traceprof.analysis.lifetimes import Lifetimes, lifetimes
from traceprof.analysis.link import Links, link
from traceprof.analysis.memory import memory_by_node
from traceprof.analysis.memory_events import SelectedMemory, memory_device, memory_events
from traceprof.analysis.memory_holders import (
    BackwardSpans,
    activations_by_node,
    backward_spans,
    lifetime_warnings,
    memory_summary,
    parameter_bytes,
)
from traceprof.analysis.module_tree import module_nodes, optimizer_totals, parents, tree_shape
from traceprof.analysis.node_metrics import calls, fused_metrics, own_metrics, subtree_totals_of
from traceprof.analysis.op_costs import OpCosts, count_ops
from traceprof.analysis.selection_totals import link_stats, step_selection
from traceprof.analysis.steps import Steps, find_steps, select_steps
from traceprof.analysis.unattributed import Groups, group_unattributed, unattributed_gpu_warnings
from traceprof.flops import Registry
from traceprof.result.memory import MemorySummary, MemoryUse
from traceprof.result.model import (
    FlopSummary,
    LinkStats,
    ModuleNode,
    ModuleProfile,
    StepSelection,
    module_node_count,
)
from traceprof.trace.columns import Trace, release_freed_memory

#: for traces without module events (the hierarchy fell back to annotations or nothing)
NO_MODULES_WARNING = (
    "no module events in the trace, so no per-module numbers (only per annotation or top-level "
    "op): for them, record with "
    "torch.profiler.profile(with_stack=True) (nn.Module events), or capture with "
    "traceprof.capture.profile(model, ...) (exact module names and shapes; README, docs/capture.md)"
)
#: warning for traces whose ops carry no shapes
NO_SHAPES_WARNING = (
    "trace recorded without shapes (record_shapes=False): FLOPs, bytes and throughput are not computed"
)


def analyze(
    trace: Trace,
    *,
    step: int | None = None,
    hierarchy: Source | str | None = None,
    formulas: Registry | None = None,
    peak_flops: float | None = None,
) -> ModuleProfile:
    """Attribute the trace's GPU and CPU time, FLOPs and bytes to its module tree.

    ``step``: a ``ProfilerStep`` number to analyze alone; by default the mean over the complete
    steps. ``hierarchy``: force a source of module information (see :class:`Source`).
    ``formulas``: the FLOP formulas to use (default: ``traceprof.flops.REGISTRY``).
    ``peak_flops``: the device's peak FLOP/s for MFU, replacing the peaks table's (and giving
    MFU on CPUs and devices not in it).
    """
    return analyze_steps(trace, [step], hierarchy=hierarchy, formulas=formulas, peak_flops=peak_flops)[0]


def module_hierarchy(
    trace: Trace, links: Links, hierarchy: Source | str | None = None, formulas: Registry | None = None
) -> tuple[Hierarchy, CompiledWork | None]:
    """The module tree every view of a trace uses: built from its scopes or events, joined to
    its compiled-kernel table, with the GPU work its kernel labels name placed, and with the
    compiled and replayed work neither explains grouped per graph and kernel family (the join,
    None without a table)."""
    tree, compiled, _ = _module_tree(trace, links, hierarchy, formulas)
    return tree, compiled


def _module_tree(
    trace: Trace, links: Links, hierarchy: Source | str | None, formulas: Registry | None
) -> tuple[Hierarchy, CompiledWork | None, LabelWork | None]:
    """:func:`module_hierarchy`, and what the kernel labels placed (None: nothing)."""
    tree = build_hierarchy(trace, links, hierarchy)
    scoped = len(tree.nodes)
    tree, compiled = join_compiled(trace, links, tree, formulas)
    tree, labels = place_labelled_work(trace, links, tree)
    tree = group_unexplained(trace, links, tree, compiled.explained if compiled is not None else None)
    if len(tree.nodes) > scoped:  # nodes the compiled-kernel table names, as deep as its module paths
        check_depth(trace, max(len(n.path) for n in tree.nodes), "modules of the compiled-kernel table")
    return tree, compiled, labels


def analyze_steps(
    trace: Trace,
    steps: Sequence[int | None],
    *,
    hierarchy: Source | str | None = None,
    formulas: Registry | None = None,
    peak_flops: float | None = None,
) -> list[ModuleProfile]:
    """One profile per entry of ``steps`` (a step number, or None for the mean over the complete
    steps), linking the trace, building its module tree and counting its ops once for all."""
    prepared = _prepare(trace, hierarchy, formulas)
    profiles = []
    for step in steps:
        profile, _ = _attribute_step(trace, prepared, step)
        profiles.append(with_peak(profile, peak_flops) if peak_flops is not None else profile)
    return profiles


def attributed(
    trace: Trace, *, step: int | None = None, hierarchy: Source | str | None = None
) -> tuple[ModuleProfile, Context]:
    """The profile of :func:`analyze`, and the context it was attributed in: the links, module
    tree, steps and selection, so that a view that needs more than the profile (a diff's side)
    does not link the trace again."""
    return _attribute_step(trace, _prepare(trace, hierarchy, None), step)


class _Prepared(NamedTuple):
    """What every step's attribution shares: the links, module tree, steps and op costs."""

    links: Links
    tree: Hierarchy
    compiled: CompiledWork | None
    labels: LabelWork | None
    found: Steps
    costs: OpCosts
    hints: list[str]
    #: the trace's blocks paired into lifetimes, and its backward passes (None: no addresses)
    lifetimes: tuple[Lifetimes, BackwardSpans | None]


def _prepare(trace: Trace, hierarchy: Source | str | None, formulas: Registry | None) -> _Prepared:
    links = link(trace)
    release_freed_memory()  # as after each stage of the attribution (stage.gives_memory_back)
    tree, compiled, labels = _module_tree(trace, links, hierarchy, formulas)
    found = find_steps(trace, links)
    costs = count_ops(trace, links, formulas, exclude=tree.scope_mask)
    if compiled is not None:
        costs = with_compiled_costs(costs, compiled)
    release_freed_memory()
    hints = []
    if tree.source in (Source.ANNOTATIONS, Source.NONE) and hierarchy in (None, "auto") and labels is None:
        hints.append(NO_MODULES_WARNING)
    life = lifetimes(trace)
    spans = backward_spans(trace, links, tree, found) if life.has_addresses else None
    return _Prepared(links, tree, compiled, labels, found, costs, hints, (life, spans))


def _attribute_step(trace: Trace, p: _Prepared, step: int | None) -> tuple[ModuleProfile, Context]:
    selected, selection_warnings = select_steps(p.found, step, trace.metadata.path)
    ctx = make_context(trace, p.links, p.tree, p.found, selected)
    return _attribute(ctx, p.hints + selection_warnings, p.costs, p.compiled, p.labels, p.lifetimes), ctx


def _described(tree: Hierarchy, compiled: CompiledWork | None, labels: LabelWork | None) -> str:
    """Where the tree's nodes come from (the header's ``modules:`` line): its source, the
    compiled-kernel table, the kernel labels and the group nodes; the labels alone for a trace
    with no module or annotation events of its own."""
    parts = (
        []
        if tree.source is Source.NONE and labels is not None and tree.missing is None
        else [tree.description]
    )
    if compiled is not None:
        parts.append(TABLE_DESCRIPTION)
    if labels is not None:
        parts.append(labels.description)
    return " + ".join(parts) + grouped_description(tree)


class _Selected(NamedTuple):
    """The selection's events, attributed: CPU time, GPU work, counted and unsupported ops, the
    "not in any module" groups of the rest and the memory events."""

    cpu: CpuTime
    gpu: GpuWork
    counted: Ops
    unsupported: Ops
    groups: Groups
    memory: SelectedMemory


def _select(ctx: Context, costs: OpCosts) -> _Selected:
    """The first stages: the selection's CPU time, GPU work and ops, the groups of what no
    module holds, and the memory events."""
    cpu = cpu_time(ctx)
    gpu = gpu_work(ctx)
    counted = ops_in_selection(ctx, costs.counted, costs.node)
    unsupported = ops_in_selection(ctx, costs.unsupported)
    groups = Groups(ctx)
    group_unattributed(groups, cpu, gpu, counted, unsupported)
    memory = memory_events(ctx, groups)
    return _Selected(cpu, gpu, counted, unsupported, groups, memory)


def _fused(
    ctx: Context,
    s: _Selected,
    parent: np.ndarray,
    compiled: CompiledWork | None,
    labels: LabelWork | None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """The fused kernels' own and subtree metrics (None: no compiled table, no labelled spans)."""
    if compiled is None and (labels is None or not len(labels.spans)):
        return None
    fused_own = fused_metrics(ctx, s.groups.n_nodes, s.cpu, s.gpu, compiled, labels)
    return (fused_own, subtree_totals_of(fused_own, parent))


def _attribute(
    ctx: Context,
    warnings: list[str],
    costs: OpCosts,
    compiled: CompiledWork | None,
    labels: LabelWork | None = None,
    memory_lifetimes: tuple[Lifetimes, BackwardSpans | None] | None = None,
) -> ModuleProfile:
    """The ModuleProfile of the context's selected steps: every stage in order."""
    trace, links, tree = ctx.trace, ctx.links, ctx.tree
    s = _select(ctx, costs)
    cpu, gpu, counted, unsupported, groups, memory = s
    n_nodes = groups.n_nodes
    own = own_metrics(ctx, n_nodes, cpu, gpu, counted, unsupported, costs)
    node_calls = calls(ctx, n_nodes, compiled, labels)
    parent = parents(tree, groups)
    total = subtree_totals_of(own, parent)
    fused = _fused(ctx, s, parent, compiled, labels)
    shape = tree_shape(tree, groups, total, parent, trace.metadata.module_table)
    life, spans = memory_lifetimes or (lifetimes(trace), None)
    activation = activations_by_node(ctx, memory, life, spans, n_nodes) if spans is not None else None
    memory_use = memory_by_node(
        trace, memory.keep, memory.node, memory.pass_code, parent, ctx.n_steps, activation
    )
    ops_of = node_ops(ctx, groups, cpu, gpu, counted, costs, compiled, labels)
    nodes, new_id = module_nodes(
        ctx,
        groups,
        shape,
        own=own,
        total=total,
        calls=node_calls,
        memory_use=memory_use,
        ops_of=ops_of,
        fused=fused,
    )
    holders = _holders(ctx, s, (life, spans), activation, parent, memory_use, (nodes, new_id))
    timeline = first_step_timeline(
        ctx,
        parent,
        _paths(nodes, new_id, n_nodes),
        cpu,
        gpu,
        memory,
        memory_device(memory_use),
        compiled,
        (life, spans) if spans is not None else None,
    )
    selection = step_selection(ctx, cpu, gpu, counted, unsupported, costs)
    stats = link_stats(trace, links)
    all_warnings = _all_warnings(ctx, warnings, s, life, selection, compiled, labels, costs)
    return ModuleProfile(
        metadata=trace.metadata,
        source=tree.source,
        source_description=_described(tree, compiled, labels),
        nodes=tuple(nodes),
        roots=tuple(new_id[r] for r in shape.roots),
        selection=selection,
        stats=stats,
        module_nodes=module_node_count(nodes),
        warnings=tuple(all_warnings),
        flops=_flops(ctx, s, costs, selection, stats),
        optimizer_step=optimizer_totals(nodes, annotations=tree.source is Source.ANNOTATIONS),
        memory_device=memory_device(memory_use),
        timeline=timeline,
        memory_summary=holders,
        compiled=compiled_summary(ctx, compiled, cpu, gpu) if compiled is not None else None,
    )


def _holders(
    ctx: Context,
    s: _Selected,
    memory_lifetimes: tuple[Lifetimes, BackwardSpans | None],
    activation: np.ndarray | None,
    parent: np.ndarray,
    memory_use: list[tuple[MemoryUse, ...]],
    numbered: tuple[list[ModuleNode], dict[int, int]],
) -> MemorySummary | None:
    """The holders of the memory device's memory, named by the ModuleNodes (``numbered``: the
    nodes and the new id of each attribution node)."""
    nodes, new_id = numbered
    n_nodes = s.groups.n_nodes
    return memory_summary(
        ctx,
        s.memory,
        *memory_lifetimes,
        memory_device(memory_use),
        activation=activation,
        parent=parent,
        qualified_names=[nodes[new_id[i]].qualified_name for i in range(n_nodes)],
        paths=_paths(nodes, new_id, n_nodes),
        parameter_bytes=parameter_bytes(ctx.trace),
    )


def _paths(nodes: list[ModuleNode], new_id: dict[int, int], n_nodes: int) -> list[tuple[str, ...]]:
    """The module paths of the attribution's first ``n_nodes`` nodes, in its numbering."""
    return [nodes[new_id[i]].path for i in range(n_nodes)]


def _all_warnings(
    ctx: Context,
    warnings: list[str],
    s: _Selected,
    life: Lifetimes,
    selection: StepSelection,
    compiled: CompiledWork | None,
    labels: LabelWork | None,
    costs: OpCosts,
) -> list[str]:
    """The profile's warnings: the trace's, the tree's, the given ones, then the lifetimes',
    the unattributed GPU work's, the compiled work's and the missing shapes'."""
    gpu = s.gpu
    all_warnings = list(ctx.trace.metadata.warnings) + list(ctx.tree.warnings) + warnings
    all_warnings += lifetime_warnings(life)
    all_warnings += unattributed_gpu_warnings(
        selection, int(gpu.before_trace.sum()), int((gpu.no_launch & ~gpu.before_trace).sum()), len(gpu.work)
    )
    attributed = compiled.explained if compiled is not None else None
    labelled = labels.placed if labels is not None else None
    all_warnings += compiled_work_warnings(ctx, s.cpu, gpu, selection, attributed, labelled)
    if not costs.has_shapes:
        all_warnings.append(NO_SHAPES_WARNING)
    return all_warnings


def _flops(
    ctx: Context, s: _Selected, costs: OpCosts, selection: StepSelection, stats: LinkStats
) -> FlopSummary:
    """The FLOP summary of the selection, its throughput per step of GPU busy time (of CPU time
    on a trace without GPU work)."""
    has_gpu = stats.kernels + stats.memcpys + stats.memsets > 0
    return flop_summary(
        ctx.trace,
        ctx.links,
        costs,
        op_keep=s.counted.keep,
        unsupported_keep=s.unsupported.keep,
        anchor=s.gpu.anchor,
        busy=s.gpu.busy_us,
        n_steps=ctx.n_steps,
        has_gpu=has_gpu,
        step_time_us=selection.gpu_busy_us if has_gpu else selection.cpu_us,
    )
