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
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import msgspec
import numpy as np

from traceprof.analysis.classify import Context, classify_events
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.hierarchy import Hierarchy, HierarchyNode, Source
from traceprof.analysis.link import Links
from traceprof.analysis.op_costs import OpCosts, cost_of
from traceprof.flops import FAMILIES, REGISTRY, Registry
from traceprof.flops.shapes import ArgumentError, OpArgs, OpCost
from traceprof.read.limits import MAX_TREE_DEPTH
from traceprof.result.model import CompiledSummary
from traceprof.trace import schema
from traceprof.trace.model import CompiledGraph, CompiledNode, CompiledTable, Trace, index_dtype

#: description of the module tree's source when the compiled-kernel table is joined
TABLE_DESCRIPTION = "compiled-kernel table"
#: sources whose nodes have qualified names, under which the table's modules can be named
_NAMED = (Source.TRACEPROF, Source.LIGHTNING)
#: module classes that hold modules without being called (Dynamo's module stacks never name them)
CONTAINER_CLASSES = frozenset({"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
#: site codes: a site whose event the table does not know, one whose event is not in the trace
_ANY, _ABSENT = -1, -2


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
    #: FLOPs of generated kernels by module: one share per (matched event, module of its nodes)
    share_event: np.ndarray
    share_run: np.ndarray  # the run's scope event of each share
    share_backward: np.ndarray  # its graph is a backward graph
    share_node: np.ndarray
    share_span: np.ndarray  # code into spans of its kernel, -1 when not fused
    share_cost: np.ndarray  # float64 (n, 4): flops, macs, bytes read, bytes written
    share_dtype: np.ndarray  # int32 codes into share_dtypes
    share_family: np.ndarray  # int32 codes into FAMILIES
    share_dtypes: tuple[str, ...]
    share_recomputed: np.ndarray  # FLOPs of forward ops computed again in a backward graph
    #: generated kernel events whose cost the nodes give (no longer "unsupported")
    costed: np.ndarray
    warnings: tuple[str, ...]


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


class _Site(msgspec.Struct):
    """What one call site of a graph says, worked out once."""

    module: str  # relative to the compiled root ("": the root)
    known: tuple[str, ...]  # modules of its nodes with a module stack, sorted, each once
    fused: bool
    generated: bool  # a generated kernel: its cost comes from its nodes


class _Shares(msgspec.Struct):
    """The FLOPs of generated kernels by module: one share per (matched event, module of its
    nodes)."""

    of: np.ndarray  # the matched event of each share (its position among the matched events)
    event: np.ndarray
    node: np.ndarray
    cost: np.ndarray  # float64 (n, 4): flops, macs, bytes read, bytes written
    dtype: np.ndarray  # int32 codes into dtypes
    family: np.ndarray  # int32 codes into FAMILIES
    dtypes: tuple[str, ...]
    recomputed: np.ndarray  # FLOPs of forward ops computed again in a backward graph
    costed: np.ndarray  # the generated kernel events given a cost


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
        self.keys, self.is_call, self.runs = keys, is_call, runs
        self.warnings: list[str] = []
        self.graph_keys = tuple(table.graphs)
        self.graphs = [table.graphs[k] for k in self.graph_keys]
        self.owners = [_owners(g) for g in self.graphs]
        self.originals = [_original_groups(g, registry) for g in self.graphs]
        self.sites = [
            [_site(g, i, owner, registry) for i in range(len(g.calls))]
            for g, owner in zip(self.graphs, self.owners)
        ]
        # the tree, growing: nodes made from the table are appended
        self.nodes = list(tree.nodes)
        self.index = {(n.parent, n.key): n.id for n in tree.nodes}
        self.classes = _module_classes(table)
        #: relative modules the table knows: of nodes, and of call sites (common ancestors)
        self.known = set(self.classes) | {c.module for g in self.graphs for c in g.calls if c.module}
        self.module_table = trace.metadata.module_table
        #: module paths of the table that name no module of the model, and how often met
        self.named_nothing: Counter[str] = Counter()
        #: nodes not costed, by reason ("size": a size past any tensor's)
        self.problems: Counter[str] = Counter()
        #: symbolic sizes of runs (binding 0: none)
        self.sizes: list[dict[str, int]] = [{}]
        #: per binding: the cost of each distinct (op, arguments), worked out once
        self.node_costs: list[dict[bytes, tuple[OpCost, int] | None]] = [{}]

    # -- the join, stage by stage ------------------------------------------------------------

    def result(self) -> tuple[Hierarchy, CompiledWork]:
        ev, links = self.trace.events, self.links
        runs = self.runs
        children, run_of_child = self._children()
        backward_run = links.backward_region[runs] >= 0
        run_graph = self._graphs_of_runs(children, run_of_child, backward_run)
        matched, site_of = self._match(children, run_of_child, run_graph)
        roots = self._roots(backward_run, run_graph)
        matched &= roots[np.searchsorted(runs, run_of_child)] >= 0
        events = children[matched]
        run_pos = np.searchsorted(runs, run_of_child[matched])
        graph = run_graph[run_pos]
        site = site_of[matched]
        # the node of each matched event: one per distinct (root, graph, site)
        binding = self._bindings(run_graph, backward_run)[run_pos]
        combo, first, inverse = _distinct(np.stack([roots[run_pos], graph, site, binding], axis=1))
        combo_node = np.empty(len(combo), np.int64)
        combo_span = np.full(len(combo), -1, np.int64)
        spans: dict[str, int] = {}
        for k, (root, g, s, _) in enumerate(combo.tolist()):
            info = self.sites[g][s]
            combo_node[k] = self._node_for(root, info.module, float(ev.ts[events[first[k]]]))
            if info.fused:
                text = ", ".join(_qualified(self.nodes[root].qualified_name, m) for m in info.known)
                combo_span[k] = spans.setdefault(text, len(spans))
        node = combo_node[inverse]
        span = combo_span[inverse]
        shares = self._shares(events, inverse, combo)
        self._order_created(np.concatenate([events, shares.event]), np.concatenate([node, shares.node]))

        n = len(ev)
        index = index_dtype(n)
        is_matched = np.zeros(n, bool)
        is_matched[events] = True
        around = links.nearest(is_matched)  # the matched event each event is in (or is)
        inside = around >= 0
        node_at = np.full(n, -1, np.int64)
        node_at[events] = node
        event_node = np.full(n, -1, index)
        event_node[inside] = node_at[around[inside]]
        fused_at = np.zeros(n, bool)
        fused_at[events] = span >= 0
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
        joined = region_of[np.unique(run_of_child[matched])]
        joined_region = np.zeros(n, bool)
        joined_region[joined[joined >= 0]] = True
        # a region that ran no graph (Dynamo ran the frame's bytecode: what a graph break left
        # of it) holds nothing but the compiled code's own work: overhead on the module around
        # it, as in a region whose graphs the table joined
        with_runs = region_of[runs]
        graphless = is_region.copy()
        graphless[with_runs[with_runs >= 0]] = False
        joined_region |= graphless
        explained = ((region_of >= 0) & joined_region[np.maximum(region_of, 0)]) | inside
        created = np.zeros(len(self.nodes), bool)
        created[len(self.tree.nodes) :] = True
        container = np.array([n.class_name in CONTAINER_CLASSES for n in self.nodes], bool)

        if (run_graph < 0).any():
            missing = sorted({self.keys[c] or "" for c in ev.name[runs[run_graph < 0]].tolist()})
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
        if self.named_nothing:
            names = sorted(self.named_nothing, key=lambda m: -self.named_nothing[m])
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
        tree = msgspec.structs.replace(
            self.tree,
            nodes=tuple(self.nodes),
            event_node=event_node,
            warnings=(*self.tree.warnings, *self.table_warnings(), *self.warnings),
        )
        work = CompiledWork(
            boundary=self.is_call,
            event_fused=event_fused,
            explained=explained,
            events=events.astype(np.int64),
            node=node,
            run=run_of_child[matched].astype(np.int64),
            backward=backward_run[run_pos],
            span=span,
            spans=tuple(spans),
            created=created,
            container=container,
            runs=runs.astype(np.int64),
            run_graph=run_graph,
            graph_keys=self.graph_keys,
            children=children.astype(np.int64),
            share_event=shares.event,
            share_run=run_of_child[matched][shares.of].astype(np.int64),
            share_backward=backward_run[run_pos][shares.of],
            share_span=span[shares.of],
            share_node=shares.node,
            share_cost=shares.cost,
            share_dtype=shares.dtype,
            share_family=shares.family,
            share_dtypes=shares.dtypes,
            share_recomputed=shares.recomputed,
            costed=shares.costed,
            warnings=tuple(self.warnings),
        )
        return tree, work

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

    def _children(self) -> tuple[np.ndarray, np.ndarray]:
        """The direct children of every run, by run then time, and the run of each."""
        ev, parent = self.trace.events, self.links.parent
        child = np.flatnonzero((parent >= 0) & (self.links.depth >= 0))
        child = child[self.is_call[parent[child]]]
        child = child[np.lexsort((ev.ts[child], parent[child]))]
        return child, parent[child]

    def _graphs_of_runs(
        self, children: np.ndarray, run_of_child: np.ndarray, backward: np.ndarray
    ) -> np.ndarray:
        """Each run's graph (its position in graph_keys; -1: not in the table)."""
        ev = self.trace.events
        position = {k: i for i, k in enumerate(self.graph_keys)}
        by_key = {g.key: i for i, g in enumerate(self.graphs) if g.key is not None}
        codes = ev.name[self.runs]
        out = np.full(len(self.runs), -1, np.int64)
        nokey: list[int] = []
        for code in np.unique(codes).tolist():
            key = self.keys[code]
            at = codes == code
            if key == schema.COMPILED_CALL_NO_KEY:
                nokey.extend(np.flatnonzero(at).tolist())
            elif key is not None:
                out[at] = position.get(key, by_key.get(key, -1))
        if nokey:
            out[nokey] = self._graphs_without_key(np.array(nokey), children, run_of_child, backward)
        return out

    def _graphs_without_key(
        self, runs_at: np.ndarray, children: np.ndarray, run_of_child: np.ndarray, backward: np.ndarray
    ) -> np.ndarray:
        """Graphs of runs named ``None``: by the ``graph_<id>_`` prefix of their kernel events
        and their direction, else by their region's compile id."""
        ev, links = self.trace.events, self.links
        prefix_of = [m.group(0) if (m := schema.COMPILED_KERNEL_PREFIX_RE.match(s)) else "" for s in ev.names]
        # the prefixes of each run's children
        run_pos = np.searchsorted(self.runs, run_of_child)
        want = np.zeros(len(self.runs), bool)
        want[runs_at] = True
        pairs = _distinct(np.stack([run_pos, ev.name[children]], axis=1)[want[run_pos]])[0]
        prefixes: dict[int, set[str]] = {}
        for r, code in pairs.tolist():
            if prefix_of[code]:
                prefixes.setdefault(r, set()).add(prefix_of[code])
        # the compile id of each run's region: around the run, or around its forward's run
        is_region = ev.named(lambda s: s.startswith(schema.COMPILED_REGION_PREFIX))
        region = links.nearest(is_region)
        scope = self.runs[runs_at].astype(np.int64)
        fwd = links.forward_op[np.maximum(links.backward_node[scope], 0)]
        scope = np.where(backward[runs_at] & (links.backward_node[scope] >= 0) & (fwd >= 0), fwd, scope)
        compile_ids = [
            ev.names[ev.name[r]][len(schema.COMPILED_REGION_PREFIX) :] if r >= 0 else None
            for r in region[scope].tolist()
        ]
        candidates = [i for i, g in enumerate(self.graphs) if g.key is None]
        out = np.full(len(runs_at), -1, np.int64)
        for k, r in enumerate(runs_at.tolist()):
            is_bwd = bool(backward[r])
            same = [
                i
                for i in candidates
                if (self.graphs[i].direction == schema.COMPILED_BACKWARD_DIRECTION) == is_bwd
            ]
            by_prefix = [i for i in same if prefixes.get(r, set()) & set(self.graphs[i].event_prefixes)]
            if len(by_prefix) == 1:
                out[k] = by_prefix[0]
                continue
            by_region = [i for i in same if compile_ids[k] in self.graphs[i].compile_ids]
            if len(by_region) == 1:
                out[k] = by_region[0]
        return out

    def _match(
        self, children: np.ndarray, run_of_child: np.ndarray, run_graph: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Whether each child matched a call site of its run's graph, and which (its index)."""
        ev = self.trace.events
        code_of = {s: i for i, s in enumerate(ev.names)}
        matched = np.zeros(len(children), bool)
        site_of = np.full(len(children), -1, np.int64)
        run_pos = np.searchsorted(self.runs, run_of_child)
        start = np.searchsorted(run_of_child, self.runs, side="left")
        count = np.searchsorted(run_of_child, self.runs, side="right") - start
        pos = np.arange(len(children)) - start[run_pos]
        names = ev.name[children].astype(np.int64)
        for g in np.unique(run_graph[run_graph >= 0]).tolist():
            calls = self.graphs[g].calls
            sites = np.array(
                [_ANY if c.event is None else code_of.get(c.event, _ABSENT) for c in calls] or [_ABSENT],
                np.int64,
            )
            of_g = np.flatnonzero(run_graph == g)
            # fast: runs whose children follow the call sites one to one
            whole = of_g[count[of_g] == len(calls)]
            mine = np.zeros(len(self.runs), bool)
            mine[whole] = True
            rows = np.flatnonzero(mine[run_pos])
            expected = sites[np.minimum(pos[rows], len(sites) - 1)]
            ok = (expected == names[rows]) | (expected == _ANY)
            bad_runs = np.zeros(len(self.runs), bool)
            bad_runs[run_pos[rows[~ok]]] = True
            good = rows[~bad_runs[run_pos[rows]]]
            matched[good] = True
            site_of[good] = pos[good]
            # the others: walked in order
            rest = np.setdiff1d(of_g, whole[~bad_runs[whole]])
            for r in rest.tolist():
                lo = int(start[r])
                names_r = names[lo : lo + int(count[r])].tolist()
                for j, k in enumerate(_walk(names_r, sites.tolist()[: len(calls)])):
                    if k >= 0:
                        matched[lo + j] = True
                        site_of[lo + j] = k
        return matched, site_of

    def _bindings(self, run_graph: np.ndarray, backward: np.ndarray) -> np.ndarray:
        """Each run's symbolic sizes (an index into self.sizes; 0: none): a graph compiled with
        dynamic shapes has sizes such as "s77" in its nodes; a forward run's come from its
        ``CompiledFunction``'s inputs (the graph's placeholders, in order), a backward run's from
        its forward run's."""
        ev, links = self.trace.events, self.links
        out = np.zeros(len(self.runs), np.int64)
        symbolic = [_is_symbolic(g) for g in self.graphs]
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
            sizes = _bound_sizes(
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
                scope = self.nodes[int(roots[k])].qualified_name
                if name is not None and name != scope and (scope == "" or name.startswith(scope + ".")):
                    roots[k] = self._node_for(
                        int(roots[k]), name[len(scope) + 1 :] if scope else name, first_ts
                    )
                continue
            if name is None and not tree.nodes and not recorded:
                name = ""  # a trace without module scopes: the model's root
            if name is not None:  # else a compiled function outside the modules: left alone
                roots[k] = self._root_node(name, first_ts)
        return roots

    # -- nodes ---------------------------------------------------------------------------------

    def _class_of(self, qualified: str, relative: str) -> str:
        if self.module_table is not None and qualified in self.module_table.modules:
            return self.module_table.modules[qualified].class_name
        return self.classes.get(relative, "")

    def _add(self, parent: int, qualified: str, class_name: str, first_ts: float) -> int:
        node = len(self.nodes)
        path = (self.nodes[parent].path if parent >= 0 else ()) + (qualified,)
        self.nodes.append(HierarchyNode(node, parent, path, qualified, class_name, qualified, first_ts))
        self.index[(parent, qualified)] = node
        return node

    def _root_node(self, qualified: str, first_ts: float) -> int:
        """A node of the tree with this qualified name (the first), else one made under the
        deepest module node that holds it; without one, under the model's root when the module
        table lists the model (``""``), else a new root."""
        named = {n.qualified_name: n.id for n in reversed(self.nodes) if not n.group}
        if qualified in named:
            return named[qualified]
        parts = qualified.split(".") if qualified else []
        for k in range(len(parts) - 1, -1, -1):
            holder = named.get(".".join(parts[:k]))
            if holder is not None:
                return self._node_for(holder, ".".join(parts[k:]), first_ts)
        if parts and self.module_table is not None and "" in self.module_table.modules:
            return self._node_for(self._add(-1, "", self._class_of("", ""), first_ts), qualified, first_ts)
        return self._add(-1, qualified, self._class_of(qualified, ""), first_ts)

    def _node_for(self, root: int, module: str, first_ts: float) -> int:
        """The node of ``module`` (relative) under ``root``: found by qualified name level by
        level, made where missing; the levels in between only where the module table lists them
        (a ModuleList), as an eager trace's tree has them."""
        if not module:
            return root
        holder = root
        base = self.nodes[root].qualified_name
        parts = module.split(".")
        if (
            not all(_PART.fullmatch(p) for p in parts)
            or len(parts) + len(self.nodes[root].path) > MAX_TREE_DEPTH
        ):
            # no module's name: an empty part ("a..b"), control characters, past any depth
            self.named_nothing[module[:80]] += 1
            return root
        listed = self.module_table.modules if self.module_table is not None else {}
        if listed and _qualified(base, module) not in listed:
            # a module the model does not have: on its deepest ancestor that it has
            self.named_nothing[module[:80]] += 1
            while parts and _qualified(base, ".".join(parts)) not in listed:
                parts.pop()
            if not parts:
                return root
        for k in range(1, len(parts) + 1):
            relative = ".".join(parts[:k])
            qualified = _qualified(base, relative)
            found = self.index.get((holder, qualified))
            if found is not None:
                holder = found
            elif k == len(parts) or qualified in listed or relative in self.known:
                holder = self._add(holder, qualified, self._class_of(qualified, relative), first_ts)
        return holder

    def _order_created(self, events: np.ndarray, node: np.ndarray) -> None:
        """A made node's first_ts: the first kernel event in its subtree (display order)."""
        n_scoped = len(self.tree.nodes)
        if len(self.nodes) == n_scoped or not len(events):
            return
        ts = self.trace.events.ts
        first = np.full(len(self.nodes), np.inf)
        np.minimum.at(first, node, ts[events])
        for i in range(len(self.nodes) - 1, n_scoped - 1, -1):  # children after parents
            p = self.nodes[i].parent
            if p >= n_scoped:
                first[p] = min(first[p], first[i])
        for i in range(n_scoped, len(self.nodes)):
            if np.isfinite(first[i]):
                self.nodes[i] = msgspec.structs.replace(self.nodes[i], first_ts=float(first[i]))

    # -- FLOPs of generated kernels, from their nodes --------------------------------------------

    def _shares(self, events: np.ndarray, inverse: np.ndarray, combo: np.ndarray) -> _Shares:
        """One share per (matched generated-kernel event, module of its nodes), see _Shares;
        ``inverse``: each event's row of ``combo`` (root, graph, site, binding)."""
        site_costs: dict[tuple[int, int, int], list[tuple[str, OpCost, int, float]]] = {}
        dtypes: dict[str, int] = {}
        per_combo: list[list[tuple[int, OpCost, int, float]]] = []
        for root, g, s, b in combo.tolist():
            if not self.sites[g][s].generated:
                per_combo.append([])
                continue
            if (g, s, b) not in site_costs:
                site_costs[(g, s, b)] = _site_costs(
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
                    (self._node_for(root, module, np.inf), cost, family, recomputed)
                    for module, cost, family, recomputed in site_costs[(g, s, b)]
                ]
            )
        counts = np.array([len(p) for p in per_combo] or [0], np.int64)
        flat = [share for p in per_combo for share in p]
        offsets = np.concatenate([[0], np.cumsum(counts)])
        k_of_event = counts[inverse] if len(inverse) else np.zeros(0, np.int64)
        # the shares of each event: its combo's, in order
        event_rows = np.repeat(np.arange(len(events)), k_of_event)
        within = np.arange(len(event_rows)) - np.repeat(np.cumsum(k_of_event) - k_of_event, k_of_event)
        row = offsets[inverse[event_rows]] + within if len(event_rows) else np.zeros(0, np.int64)
        node = np.array([f[0] for f in flat] or [0], np.int64)[row]
        cost = np.array(
            [(c.flops, c.macs, c.bytes_read, c.bytes_written) for _, c, _, _ in flat] or [(0.0,) * 4],
            np.float64,
        )[row]
        dtype = np.array([dtypes.setdefault(c.dtype, len(dtypes)) for _, c, _, _ in flat] or [0], np.int32)[
            row
        ]
        family = np.array([f[2] for f in flat] or [0], np.int32)[row]
        recomputed = np.array([f[3] for f in flat] or [0.0], np.float64)[row]
        generated = np.array([self.sites[g][s].generated for _, g, s, _ in combo.tolist()] or [False], bool)
        costed = events[generated[inverse] & (counts[inverse] > 0)] if len(events) else events
        return _Shares(
            of=event_rows,
            event=events[event_rows].astype(np.int64),
            node=node,
            cost=cost.reshape(-1, 4),
            dtype=dtype,
            family=family,
            dtypes=tuple(dtypes),
            recomputed=recomputed,
            costed=costed.astype(np.int64),
        )


def _text(ev: Any, code: int) -> Any:
    """A raw JSON argument text decoded (None: absent or not JSON)."""
    if code < 0:
        return None
    try:
        return msgspec.json.decode(ev.texts[code])
    except msgspec.DecodeError:
        return None


def _is_symbolic(graph: CompiledGraph) -> bool:
    """Whether a graph's placeholders have symbolic sizes (compiled with dynamic shapes)."""
    for placeholder in graph.inputs:
        val = placeholder.val
        if isinstance(val, dict) and ("sym" in val or any(isinstance(d, str) for d in val.get("shape", ()))):
            return True
    return False


def _bound_sizes(graph: CompiledGraph, dims: Any, concrete: Any) -> dict[str, int]:
    """Symbolic sizes bound by a run's inputs: a symbolic scalar placeholder takes its concrete
    value, a symbolic dim of a tensor placeholder the recorded dim."""
    sizes: dict[str, int] = {}
    dims = dims if isinstance(dims, list) else []
    concrete = concrete if isinstance(concrete, list) else []
    for i, placeholder in enumerate(graph.inputs):
        val = placeholder.val
        if not isinstance(val, dict):
            continue
        if isinstance(val.get("sym"), str) and i < len(concrete):
            try:
                sizes[val["sym"]] = int(concrete[i])
            except (TypeError, ValueError):
                pass
        shape = val.get("shape")
        if (
            isinstance(shape, list)
            and i < len(dims)
            and isinstance(dims[i], list)
            and len(dims[i]) == len(shape)
        ):
            for d, v in zip(shape, dims[i]):
                if isinstance(d, str) and _SYMBOL.fullmatch(d) and isinstance(v, int):
                    sizes[d] = v
    return sizes


def _walk(names: list[int], sites: list[int]) -> list[int]:
    """The call site each child takes, walking both in order: the next site with the child's
    name, else the next site if its event is not known; -1: none. The sites of each name are
    looked up by bisection, so that children matching no site cost ``log`` of the sites each,
    not a scan of the rest (N children against N sites: N log N, not N**2)."""
    positions: dict[int, list[int]] = {}
    for j, site in enumerate(sites):
        positions.setdefault(site, []).append(j)
    out = []
    at = 0
    for name in names:
        found = -1
        of_name = positions.get(name)
        if of_name:
            k = bisect.bisect_left(of_name, at)
            if k < len(of_name):
                found = of_name[k]
        if found < 0 and at < len(sites) and sites[at] == _ANY:
            found = at
        if found >= 0:
            at = found + 1
        out.append(found)
    return out


def _distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct rows, the first position of each, and the distinct row of each row."""
    if not len(rows):
        return (
            rows.reshape(0, rows.shape[1] if rows.ndim == 2 else 0),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    uniq, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return uniq, first, inverse.ravel()


def _qualified(base: str, relative: str) -> str:
    return f"{base}.{relative}" if base and relative else base or relative


def _module_classes(table: CompiledTable) -> dict[str, str]:
    """Relative module name -> class name, from the nodes of every graph."""
    out: dict[str, str] = {}
    for graph in table.graphs.values():
        for node in graph.nodes.values():
            if node.module and node.module_class and node.module_from is not None:
                out.setdefault(node.module, node.module_class)
    return out


def _site(graph: CompiledGraph, index: int, owner: dict[str, int], registry: Registry) -> _Site:
    """A call site's module: the table's, except for a kernel of several nodes, whose module is
    the deepest common one of the nodes it computes itself (its own, see _owners) that do work:
    views and reshapes (ops without cost) and the nodes of other calls it reads do not pull it
    up. Fused: those nodes belong to several modules."""
    call = graph.calls[index]
    stacked = [
        graph.nodes[n] for n in call.nodes if n in graph.nodes and graph.nodes[n].module_from is not None
    ]
    known = sorted({n.module for n in stacked})
    module = call.module or ""
    if call.primary_node is None:
        working = sorted(
            {
                graph.nodes[n].module
                for n in call.nodes
                if n in graph.nodes
                and graph.nodes[n].module_from is not None
                and owner.get(n) == index
                and _does_work(graph.nodes[n].op, registry)
            }
        )
        if working:
            known, module = working, _common(working)
    return _Site(
        module=module,
        known=tuple(known),
        fused=call.primary_node is None and len(known) > 1,
        generated=call.kind in schema.COMPILED_GENERATED_KINDS,
    )


def _does_work(op: str, registry: Registry) -> bool:
    """A dispatcher op that is not registered as costing nothing (a view, a reshape)."""
    name = schema.compiled_op_event_name(op)
    if name is None:
        return False
    entry = registry.get(name)
    return entry is None or entry.has_cost


def _common(modules: list[str]) -> str:
    """The deepest module containing all of ``modules`` ("": the root)."""
    split = [m.split(".") if m else [] for m in modules]
    common: list[str] = []
    for parts in zip(*split):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return ".".join(common)


def _owners(graph: CompiledGraph) -> dict[str, int]:
    """The call site whose cost each node is: an extern call's or a fallback's own node is its
    event's (an aten op with shapes, counted as in eager traces); any other node the first
    generated kernel listing it (a kernel's nodes include the nodes it reads that others
    computed: counted once)."""
    owner: dict[str, int] = {}
    for i, call in enumerate(graph.calls):
        if call.kind not in schema.COMPILED_GENERATED_KINDS:
            for name in call.nodes if call.primary_node is None else (call.primary_node,):
                owner.setdefault(name, i)
    for i, call in enumerate(graph.calls):
        if call.kind in schema.COMPILED_GENERATED_KINDS:
            for name in call.nodes:
                owner.setdefault(name, i)
    return owner


def _original_groups(graph: CompiledGraph, registry: Registry) -> dict[str, str]:
    """Groups of nodes decomposed from one op call (``original_group``) that are costed as that
    op: group -> the node that carries the op's arguments (``original_inputs``, on the node of
    its first output), for ops the registry has a formula for."""
    out: dict[str, str] = {}
    for name, node in graph.nodes.items():
        if node.original_group is None or node.original_inputs is None or node.original_aten is None:
            continue
        event = schema.compiled_op_event_name(node.original_aten)
        entry = registry.get(event) if event is not None else None
        if entry is not None and entry.formula is not None:
            out.setdefault(node.original_group, name)
    return out


def _site_costs(
    graph: CompiledGraph,
    index: int,
    owner: dict[str, int],
    originals: dict[str, str],
    registry: Registry,
    sizes: dict[str, int],
    memo: dict[bytes, tuple[OpCost, int] | None],
    problems: Counter[str] | None = None,
) -> list[tuple[str, OpCost, int, float]]:
    """The cost of a generated kernel's nodes (those it owns, see _owners) by module: (module,
    cost, family of its largest node, FLOPs of recomputed forward ops); ``sizes``: the run's
    symbolic sizes; ``memo``: the costs of the distinct (op, arguments) met so far.

    Forward ops that a backward graph computes again (nodes with a module stack of their own in
    a backward graph) cost nothing in it: their FLOPs are the last element, reported apart.

    The nodes of one decomposed op call (a group of ``originals``, see _original_groups) count
    as that op, once: the node with its arguments takes the op's cost (its own when the op's
    arguments are not understood), the group's other nodes none."""
    by_module: dict[str, list[tuple[OpCost, int, float]]] = {}
    backward = graph.direction == schema.COMPILED_BACKWARD_DIRECTION
    for name in graph.calls[index].nodes:
        node = graph.nodes.get(name)
        if node is None or owner.get(name) != index:
            continue
        found = None
        group = node.original_group
        if group is not None and group in originals:
            if originals[group] != name:
                continue  # counted with its group's op
            original = CompiledNode(node.original_aten or node.op, node.original_inputs or ())
            signature = msgspec.json.encode((original.op, original.inputs))
            if signature not in memo:
                memo[signature] = node_cost(original, registry, sizes, problems)
            found = memo[signature]
        if found is None:
            signature = msgspec.json.encode((node.op, node.inputs))
            if signature not in memo:
                memo[signature] = node_cost(node, registry, sizes, problems)
            found = memo[signature]
        if found is None:
            continue
        cost, family = found
        if backward and node.module_from == schema.COMPILED_OWN_STACK:
            # a forward op the backward graph computes again: reported apart, not in the pass's
            # FLOPs, so that a module's FLOPs are the same compiled or not (model FLOPs)
            by_module.setdefault(node.module, []).append(
                (OpCost(0.0, 0.0, 0.0, 0.0, cost.dtype), family, cost.flops)
            )
            continue
        by_module.setdefault(node.module, []).append((cost, family, 0.0))
    out = []
    for module, parts in by_module.items():
        largest = max(parts, key=lambda p: p[0].flops)
        total = OpCost(
            sum(p[0].flops for p in parts),
            sum(p[0].macs for p in parts),
            sum(p[0].bytes_read for p in parts),
            sum(p[0].bytes_written for p in parts),
            largest[0].dtype,
        )
        out.append((module, total, largest[1], sum(p[2] for p in parts)))
    return out


def node_cost(
    node: CompiledNode,
    registry: Registry,
    sizes: dict[str, int] | None = None,
    problems: Counter[str] | None = None,
) -> tuple[OpCost, int] | None:
    """The cost of one node's op and its family's code, through ``registry`` as an eager op
    event of the same op and arguments would be counted; None when it has none (no formula,
    arguments not understood, a symbolic size not bound in ``sizes``, a size past any
    tensor's: counted in ``problems["size"]``)."""
    name = schema.compiled_op_event_name(node.op)
    entry = registry.get(name) if name is not None else None
    if name is None or entry is None or entry.formula is None:
        return None
    try:
        args = op_args(name, node.inputs, sizes or {})
    except SizeOutOfRange:
        if problems is not None:
            problems["size"] += 1
        return None
    except ArgumentError:
        return None
    cost = cost_of(entry, args)
    return (cost, FAMILIES.index(entry.family)) if cost is not None else None


def op_args(name: str, inputs: Iterable[Any], sizes: dict[str, int]) -> OpArgs:
    """A node's arguments as an op event's ``Input Dims`` / ``Input type`` / ``Concrete
    Inputs`` would record them: tensors with their dims and dtype spelled as traces spell it,
    lists of tensors as tensor lists, numbers and flags as scalars, None and text as absent."""
    dims: list[Any] = []
    types: list[str] = []
    values: list[str] = []
    for value in inputs:
        d, t, v = _argument(value, sizes)
        dims.append(d)
        types.append(t)
        values.append(v)
    return OpArgs(name, dims, types, values)


def _argument(value: Any, sizes: dict[str, int]) -> tuple[Any, str, str]:
    if _is_tensor(value):
        dtype = str(value["dtype"])
        if len(value["shape"]) > MAX_DIMS:
            raise SizeOutOfRange(f"a tensor of {len(value['shape'])} dimensions")
        dims = [_size(s, sizes) for s in value["shape"]]
        numel = 1
        for d in dims:
            numel *= d
            if numel > MAX_SIZE:
                raise SizeOutOfRange(f"a tensor of more than {MAX_SIZE} elements")
        return dims, schema.TORCH_DTYPE_SPELLINGS.get(dtype, f"c10::{dtype}"), ""
    if isinstance(value, dict) and "sym" in value:
        return [], schema.SCALAR_TYPE, str(_size(value["sym"], sizes))
    if _is_encoded_number(value):  # {"float": "-inf"}, {"int": "<digits>"}: as a trace spells them
        return [], schema.SCALAR_TYPE, str(value.get("float", value.get("int")))
    if isinstance(value, bool):
        return [], schema.SCALAR_TYPE, schema.CONCRETE_TRUE if value else schema.CONCRETE_FALSE
    if isinstance(value, (int, float)):
        return [], schema.SCALAR_TYPE, str(value)
    if isinstance(value, (list, tuple)):
        if value and all(_is_tensor(v) for v in value):
            return [[_size(s, sizes) for s in v["shape"]] for v in value], schema.TENSOR_LIST_TYPE, ""
        if all(
            isinstance(v, (int, float, bool, str))
            or (isinstance(v, dict) and "sym" in v)
            or _is_encoded_number(v)
            for v in value
        ):
            items = [_argument(v, sizes)[2] for v in value]
            return [], schema.SCALAR_LIST_TYPE, "[" + ", ".join(items) + "]"
    return [], "", ""


def _is_encoded_number(value: Any) -> bool:
    """A number the table spells as an object (docs/trace-conventions.md "Values"): a
    non-finite float, an int beyond 64 bits."""
    return isinstance(value, dict) and len(value) == 1 and ("float" in value or "int" in value)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("shape"), list) and "dtype" in value


_SYMBOL = re.compile(r"[A-Za-z_]\w*")
#: one part of a module's qualified name: an attribute or an index (printable, no dot)
_PART = re.compile(r"[^\x00-\x1f\x7f.\s]{1,200}")
#: a size (or a tensor's elements) in the table past this is no tensor's (its bytes would not
#: fit any memory), nor is a tensor of more dimensions than MAX_DIMS (torch's limit is 64)
MAX_SIZE = 2**48
MAX_DIMS = 64
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//|[-+*/%(),]))")


class SizeOutOfRange(ArgumentError):
    """A size in the compiled-kernel table beyond :data:`MAX_SIZE`."""


def _size(value: Any, sizes: dict[str, int]) -> int:
    """A size: an int, or a symbolic size (``"s77"``, ``"2*s1"``, ``"(s0 + 1)//2"``,
    ``"Max(1, s0)"``) with its symbols bound in ``sizes``, evaluated by :class:`_Expression`
    (integers only, each step within :data:`MAX_SIZE`; anything else is refused)."""
    if isinstance(value, bool):
        raise ArgumentError(f"size {value!r}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, str) and len(value) <= 200:
        out = _Expression(value, sizes).value()
    else:
        raise ArgumentError(f"size {str(value)[:40]!r}")
    if not 0 <= out <= MAX_SIZE:
        raise SizeOutOfRange(f"size {str(value)[:40]} out of range")
    return out


class _Expression:
    """A symbolic size's text parsed by recursive descent: ``+ - * // / %``, parentheses, unary
    minus, ``Max``/``Min`` of arguments and ``floor``/``ceiling`` of one; integers and bound
    symbols. Every intermediate value stays within :data:`MAX_SIZE` in magnitude, nesting
    within 32 levels: a hostile text (``9**9**9``) is refused, never evaluated."""

    _FUNCTIONS: ClassVar[dict[str, Callable[[list[int]], int]]] = {"Max": max, "Min": min}

    def __init__(self, text: str, sizes: dict[str, int]) -> None:
        self.text, self.sizes = text, sizes
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ArgumentError(f"symbolic size {text!r} not understood")
            kind = "int" if m.group(1) else "name" if m.group(2) else "op"
            self.tokens.append((kind, m.group(1) or m.group(2) or m.group(3)))
            pos = m.end()
        self.at = 0
        self.depth = 0

    def value(self) -> int:
        out = self._sum()
        if self.at != len(self.tokens):
            raise ArgumentError(f"symbolic size {self.text!r} not understood")
        return out

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens) or (expected is not None and self.tokens[self.at][1] != expected):
            raise ArgumentError(f"symbolic size {self.text!r} not understood")
        self.at += 1
        return self.tokens[self.at - 1]

    @staticmethod
    def _checked(v: int) -> int:
        if abs(v) > MAX_SIZE:
            raise SizeOutOfRange(f"size out of range ({v:.3g})")
        return v

    def _sum(self) -> int:
        out = self._product()
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            right = self._product()
            out = self._checked(out + right if op == "+" else out - right)
        return out

    def _product(self) -> int:
        out = self._unary()
        while self._peek() in ("*", "//", "/", "%"):
            op = self._take()[1]
            right = self._unary()
            if op == "*":
                out = self._checked(out * right)
            elif right == 0:
                raise ArgumentError(f"symbolic size {self.text!r} divides by 0")
            else:  # sizes are integers: / is floor division, as in torch's size expressions
                out = out % right if op == "%" else out // right
        return out

    def _unary(self) -> int:
        if self._peek() == "-":
            self._take()
            return -self._unary()
        return self._atom()

    def _atom(self) -> int:
        self.depth += 1
        if self.depth > 32:
            raise ArgumentError(f"symbolic size {self.text[:40]!r} nested too deeply")
        try:
            kind, token = self._take()
            if kind == "int":
                return self._checked(int(token)) if len(token) <= 16 else self._checked(MAX_SIZE + 1)
            if token == "(":
                out = self._sum()
                self._take(")")
                return out
            if kind == "name" and self._peek() == "(" and token in ("Max", "Min", "floor", "ceiling"):
                self._take("(")
                args = [self._sum()]
                while self._peek() == ",":
                    self._take()
                    args.append(self._sum())
                self._take(")")
                if token in self._FUNCTIONS:
                    return self._FUNCTIONS[token](args)
                if len(args) != 1:
                    raise ArgumentError(f"symbolic size {self.text!r} not understood")
                return args[0]  # integer sizes: floor and ceiling of an int are itself
            if kind == "name" and token in self.sizes:
                return self._checked(int(self.sizes[token]))
            raise ArgumentError(f"symbolic size {self.text!r} not bound")
        finally:
            self.depth -= 1


def with_compiled_costs(costs: OpCosts, work: CompiledWork) -> OpCosts:
    """``costs`` with the generated kernels' shares counted (each with its node), and those
    kernels no longer unsupported."""
    if not costs.has_shapes or not len(work.share_event):
        return costs
    dtypes = list(costs.dtypes)
    code = {d: i for i, d in enumerate(dtypes)}
    remap = np.array([code.setdefault(d, len(code)) for d in work.share_dtypes] or [0], np.int32)
    dtypes = list(code)
    n_old = len(costs.counted)
    node = np.concatenate([np.full(n_old, -1, np.int64), work.share_node])
    keep = ~np.isin(costs.unsupported, work.costed)
    return msgspec.structs.replace(
        costs,
        counted=np.concatenate([costs.counted, work.share_event]),
        flops=np.concatenate([costs.flops, work.share_cost[:, 0]]),
        macs=np.concatenate([costs.macs, work.share_cost[:, 1]]),
        bytes_read=np.concatenate([costs.bytes_read, work.share_cost[:, 2]]),
        bytes_written=np.concatenate([costs.bytes_written, work.share_cost[:, 3]]),
        dtype=np.concatenate([costs.dtype, remap[work.share_dtype]]).astype(np.int32),
        family=np.concatenate([costs.family, work.share_family]).astype(np.int32),
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
    share_in = ctx.in_selection(ts[work.share_event])
    return CompiledSummary(
        graphs=len(np.unique(work.run_graph[run_in & (work.run_graph >= 0)])),
        runs=float(run_in.sum()) / n,
        events=float(child_in.sum()) / n,
        matched=float(matched_in.sum()) / n,
        recomputed_flops=float(work.share_recomputed[share_in].sum()) / n,
        nodes_from_table=int(work.created.sum()),
        runs_without_graph=float((run_in & (work.run_graph < 0)).sum()) / n,
        overhead_us=overhead_us / n,
    )
