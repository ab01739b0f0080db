"""Compiled regions and graph replays whose work has no module information: named, never silent.

A trace of a ``torch.compile``d model runs each compiled graph as one scope
(``Torch-Compiled Region: <frame>/<n>`` in the forward, ``CompiledFunctionBackward`` in the
backward); the kernels inside it carry no module scope, so without traceprof's compiled-kernel
table they land on the module around the region (the root when the whole model is compiled),
or in ``(not in any module)``. A CUDA / HIP graph replay is one launch (``cudaGraphLaunch``,
``hipGraphLaunch``) whose kernels all come from it. :func:`compiled_work_warnings` receives the
attributed CPU time and GPU work of the selection and returns one warning for each kind, with
its share of the step (GPU busy time, or CPU time on a trace without GPU work), the number of
regions, graphs and launches, the forward / backward split and the kernel families
(``schema.KERNEL_FAMILIES``), so the reader knows how much of the tree is not broken down
by module, and why. Work the compiled-kernel table attributed (``attributed``) is left out.

:func:`group_unexplained` gives that work nodes of its own in the module tree (group nodes,
``HierarchyNode.group``), before the attribution: under the module around each compiled
region (through its forward for ``CompiledFunctionBackward``), one node per compiled graph
(``[compiled 0/0 forward]``, ``[compiled 0/0 backward]``) and under it one per kernel family
(``[pointwise]``, ``[GEMM/extern]``, ...); under the module around each graph launch, one node
per replayed graph (``[graph replay 0]``: launches whose kernels have the same names in the
same order are one graph) and under it one per kernel family, except for the kernels that the
graph's capture in the trace attributes to modules (a capture whose kernels are the replay's,
:func:`_capture_of`). Brackets and spaces are
in no qualified module name, so a group node never takes a module's place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec
import numpy as np

from traceprof.analysis.classify import Context, classify_events
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.hierarchy import Hierarchy, HierarchyNode
from traceprof.analysis.link import Links
from traceprof.result.model import StepSelection
from traceprof.trace import schema
from traceprof.trace.columns import EventTable, Trace, index_dtype
from traceprof.trace.model import CompiledTable
from traceprof.trace.schema import Kind

#: the smallest share of the step worth a warning
WARN_SHARE = 0.01


def _counted(n: int, noun: str, plural: str | None = None) -> str:
    from traceprof import units

    return units.counted(n, noun, plural)


def kernel_families(names: Sequence[str]) -> list[str]:
    """The family of each kernel name (``schema.KERNEL_FAMILIES``; ``other`` when none fits)."""
    return [FAMILY_NAMES[f] for f in _kernel_family_codes(names).tolist()]


def _families_text(codes: np.ndarray, names: Sequence[str], weights: np.ndarray, total: float) -> str:
    """``pointwise 40%, GEMM/extern 35%, ...``: the families of the kernels whose name codes are
    ``codes`` (each distinct name matched once), largest first."""
    from traceprof import units

    distinct, inverse = np.unique(codes, return_inverse=True)
    family = _kernel_family_codes([names[c] for c in distinct.tolist()])[inverse.ravel()]
    share = np.bincount(family, weights=weights, minlength=len(FAMILY_NAMES))
    ranked = sorted(range(len(FAMILY_NAMES)), key=lambda f: -share[f])
    return ", ".join(f"{FAMILY_NAMES[f]} {units.percent(share[f] / total)}" for f in ranked if share[f] > 0)


def _table_advice(table: CompiledTable | None) -> str:
    """Why the regions' work has no module information, from what the capture recorded: the
    compiled-kernel table's own account when the trace has one, else how to get one."""
    if table is None:
        return "Capture with traceprof.capture.profile, which records the compiled-kernel table (docs/capture.md)"
    if table.omitted:
        first = table.omitted[0]
        what = (
            f"node {first.node} of graph {first.graph}" if first.node is not None else f"graph {first.graph}"
        )
        return (
            f"The trace's compiled-kernel table left out {_counted(len(table.omitted), 'item')} "
            f"(the first: {what}, {first.reason})"
        )
    if table.warnings:
        return (
            f"The trace's compiled-kernel table has no rows for these graphs; the capture "
            f"recorded {_counted(len(table.warnings), 'problem')} (the first: {table.warnings[0]})"
        )
    return "The trace's compiled-kernel table has no rows for these graphs"


def compiled_work_warnings(
    ctx: Context,
    cpu: CpuTime,
    gpu: GpuWork,
    selection: StepSelection,
    attributed: np.ndarray | None = None,
    labelled: np.ndarray | None = None,
) -> list[str]:
    """A warning for the compiled regions' work without module information, and one for the
    kernels of graph replays, when either is at least WARN_SHARE of the step. ``attributed``:
    per event, whether the compiled-kernel table gave it a module; ``labelled``: per event,
    whether a kernel label placed that GPU work (analysis.kernel_labels). Such work is left out."""
    ev = ctx.trace.events
    is_region = ev.named(lambda n: n.startswith(schema.COMPILED_REGION_PREFIX))
    is_backward = ev.named(lambda n: n == schema.COMPILED_BACKWARD_NAME)
    if not (is_region.any() or is_backward.any() or schema.GRAPH_LAUNCH_NAMES & set(ev.names)):
        return []
    has_gpu = len(gpu.work) > 0 and selection.gpu_busy_us > 0
    out = _region_warning(ctx, cpu, gpu, selection, is_region, is_backward, has_gpu, attributed, labelled)
    if has_gpu:
        out += _replay_warning(ctx, gpu, selection, labelled)
    return out


def _region_warning(
    ctx: Context,
    cpu: CpuTime,
    gpu: GpuWork,
    selection: StepSelection,
    is_region: np.ndarray,
    is_backward: np.ndarray,
    has_gpu: bool,
    attributed: np.ndarray | None,
    labelled: np.ndarray | None,
) -> list[str]:
    """The compiled regions' work without module information, on the GPU (through each item's
    anchor) or the CPU: a warning when it is at least WARN_SHARE of the step."""
    from traceprof import units  # warnings are text: numbers formatted in the one place

    names, codes = ctx.trace.events.names, ctx.trace.events.name
    region = ctx.links.nearest(is_region | is_backward)  # the innermost compiled scope, -1: none
    n = ctx.n_steps
    if has_gpu:
        anchor = np.maximum(gpu.anchor, 0)
        inside = (gpu.anchor >= 0) & (region[anchor] >= 0)
        if attributed is not None:
            inside &= ~attributed[anchor]
        if labelled is not None:
            inside &= ~labelled[gpu.work]
        weight, total, what = gpu.busy_us[inside], selection.gpu_busy_us * n, "GPU busy time"
        owner = region[anchor[inside]]
        kernels = codes[gpu.work[inside]]
    else:
        inside = region[cpu.events] >= 0
        if attributed is not None:
            inside &= ~attributed[cpu.events]
        weight, total, what = cpu.exclusive_us[inside], selection.cpu_us * n, "CPU time"
        owner = region[cpu.events[inside]]
        # on CPUs the kernels are the events themselves (Inductor's C++ kernels, extern ops)
        kernels = codes[cpu.events[inside]]
    share = float(weight.sum()) / total if total > 0 else 0.0
    if share < WARN_SHARE:
        return []
    backward = is_backward[owner]
    bwd_share = float(weight[backward].sum()) / total
    runs = np.unique(owner)
    bwd_runs = int(is_backward[runs].sum())
    frames = len({names[c] for c in codes[runs[~is_backward[runs]]].tolist()})
    of_frames = f" of {_counted(frames, 'compiled frame')}" if frames else ""
    return [
        f"{units.percent(share)} of the step's {what} ran in compiled regions "
        f"({units.counted(len(runs) - bwd_runs, 'forward run')}{of_frames}, "
        f"{units.counted(bwd_runs, 'backward run')}; forward "
        f"{units.percent(share - bwd_share)}, backward {units.percent(bwd_share)}) without "
        f"module information: it is grouped under the module around each region by graph "
        f"and kernel family (the [compiled <frame> forward|backward] nodes), not on its "
        f"submodules. Kernels: {_families_text(kernels, names, weight, total)}. "
        + _table_advice(ctx.trace.metadata.compiled_table)
    ]


def _replay_warning(
    ctx: Context, gpu: GpuWork, selection: StepSelection, labelled: np.ndarray | None
) -> list[str]:
    """The kernels of graph replays without module information (every kernel of a captured
    graph comes from one launch): a warning when they are at least WARN_SHARE of the step."""
    from traceprof import units  # warnings are text: numbers formatted in the one place

    ev, links = ctx.trace.events, ctx.links
    names, codes = ev.names, ev.name
    n = ctx.n_steps
    from_graph = ev.named(lambda nm: nm in schema.GRAPH_LAUNCH_NAMES)
    # the launching runtime call of each item of the selection (its anchor may be the op)
    position = np.searchsorted(links.gpu_work, gpu.work)
    item_launch = links.launch[position]
    replayed = (item_launch >= 0) & from_graph[np.maximum(item_launch, 0)]
    # kernels the graph's capture attributed to modules (not to a group node) are left out
    forced = ctx.tree.work_node[position] if ctx.tree.work_node is not None else position * 0 - 1
    no_module = np.array([hn.group for hn in ctx.tree.nodes] + [True], bool)
    on_module = replayed & ~no_module[np.where(forced >= 0, forced, len(ctx.tree.nodes))]
    replayed &= ~on_module
    all_replayed = (links.launch >= 0) & from_graph[np.maximum(links.launch, 0)]
    unmatched = _unmatched_replays(ev, links, ctx.tree, all_replayed)[position] & replayed
    weight = gpu.busy_us[replayed]
    share = float(weight.sum()) / (selection.gpu_busy_us * n)
    if share < WARN_SHARE:
        return []
    launches = len(np.unique(item_launch[replayed]))
    spelled = sorted({names[c] for c in codes[item_launch[replayed]].tolist()})
    kernels = codes[gpu.work[replayed]]
    by_label = on_module & labelled[gpu.work] if labelled is not None else on_module & False
    captured = int((on_module & ~by_label).sum())
    by_capture = (
        f" ({units.count(captured)} more kernels are on modules, through the graph's capture)"
        if captured
        else ""
    )
    if by_label.any():
        by_capture += (
            f" ({units.count(int(by_label.sum()))} more kernels are on modules, through their kernel labels)"
        )
    if unmatched.any():
        by_capture += (
            f" ({units.count(int(unmatched.sum()))} replayed kernels matched no capture in the "
            "trace: none has the replay's kernels in the same order, or several that do "
            "give them different modules)"
        )
    return [
        f"{units.percent(share)} of the step's GPU busy time is "
        f"{units.count(int(replayed.sum()))} kernels replayed from "
        f"{_counted(launches, 'graph launch', 'graph launches')} ({', '.join(spelled)}) without "
        f"module information{by_capture}: they are grouped per graph and kernel family "
        f"under the module around each launch (the [graph replay <n>] nodes). Kernels: "
        f"{_families_text(kernels, names, weight, selection.gpu_busy_us * n)}"
    ]


# -- group nodes for the work without module information ------------------------------------

#: the families a group node can have, in schema order, "other" last
FAMILY_NAMES: tuple[str, ...] = (*(f for f, _ in schema.KERNEL_FAMILIES), schema.OTHER_KERNEL_FAMILY)
_OTHER = len(FAMILY_NAMES) - 1
_EXTERN = FAMILY_NAMES.index(schema.EXTERN_KERNEL_FAMILY)


def graph_key(compile_id: str | None, backward: bool) -> str:
    """The group node of a compiled graph: ``[compiled 0/0 forward]``."""
    direction = "backward" if backward else "forward"
    return f"[compiled {compile_id} {direction}]" if compile_id else f"[compiled {direction}]"


def replay_key(graph: int) -> str:
    """The group node of a replayed CUDA / HIP graph: ``[graph replay 0]``."""
    return f"[graph replay {graph}]"


def family_key(family: str) -> str:
    """The group node of a kernel family: ``[pointwise]``."""
    return f"[{family}]"


def grouped_description(tree: Hierarchy) -> str:
    """What the header adds about the group nodes ("" when the tree has none)."""
    n = sum(hn.group for hn in tree.nodes)
    if not n:
        return ""
    return (
        f" + {_counted(n, 'group node')} of compiled or replayed work without module information "
        "(per graph and kernel family)"
    )


def _family_codes(names: Sequence[str]) -> np.ndarray:
    """Per name, its family's position in FAMILY_NAMES; -1 where no family's pattern fits."""
    out = np.full(len(names), -1, np.int16)
    for i, name in enumerate(names):
        for k, (_, pattern) in enumerate(schema.KERNEL_FAMILIES):
            if pattern.search(name):
                out[i] = k
                break
    return out


def _kernel_family_codes(names: Sequence[str]) -> np.ndarray:
    """Per kernel name, its family's position in FAMILY_NAMES, ``other`` where none fits."""
    codes = _family_codes(names)
    return np.where(codes >= 0, codes, _OTHER).astype(np.int16)


class _Tree:
    """The module tree growing: group nodes appended, each found again by (parent, key)."""

    def __init__(self, tree: Hierarchy) -> None:
        self.tree = tree
        self.nodes = list(tree.nodes)
        self.index = {(n.parent, n.key): n.id for n in tree.nodes if n.group}

    def node(self, parent: int, key: str, first_ts: float) -> int:
        found = self.index.get((parent, key))
        if found is not None:
            if first_ts < self.nodes[found].first_ts:
                self.nodes[found] = msgspec.structs.replace(self.nodes[found], first_ts=first_ts)
            return found
        above = self.nodes[parent] if parent >= 0 else None
        path = (above.path if above is not None else ()) + (key,)
        qualified = f"{above.qualified_name}.{key}" if above is not None and above.qualified_name else key
        node = len(self.nodes)
        self.nodes.append(HierarchyNode(node, parent, path, key, "", qualified, first_ts, group=True))
        self.index[(parent, key)] = node
        return node

    def is_group(self, nodes: np.ndarray) -> np.ndarray:
        flags = np.array([n.group for n in self.nodes] + [False], bool)
        out: np.ndarray = flags[np.where(nodes >= 0, nodes, len(self.nodes))]
        return out

    def now(self, event_node: np.ndarray) -> Hierarchy:
        return msgspec.structs.replace(self.tree, nodes=tuple(self.nodes), event_node=event_node)


def group_unexplained(trace: Trace, links: Links, tree: Hierarchy, explained: np.ndarray | None) -> Hierarchy:
    """The tree with group nodes for the compiled regions' and the graph replays' work that has
    no module information (see the module's doc); ``explained``: per event, whether the
    compiled-kernel table gave it a module (left alone). The tree unchanged when the trace has
    no such work."""
    ev = trace.events
    if not len(ev):
        return tree
    cpu = links.depth >= 0
    is_forward = ev.named(lambda s: s.startswith(schema.COMPILED_REGION_PREFIX)) & cpu
    is_backward = ev.named(lambda s: s == schema.COMPILED_BACKWARD_NAME) & cpu
    is_launch = ev.named(lambda s: s in schema.GRAPH_LAUNCH_NAMES) & cpu
    if not (is_forward.any() or is_backward.any() or is_launch.any()):
        return tree
    grown = _Tree(tree)
    index = index_dtype(len(ev))
    event_node = tree.event_node.astype(index) if tree.event_node is not None else np.full(len(ev), -1, index)
    call_node = np.full(len(ev), -1, index)
    work = links.gpu_work
    codes, inverse = np.unique(ev.name[work], return_inverse=True)
    work_family = _kernel_family_codes([ev.names[c] for c in codes.tolist()])[inverse.ravel()]
    replayed = (links.launch >= 0) & is_launch[np.maximum(links.launch, 0)]
    _group_regions(
        ev,
        links,
        tree,
        explained,
        (is_forward, is_backward),
        (work_family, replayed),
        grown,
        (event_node, call_node),
    )
    work_node = _group_replays(ev, links, grown, event_node, call_node, work_family, replayed, tree.work_node)
    if len(grown.nodes) == len(tree.nodes):
        return tree
    return msgspec.structs.replace(grown.now(event_node), work_node=work_node, call_node=call_node)


def _group_regions(
    ev: EventTable,
    links: Links,
    tree: Hierarchy,
    explained: np.ndarray | None,
    regions_of: tuple[np.ndarray, np.ndarray],
    work_of: tuple[np.ndarray, np.ndarray],
    grown: _Tree,
    out: tuple[np.ndarray, np.ndarray],
) -> None:
    """Group nodes for the compiled regions' work (``out``: event_node and call_node, filled):
    each event inside a region (the innermost), that the table did not explain and that no
    module scope inside the region holds, goes to the node of its region's graph, or of its
    kernel family (:func:`_event_families`) under it."""
    is_forward, is_backward = regions_of
    event_node, call_node = out
    is_region = is_forward | is_backward
    if not is_region.any():
        return
    region = links.nearest(is_region)
    scope_of = links.nearest(tree.scope_mask)
    inside = (links.depth >= 0) & (region >= 0)
    if explained is not None:
        inside &= ~explained
    if tree.event_node is not None:
        inside &= tree.event_node < 0
    depth = links.depth
    inside &= ~((scope_of >= 0) & (depth[np.maximum(scope_of, 0)] > depth[np.maximum(region, 0)]))
    events = np.flatnonzero(inside)
    if not len(events):
        return
    regions = np.unique(region[events])
    parent, _ = classify_events(regions, links, tree, scope_of)
    backward = links.backward_region[regions] >= 0
    # the compile id: a forward region's own; a compiled backward's through its forward op
    forward_region = links.nearest(is_forward)
    bnode = links.backward_node[regions]
    fop = np.where(bnode >= 0, links.forward_op[np.maximum(bnode, 0)], -1)
    named_by = np.where(
        is_forward[regions], regions, np.where(fop >= 0, forward_region[np.maximum(fop, 0)], -1)
    )
    prefix = len(schema.COMPILED_REGION_PREFIX)
    graph_node = np.full(len(ev), -1, np.int64)
    for k, r in enumerate(regions.tolist()):
        by = int(named_by[k])
        compile_id = ev.names[ev.name[by]][prefix:] if by >= 0 else None
        key = graph_key(compile_id, bool(backward[k]))
        graph_node[r] = grown.node(int(parent[k]), key, float(ev.ts[r]))
    call_node[regions] = graph_node[regions]
    family = _event_families(ev, links, inside, region, work_of)[events]
    graphs = graph_node[region[events]]
    node = graphs.copy()
    pairs, first, pair_of = np.unique(
        np.stack([graphs[family >= 0], family[family >= 0]], axis=1),
        axis=0,
        return_index=True,
        return_inverse=True,
    )
    at = events[family >= 0]
    pair_node = np.array(
        [
            grown.node(g, family_key(FAMILY_NAMES[f]), float(ev.ts[at[i]]))
            for (g, f), i in zip(pairs.tolist(), first.tolist())
        ]
        or [0],
        np.int64,
    )
    node[family >= 0] = pair_node[pair_of.ravel()]
    event_node[events] = node


def _event_families(
    ev: EventTable,
    links: Links,
    inside: np.ndarray,
    region: np.ndarray,
    work_of: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Per event inside a compiled region, the family of its kernel call (-1: none, the graph's
    wrapper code): the family of the innermost event around it (itself included) in the same
    region that has one. An op has the family its name says (``triton_poi_...``,
    ``graph_0_cpp_fused_...``); the CPU event a kernel is attributed through (its launch) has
    the kernel's, and the op around a launch too when its name says none; on a trace without
    GPU work, an ATen op (an extern kernel or fallback) is ``GEMM/extern``."""
    work_family, replayed = work_of
    is_op = ev.kind == Kind.CPU_OP
    named = _family_codes(ev.names)
    family = np.where(is_op & inside, named[ev.name], -1).astype(np.int16)
    anchor = links.anchor
    kernel = (anchor >= 0) & ~replayed
    at = anchor[kernel]
    mine = inside[at] & (family[at] < 0)
    family[at[mine]] = work_family[kernel][mine]
    launches = at[mine & (ev.kind[at] == Kind.RUNTIME)]
    above = links.parent[launches]
    ok = (above >= 0) & inside[np.maximum(above, 0)] & is_op[np.maximum(above, 0)]
    ok &= family[np.maximum(above, 0)] < 0
    family[above[ok]] = family[launches[ok]]
    if not len(links.gpu_work):
        aten = ev.named(lambda s: s.startswith(schema.ATEN_OP_PREFIX)) & is_op & inside
        family[aten & (family < 0)] = _EXTERN
    near = links.nearest((family >= 0) & inside)
    has = (near >= 0) & inside
    has &= region[np.maximum(near, 0)] == region
    out: np.ndarray = np.where(has, family[np.maximum(near, 0)], -1).astype(np.int16)
    return out


def _group_replays(
    ev: EventTable,
    links: Links,
    grown: _Tree,
    event_node: np.ndarray,
    call_node: np.ndarray,
    work_family: np.ndarray,
    replayed: np.ndarray,
    placed: np.ndarray | None = None,
) -> np.ndarray | None:
    """Group nodes for the kernels of graph replays; per GPU work item of ``links.gpu_work``,
    its node (-1: not replayed), or ``placed`` when nothing was replayed. ``placed``: per item,
    the node its kernel label gave it (analysis.kernel_labels), which it keeps. A launch's kernels, in the
    order they ran, are its graph's; launches whose kernels have the same names in the same
    order are one graph (``[graph replay N]``, numbered by first launch), under the node of the
    launch (whose CPU time it takes). A kernel goes to the module of the launch at its position
    in the graph's capture when the trace holds one whose kernels are the replay's
    (:func:`_capture_of`), else to the node of its family under its graph."""
    if not replayed.any():
        return placed
    items, launches, start, count, names = _replay_launches(ev, links, replayed)
    tree = grown.now(event_node)
    scope_of = links.nearest(tree.scope_mask)
    parent, _ = classify_events(launches, links, tree, scope_of)
    captures = _captures(ev, links, tree, scope_of)
    graph_of: dict[bytes, int] = {}
    work_node = (
        placed.copy() if placed is not None else np.full(len(links.gpu_work), -1, index_dtype(len(ev)))
    )
    for k in np.argsort(ev.ts[launches], kind="stable").tolist():
        launch, lo, n = int(launches[k]), int(start[k]), int(count[k])
        graph = graph_of.setdefault(names[lo : lo + n].tobytes(), len(graph_of))
        when = float(ev.ts[launch])
        holder = grown.node(int(parent[k]), replay_key(graph), when)
        event_node[launch] = call_node[launch] = holder
        its = items[lo : lo + n]
        node = np.full(n, -1, np.int64)
        captured = _capture_of(captures, names[lo : lo + n], when)
        if captured is not None:
            node = np.where(grown.is_group(captured), -1, captured)
        if placed is not None:  # labelled kernels keep the modules their labels name
            node = np.where(placed[its] >= 0, placed[its], node)
        for f in np.unique(work_family[its][node < 0]).tolist():
            node[(node < 0) & (work_family[its] == f)] = grown.node(holder, family_key(FAMILY_NAMES[f]), when)
        work_node[its] = node
    return work_node


def _replay_launches(
    ev: EventTable, links: Links, replayed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``replayed`` GPU work items (positions in ``links.gpu_work``) by launch, in the order
    they ran; the launches, where each one's items start and how many; the items' name codes."""
    items = np.flatnonzero(replayed)
    items = items[np.lexsort((ev.ts[links.gpu_work[items]], links.launch[items]))]
    launches, start, count = np.unique(links.launch[items], return_index=True, return_counts=True)
    return items, launches, start, count, ev.name[links.gpu_work[items]]


def _unmatched_replays(ev: EventTable, links: Links, tree: Hierarchy, replayed: np.ndarray) -> np.ndarray:
    """Per GPU work item of ``links.gpu_work``, whether it is a ``replayed`` kernel that no
    capture in the trace gives modules (:func:`_capture_of`); none when the trace holds no
    capture."""
    out = np.zeros(len(links.gpu_work), bool)
    captures = _captures(ev, links, tree, links.nearest(tree.scope_mask)) if replayed.any() else []
    if not captures:
        return out
    items, launches, start, count, names = _replay_launches(ev, links, replayed)
    for k, launch in enumerate(launches.tolist()):
        lo, n = int(start[k]), int(count[k])
        out[items[lo : lo + n]] = _capture_of(captures, names[lo : lo + n], float(ev.ts[launch])) is None
    return out


class _Capture(NamedTuple):
    """A graph capture in the trace: when it ended, the names (codes) of its launches' kernels in
    order (None when a launch has no kernel in the trace), the node each launch is given."""

    end: float
    kernels: bytes | None
    node: np.ndarray


def _captures(ev: EventTable, links: Links, tree: Hierarchy, scope_of: np.ndarray) -> list[_Capture]:
    """The graph captures in the trace, by end time: the kernel launches between a stream
    capture's begin and end on one thread (``schema.GRAPH_CAPTURE_BEGIN_NAMES``), in order, with
    the names of the kernels the trace joins to them (by correlation) and the node the
    attribution gives each launch (-1: none)."""
    cpu = links.depth >= 0
    begins = np.flatnonzero(ev.named(lambda s: s in schema.GRAPH_CAPTURE_BEGIN_NAMES) & cpu)
    if not len(begins):
        return []
    ends = np.flatnonzero(ev.named(lambda s: s in schema.GRAPH_CAPTURE_END_NAMES) & cpu)
    is_launch = ev.named(
        lambda s: schema.LAUNCH_NAME_RE.match(s) is not None and s not in schema.GRAPH_LAUNCH_NAMES
    )
    launches = np.flatnonzero(is_launch & (ev.kind == Kind.RUNTIME))
    launches = launches[np.argsort(ev.ts[launches], kind="stable")]
    joined = links.launch >= 0
    kernel_name = np.full(len(ev), -1, ev.name.dtype)  # per launch, its kernel's name
    kernel_name[links.launch[joined]] = ev.name[links.gpu_work[joined]]
    out = []
    for b in begins.tolist():
        same = ends[(ev.thread[ends] == ev.thread[b]) & (ev.ts[ends] >= ev.ts[b])]
        if not len(same):
            continue
        end = float(ev.ts[same].min())
        at = launches[
            (ev.thread[launches] == ev.thread[b]) & (ev.ts[launches] > ev.ts[b]) & (ev.ts[launches] < end)
        ]
        node, _ = classify_events(at, links, tree, scope_of)
        kernels = kernel_name[at]
        known = kernels.tobytes() if len(at) and (kernels >= 0).all() else None
        out.append(_Capture(end, known, node.astype(np.int64)))
    out.sort(key=lambda c: c.end)
    return out


def _capture_of(captures: list[_Capture], kernels: np.ndarray, when: float) -> np.ndarray | None:
    """The node of each launch of the capture of the graph that a launch at ``when`` with
    ``kernels`` (name codes, in order) replays: of the captures that ended before it, those
    whose kernels are ``kernels`` (same names, same order). None when there is none, or when
    such captures give the launches different nodes (no guess is made)."""
    key = kernels.tobytes()
    fits = {c.node.tobytes(): c.node for c in captures if c.end <= when and c.kernels == key}
    return next(iter(fits.values())) if len(fits) == 1 else None
