"""Compiled models: each kernel of a ``torch.compile`` graph joined to the module it works for,
through the compiled-kernel table that ``traceprof.capture`` embeds (docs/attribution.md
"Compiled models").

**Runs.** Every run of a compiled graph is a scope ``## Call CompiledFxGraph <key> ##`` whose
``<key>`` names the graph in the table (``graphs[key]``). Its direct children are the graph's
kernel calls: generated C++ / Triton kernels (``graph_<id>_cpp_fused_...``, ``triton_...``) and
extern kernels or fallbacks, which are ordinary aten op events.

**Matching.** The children of a run are walked in time order; each takes the next call site of
the graph whose ``event`` equals its name (a site whose event the table does not know takes any
child when no later site has its name). With the key ``None`` (FX graph cache bypassed) the
graph is found by the ``graph_<id>_`` prefix of the run's kernel events and the run's
direction (inside ``CompiledFunctionBackward``: backward), else by the compile id of its
``Torch-Compiled Region``.

**Modules.** A matched event (with everything nested in it and the GPU work launched inside it)
belongs to the module the call site names, relative to the *compiled root*: the module of the
run's scope as the attribution rules give it (the innermost module scope around the forward
region; for a backward graph the one of its forward, through ``Sequence number``), else the
root the table recorded. The module's node is made under the root by qualified name when the
trace has no scope for it (the hooks of submodules do not run inside compiled code), with the
levels in between that the module table lists, as an eager trace's tree has them. The pass is
the graph's: its runs in the backward are backward work.

**Fused kernels.** A kernel whose nodes belong to several modules lands in their lowest common
ancestor (the table's ``module``) and is *fused across modules*: its work is counted in the
node's fused record too, and ``--ops`` names the modules it spans.

**FLOPs** of generated kernels, whose events carry no shapes, come from their nodes through the
same formula registry as eager ops (each node's op and arguments as a trace would record them);
each node's cost goes to the node's own module, so that a module's FLOPs are the same compiled
or not. The nodes of one decomposed op call (``original_group``) count as that op, once. Extern
kernels are aten events with shapes, counted as in eager traces. Forward ops that a backward
graph computes again (activation recomputation) are reported apart (the summary's
``recomputed_flops``), not in the backward's FLOPs: a module's FLOPs in each pass are the
model's, as an eager trace counts them and as MFU counts them.

Python loops here run over graphs, call sites and distinct (root, site) pairs; per-event work is
numpy over columns, except the in-order walk of runs whose children do not follow the table's
call sites one to one (rare: a site without an event, an extra event).

This file holds the join's stages and its result; beside it: ``compiled_runs.py`` (runs matched
to graphs and call sites), ``compiled_nodes.py`` (the module nodes the join finds or makes),
``compiled_sites.py`` (each call site's module, owners of nodes, a kernel's cost by module) and
``compiled_args.py`` (a node's arguments as an op event records them, symbolic sizes).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
import numpy as np

from traceprof.analysis.classify import Context, classify_events
from traceprof.analysis.compiled_args import MAX_DIMS, MAX_SIZE, bound_sizes, is_symbolic
from traceprof.analysis.compiled_nodes import ModuleNodes
from traceprof.analysis.compiled_runs import GraphRuns, distinct
from traceprof.analysis.compiled_sites import call_site, original_groups, owners, site_costs
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.hierarchy import Hierarchy, Source
from traceprof.analysis.link import Links
from traceprof.analysis.op_costs import OpCosts
from traceprof.flops import REGISTRY, Registry
from traceprof.flops.shapes import OpCost
from traceprof.result.model import CompiledSummary
from traceprof.trace import schema
from traceprof.trace.columns import Trace, index_dtype
from traceprof.trace.model import CompiledTable
from traceprof.trace.module_names import joined_name

#: description of the module tree's source when the compiled-kernel table is joined
TABLE_DESCRIPTION = "compiled-kernel table"
#: sources whose nodes have qualified names, under which the table's modules can be named
_NAMED = (Source.TRACEPROF, Source.LIGHTNING)


class KernelShares(msgspec.Struct, frozen=True):
    """The FLOPs of generated kernels by module: one share per (matched kernel event, module of
    its nodes), each a row of these columns."""

    event: np.ndarray  # the kernel event
    run: np.ndarray  # its run's scope event
    backward: np.ndarray  # its graph is a backward graph
    node: np.ndarray  # the module's node
    span: np.ndarray  # code into CompiledWork.spans of its kernel, -1 when not fused
    cost: np.ndarray  # float64 (n, 4): flops, macs, bytes read, bytes written
    dtype: np.ndarray  # int32 codes into dtypes
    family: np.ndarray  # int32 codes into FAMILIES
    dtypes: tuple[str, ...]
    recomputed: np.ndarray  # FLOPs of forward ops computed again in a backward graph


class CompiledWork(msgspec.Struct, frozen=True):
    """The compiled graphs' kernel events joined to module nodes (numpy arrays; no per-event
    Python object)."""

    #: bool per event: the runs' ``## Call`` scopes (the ops inside a run are its kernels: an
    #: op table starts afresh there)
    boundary: np.ndarray
    #: per event: inside a kernel fused across modules (the kernel event and what it nests)
    event_fused: np.ndarray
    #: per event: in a compiled region (or compiled backward) whose graph runs the table joined:
    #: its kernels have their modules, the rest is the region's overhead, on the compiled root
    explained: np.ndarray
    events: np.ndarray  # the matched kernel events, by run then time
    node: np.ndarray  # per matched event: its node
    run: np.ndarray  # per matched event: its run's scope event
    backward: np.ndarray  # per matched event: its graph is a backward graph
    span: np.ndarray  # per matched event: code into spans, -1 when not fused
    spans: tuple[str, ...]  # "a, b": the modules a fused kernel's nodes belong to
    created: np.ndarray  # bool per tree node: made from the table (no scope of its own)
    #: bool per tree node: a container that is never called (a ModuleList), as eager traces
    #: have it (no calls)
    container: np.ndarray
    runs: np.ndarray  # every run's scope event, ascending
    run_graph: np.ndarray  # per run: its graph's position in graph_keys, -1: not in the table
    graph_keys: tuple[str, ...]
    children: np.ndarray  # every direct child of a run (its kernel calls)
    shares: KernelShares  # FLOPs of generated kernels by module
    #: generated kernel events whose cost the nodes give (no longer "unsupported")
    costed: np.ndarray
    warnings: tuple[str, ...]


class _Kernels(msgspec.Struct, frozen=True):
    """The matched kernel events (children of runs that matched a call site), by run then time,
    and the distinct (root, graph, site, binding) rows they are made of."""

    events: np.ndarray
    run: np.ndarray  # the run's scope event of each
    backward: np.ndarray  # its graph is a backward graph
    node: np.ndarray
    span: np.ndarray  # code into spans, -1 when not fused
    spans: tuple[str, ...]
    combo: np.ndarray  # the distinct (root, graph, site, binding) rows
    inverse: np.ndarray  # each event's row of combo


def join_compiled(
    trace: Trace, links: Links, tree: Hierarchy, registry: Registry | None = None
) -> tuple[Hierarchy, CompiledWork | None]:
    """The tree with the compiled kernels' modules (``event_node`` set, nodes made where the
    trace has no scope), and what the join found; ``(tree, None)`` when the trace has no
    compiled-kernel table or no run of its graphs."""
    table = trace.metadata.compiled_table
    ev = trace.events
    if table is None or not table.graphs or not len(ev):
        return tree, None
    keys = [m.group(1) if (m := schema.COMPILED_CALL_RE.match(s)) else None for s in ev.names]
    is_call_name = np.array([k is not None for k in keys], bool)
    is_call = is_call_name[ev.name] & (links.depth >= 0)
    runs = np.flatnonzero(is_call).astype(links.parent.dtype)
    if not len(runs):
        return tree, None
    if tree.source not in _NAMED:
        warning = (
            f"compiled-kernel table not used: the module tree comes from "
            f"{tree.source.description}, without qualified names to put its modules under"
        )
        return msgspec.structs.replace(tree, warnings=(*tree.warnings, warning)), None
    try:
        return _Join(trace, links, tree, table, keys, is_call, runs, registry or REGISTRY).result()
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:  # odd table contents
        warning = f"compiled-kernel table not joined ({e.__class__.__name__}: {e}); ignored"
        return msgspec.structs.replace(tree, warnings=(*tree.warnings, warning)), None


class _Join:
    """One join of a trace to its table (the state of :func:`join_compiled`)."""

    def __init__(
        self,
        trace: Trace,
        links: Links,
        tree: Hierarchy,
        table: CompiledTable,
        keys: list[str | None],
        is_call: np.ndarray,
        runs: np.ndarray,
        registry: Registry,
    ) -> None:
        self.trace, self.links, self.tree, self.table = trace, links, tree, table
        self.registry = registry
        self.is_call, self.runs = is_call, runs
        self.graph_runs = GraphRuns(trace, links, table, keys, is_call, runs)
        self.graph_keys, self.graphs = self.graph_runs.graph_keys, self.graph_runs.graphs
        self.warnings: list[str] = []
        self.owners = [owners(g) for g in self.graphs]
        self.originals = [original_groups(g, registry) for g in self.graphs]
        self.sites = [
            [call_site(g, i, owner, registry) for i in range(len(g.calls))]
            for g, owner in zip(self.graphs, self.owners)
        ]
        self.made = ModuleNodes(tree, table, trace.metadata.module_table)
        #: nodes not costed, by reason ("size": a size past any tensor's)
        self.problems: Counter[str] = Counter()
        #: symbolic sizes of runs (binding 0: none)
        self.sizes: list[dict[str, int]] = [{}]
        #: per binding: the cost of each distinct (op, arguments), worked out once
        self.node_costs: list[dict[bytes, tuple[OpCost, int] | None]] = [{}]

    # -- the join, stage by stage ------------------------------------------------------------

    def result(self) -> tuple[Hierarchy, CompiledWork]:
        runs, graph_runs = self.runs, self.graph_runs
        children, run_of_child = graph_runs.children()
        backward_run = self.links.backward_region[runs] >= 0
        run_graph = graph_runs.graphs_of_runs(children, run_of_child, backward_run)
        matched, site_of = graph_runs.match(children, run_of_child, run_graph)
        roots = self._roots(backward_run, run_graph)
        matched &= roots[np.searchsorted(runs, run_of_child)] >= 0
        kernels = self._kernels(
            children[matched], run_of_child[matched], site_of[matched], roots, run_graph, backward_run
        )
        # a call site whose event recurs (a GEMM template's micro-kernel, once per block) is
        # costed once per call: at its first event
        repeat = np.zeros(len(children), bool)
        repeat[1:] = (
            matched[1:]
            & matched[:-1]
            & (run_of_child[1:] == run_of_child[:-1])
            & (site_of[1:] == site_of[:-1])
        )
        shares, costed = self._shares(kernels, repeat[matched])
        self.made.order_created(
            self.trace.events.ts,
            np.concatenate([kernels.events, shares.event]),
            np.concatenate([kernels.node, shares.node]),
        )
        event_node, event_fused, explained = self._event_columns(kernels)
        self._warn(run_graph, children, matched)
        tree = msgspec.structs.replace(
            self.tree,
            nodes=tuple(self.made.nodes),
            event_node=event_node,
            warnings=(*self.tree.warnings, *self.table_warnings(), *self.warnings),
        )
        work = CompiledWork(
            boundary=self.is_call,
            event_fused=event_fused,
            explained=explained,
            events=kernels.events.astype(np.int64),
            node=kernels.node,
            run=kernels.run.astype(np.int64),
            backward=kernels.backward,
            span=kernels.span,
            spans=kernels.spans,
            created=self.made.created(),
            container=self.made.containers(),
            runs=runs.astype(np.int64),
            run_graph=run_graph,
            graph_keys=self.graph_keys,
            children=children.astype(np.int64),
            shares=shares,
            costed=costed,
            warnings=tuple(self.warnings),
        )
        return tree, work

    def _kernels(
        self,
        events: np.ndarray,
        run: np.ndarray,
        site: np.ndarray,
        roots: np.ndarray,
        run_graph: np.ndarray,
        backward_run: np.ndarray,
    ) -> _Kernels:
        """The node of each matched kernel event: one per distinct (root, graph, site, binding);
        the modules of a fused kernel's nodes named in ``spans``."""
        ev = self.trace.events
        run_pos = np.searchsorted(self.runs, run)
        binding = self._bindings(run_graph, backward_run)[run_pos]
        combo, first, inverse = distinct(
            np.stack([roots[run_pos], run_graph[run_pos], site, binding], axis=1)
        )
        combo_node = np.empty(len(combo), np.int64)
        combo_span = np.full(len(combo), -1, np.int64)
        spans: dict[str, int] = {}
        for k, (root, g, s, _) in enumerate(combo.tolist()):
            info = self.sites[g][s]
            combo_node[k] = self.made.node_for(root, info.module, float(ev.ts[events[first[k]]]))
            if info.fused:
                text = ", ".join(joined_name(self.made.nodes[root].qualified_name, m) for m in info.known)
                combo_span[k] = spans.setdefault(text, len(spans))
        return _Kernels(
            events=events,
            run=run,
            backward=backward_run[run_pos],
            node=combo_node[inverse],
            span=combo_span[inverse],
            spans=tuple(spans),
            combo=combo,
            inverse=inverse,
        )

    def _event_columns(self, kernels: _Kernels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per event of the trace: its node (the matched kernel it is in, or is), whether that
        kernel is fused across modules, and whether the join explains it (see CompiledWork)."""
        ev, links, events = self.trace.events, self.links, kernels.events
        n = len(ev)
        is_matched = np.zeros(n, bool)
        is_matched[events] = True
        around = links.nearest(is_matched)  # the matched event each event is in (or is)
        inside = around >= 0
        node_at = np.full(n, -1, np.int64)
        node_at[events] = kernels.node
        event_node = np.full(n, -1, index_dtype(n))
        event_node[inside] = node_at[around[inside]]
        fused_at = np.zeros(n, bool)
        fused_at[events] = kernels.span >= 0
        event_fused = np.zeros(n, bool)
        event_fused[inside] = fused_at[around[inside]]
        is_region = np.array(
            [
                s.startswith(schema.COMPILED_REGION_PREFIX) or s == schema.COMPILED_BACKWARD_NAME
                for s in ev.names
            ],
            bool,
        )[ev.name]
        region_of = links.nearest(is_region)
        joined = region_of[np.unique(kernels.run)]
        joined_region = np.zeros(n, bool)
        joined_region[joined[joined >= 0]] = True
        # a region that ran no graph (Dynamo ran the frame's bytecode: what a graph break left
        # of it) holds nothing but the compiled code's own work: overhead on the module around
        # it, as in a region whose graphs the table joined
        with_runs = region_of[self.runs]
        graphless = is_region.copy()
        graphless[with_runs[with_runs >= 0]] = False
        joined_region |= graphless
        explained = ((region_of >= 0) & joined_region[np.maximum(region_of, 0)]) | inside
        return event_node, event_fused, explained

    def _warn(self, run_graph: np.ndarray, children: np.ndarray, matched: np.ndarray) -> None:
        """The join's warnings: runs of graphs the table lacks, nodes not costed, module paths
        naming no module, kernel calls that matched no call site."""
        ev, runs = self.trace.events, self.runs
        if (run_graph < 0).any():
            missing = sorted({self.graph_runs.keys[c] or "" for c in ev.name[runs[run_graph < 0]].tolist()})
            n_runs = int((run_graph < 0).sum())
            self.warnings.append(
                f"{n_runs} run{'s' if n_runs != 1 else ''} of {len(missing)} compiled graph"
                f"{'s' if len(missing) != 1 else ''} not in the compiled-kernel table "
                f"({', '.join(k[:12] for k in missing[:3])}{', ...' if len(missing) > 3 else ''}): "
                "their kernels stay on the module around them"
            )
        if self.problems["size"]:
            n = self.problems["size"]
            self.warnings.append(
                f"{n} distinct node{'s' if n != 1 else ''} of the compiled-kernel table "
                f"{'have' if n != 1 else 'has'} sizes past any tensor's (more than {MAX_SIZE:.3g} "
                f"elements or {MAX_DIMS} dimensions): not costed, their kernels' FLOPs are lower bounds"
            )
        if self.made.named_nothing:
            names = sorted(self.made.named_nothing, key=lambda m: -self.made.named_nothing[m])
            self.warnings.append(
                f"{len(names)} module path{'s' if len(names) != 1 else ''} of the compiled-kernel table "
                f"name no module of the model ({', '.join(repr(m) for m in names[:3])}"
                f"{', ...' if len(names) > 3 else ''}): their kernels are on the nearest module the "
                "model has"
            )
        unmatched = len(children) - int(matched.sum())
        if unmatched:
            names = sorted({ev.names[c] for c in ev.name[children[~matched]].tolist()})
            self.warnings.append(
                f"{unmatched} kernel call{'s' if unmatched != 1 else ''} in compiled graphs "
                f"matched no call site of the compiled-kernel table ({', '.join(names[:3])}"
                f"{', ...' if len(names) > 3 else ''}): they stay on the module around them"
            )

    def table_warnings(self) -> list[str]:
        out = [f"compiled-kernel table: {w}" for w in self.table.warnings]
        omitted = self.table.omitted
        if omitted:
            first = omitted[0]
            what = (
                f"node {first.node} of graph {first.graph}"
                if first.node is not None
                else f"graph {first.graph}"
            )
            nodes = sum(1 for o in omitted if o.node is not None)
            out.append(
                f"compiled-kernel table: the capture left out {nodes} node(s) and "
                f"{len(omitted) - nodes} graph(s) it could not write (the first: {what}, {first.reason}); "
                "their kernels count on the module of their call site without their FLOPs"
            )
        return out

    def _bindings(self, run_graph: np.ndarray, backward: np.ndarray) -> np.ndarray:
        """Each run's symbolic sizes (an index into self.sizes; 0: none): a graph compiled with
        dynamic shapes has sizes such as "s77" in its nodes; a forward run's come from its
        ``CompiledFunction``'s inputs (the graph's placeholders, in order), a backward run's from
        its forward run's."""
        ev, links = self.trace.events, self.links
        out = np.zeros(len(self.runs), np.int64)
        symbolic = [is_symbolic(g) for g in self.graphs]
        if not any(symbolic):
            return out
        ids: dict[tuple[tuple[str, int], ...], int] = {(): 0}
        forward_run = {int(links.parent[r]): k for k, r in enumerate(self.runs.tolist()) if not backward[k]}
        for k in np.flatnonzero(run_graph >= 0).tolist():
            g = int(run_graph[k])
            if not symbolic[g]:
                continue
            at, graph = k, self.graphs[g]
            if backward[k]:  # bound by the forward run of its CompiledFunction (Sequence number)
                node = int(links.backward_node[self.runs[k]])
                forward = int(links.forward_op[node]) if node >= 0 else -1
                at = forward_run.get(forward, -1)
                if at < 0 or run_graph[at] < 0:
                    continue
                graph = self.graphs[int(run_graph[at])]
            caller = int(links.parent[self.runs[at]])
            if caller < 0:
                continue
            sizes = bound_sizes(
                graph, _text(ev, ev.input_dims[caller]), _text(ev, ev.concrete_inputs[caller])
            )
            key = tuple(sorted(sizes.items()))
            if key not in ids:
                ids[key] = len(self.sizes)
                self.sizes.append(sizes)
                self.node_costs.append({})
            out[k] = ids[key]
        return out

    def _roots(self, backward: np.ndarray, run_graph: np.ndarray) -> np.ndarray:
        """The compiled root's node of each run: the node the attribution rules give the run's
        scope (through its forward for a backward graph), else the root the table recorded."""
        links, tree = self.links, self.tree
        scope_of = links.nearest(tree.scope_mask)
        node, _ = classify_events(self.runs, links, tree, scope_of)
        roots = node.astype(np.int64)
        recorded_roots: dict[str, set[str]] = {}
        for c in self.table.compiles:
            if c.root is not None:
                recorded_roots.setdefault(c.key, set()).add(c.root)
        for k in np.flatnonzero(run_graph >= 0).tolist():
            recorded = recorded_roots.get(self.graph_keys[int(run_graph[k])], set())
            name = next(iter(recorded)) if len(recorded) == 1 else None
            first_ts = float(self.trace.events.ts[self.runs[k]])
            if roots[k] >= 0:
                # a frame of a submodule (a graph break inside the model, Lightning's compiled
                # training_step calling the model) inside the scope of the module around it
                scope = self.made.nodes[int(roots[k])].qualified_name
                if name is not None and name != scope and (scope == "" or name.startswith(scope + ".")):
                    roots[k] = self.made.node_for(
                        int(roots[k]), name[len(scope) + 1 :] if scope else name, first_ts
                    )
                continue
            if name is None and not tree.nodes and not recorded:
                name = ""  # a trace without module scopes: the model's root
            if name is not None:  # else a compiled function outside the modules: left alone
                roots[k] = self.made.root_node(name, first_ts)
        return roots

    # -- FLOPs of generated kernels, from their nodes --------------------------------------------

    def _shares(self, kernels: _Kernels, repeat: np.ndarray) -> tuple[KernelShares, np.ndarray]:
        """One share per (matched generated-kernel event, module of its nodes), see KernelShares,
        and the generated kernel events given a cost; none for an event that repeats its call
        site's (``repeat``: the call was costed at its first)."""
        combo, inverse, events = kernels.combo, kernels.inverse, kernels.events
        costs: dict[tuple[int, int, int], list[tuple[str, OpCost, int, float]]] = {}
        dtypes: dict[str, int] = {}
        per_combo: list[list[tuple[int, OpCost, int, float]]] = []
        for root, g, s, b in combo.tolist():
            if not self.sites[g][s].generated:
                per_combo.append([])
                continue
            if (g, s, b) not in costs:
                costs[(g, s, b)] = site_costs(
                    self.graphs[g],
                    s,
                    self.owners[g],
                    self.originals[g],
                    self.registry,
                    self.sizes[b],
                    self.node_costs[b],
                    self.problems,
                )
            per_combo.append(
                [
                    (self.made.node_for(root, module, np.inf), cost, family, recomputed)
                    for module, cost, family, recomputed in costs[(g, s, b)]
                ]
            )
        counts = np.array([len(p) for p in per_combo] or [0], np.int64)
        flat = [share for p in per_combo for share in p]
        offsets = np.concatenate([[0], np.cumsum(counts)])
        k_of_event = np.where(repeat, 0, counts[inverse]) if len(inverse) else np.zeros(0, np.int64)
        # the shares of each event: its combo's, in order
        of = np.repeat(np.arange(len(events)), k_of_event)
        within = np.arange(len(of)) - np.repeat(np.cumsum(k_of_event) - k_of_event, k_of_event)
        row = offsets[inverse[of]] + within if len(of) else np.zeros(0, np.int64)
        cost = np.array(
            [(c.flops, c.macs, c.bytes_read, c.bytes_written) for _, c, _, _ in flat] or [(0.0,) * 4],
            np.float64,
        )[row]
        dtype = np.array([dtypes.setdefault(c.dtype, len(dtypes)) for _, c, _, _ in flat] or [0], np.int32)
        generated = np.array([self.sites[g][s].generated for _, g, s, _ in combo.tolist()] or [False], bool)
        costed = events[generated[inverse] & (k_of_event > 0)] if len(events) else events
        shares = KernelShares(
            event=events[of].astype(np.int64),
            run=kernels.run[of].astype(np.int64),
            backward=kernels.backward[of],
            node=np.array([f[0] for f in flat] or [0], np.int64)[row],
            span=kernels.span[of],
            cost=cost.reshape(-1, 4),
            dtype=dtype[row],
            family=np.array([f[2] for f in flat] or [0], np.int32)[row],
            dtypes=tuple(dtypes),
            recomputed=np.array([f[3] for f in flat] or [0.0], np.float64)[row],
        )
        return shares, costed.astype(np.int64)


def _text(ev: Any, code: int) -> Any:
    """A raw JSON argument text decoded (None: absent or not JSON)."""
    if code < 0:
        return None
    try:
        return msgspec.json.decode(ev.texts[code])
    except msgspec.DecodeError:
        return None


def with_compiled_costs(costs: OpCosts, work: CompiledWork) -> OpCosts:
    """``costs`` with the generated kernels' shares counted (each with its node), and those
    kernels no longer unsupported."""
    if not costs.has_shapes or not len(work.shares.event):
        return costs
    dtypes = list(costs.dtypes)
    code = {d: i for i, d in enumerate(dtypes)}
    remap = np.array([code.setdefault(d, len(code)) for d in work.shares.dtypes] or [0], np.int32)
    dtypes = list(code)
    n_old = len(costs.counted)
    node = np.concatenate([np.full(n_old, -1, np.int64), work.shares.node])
    keep = ~np.isin(costs.unsupported, work.costed)
    return msgspec.structs.replace(
        costs,
        counted=np.concatenate([costs.counted, work.shares.event]),
        flops=np.concatenate([costs.flops, work.shares.cost[:, 0]]),
        macs=np.concatenate([costs.macs, work.shares.cost[:, 1]]),
        bytes_read=np.concatenate([costs.bytes_read, work.shares.cost[:, 2]]),
        bytes_written=np.concatenate([costs.bytes_written, work.shares.cost[:, 3]]),
        dtype=np.concatenate([costs.dtype, remap[work.shares.dtype]]).astype(np.int32),
        family=np.concatenate([costs.family, work.shares.family]).astype(np.int32),
        dtypes=tuple(dtypes),
        unsupported=costs.unsupported[keep],
        unsupported_label=costs.unsupported_label[keep],
        unsupported_own_us=costs.unsupported_own_us[keep],
        node=node,
    )


def compiled_summary(ctx: Context, work: CompiledWork, cpu: CpuTime, gpu: GpuWork) -> CompiledSummary:
    """The join's figures for the selected steps, per step."""
    ev, links = ctx.trace.events, ctx.links
    ts = ev.ts
    n = ctx.n_steps
    # overhead: in the joined regions outside the kernel calls, and Dynamo's cache lookups
    event_node = ctx.tree.event_node
    lookup = ev.named(lambda s: s == schema.COMPILED_CACHE_LOOKUP_NAME)
    overhead = (links.nearest(lookup) >= 0) | work.explained
    if event_node is not None:
        overhead &= event_node < 0
    if len(gpu.work) and float(gpu.busy_us.sum()) > 0:
        anchored = gpu.anchor >= 0
        overhead_us = float(gpu.busy_us[anchored][overhead[gpu.anchor[anchored]]].sum())
    else:
        overhead_us = float(cpu.exclusive_us[overhead[cpu.events]].sum())
    run_in = ctx.in_selection(ts[work.runs])
    child_in = ctx.in_selection(ts[work.children])
    matched_in = ctx.in_selection(ts[work.events])
    share_in = ctx.in_selection(ts[work.shares.event])
    return CompiledSummary(
        graphs=len(np.unique(work.run_graph[run_in & (work.run_graph >= 0)])),
        runs=float(run_in.sum()) / n,
        events=float(child_in.sum()) / n,
        matched=float(matched_in.sum()) / n,
        recomputed_flops=float(work.shares.recomputed[share_in].sum()) / n,
        nodes_from_table=int(work.created.sum()),
        runs_without_graph=float((run_in & (work.run_graph < 0)).sum()) / n,
        overhead_us=overhead_us / n,
    )
