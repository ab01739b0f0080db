"""The module tree, rebuilt from whichever scope events the trace has.

Sources, in order of preference (docs/trace-conventions.md): traceprof's own scopes, PyTorch
Lightning scopes, ``nn.Module`` python_function events, user annotations. A node is a *call
path*: the keys of the enclosing scopes, outermost first; repeated calls of one path share a node.

Scopes opened inside a backward node op (modules re-run by activation checkpointing) are joined
to the forward node of the same module instance instead of starting a new tree.

A trace with the compiled-kernel table but no module scopes of any source (recorded by
torch.profiler itself) takes traceprof's source with no scope: the table names its modules
(traceprof.analysis.compiled makes the nodes).
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.analysis.link import Links
from traceprof.errors import TraceReadError
from traceprof.read.limits import MAX_TREE_DEPTH
from traceprof.result.sources import Source as Source  # where the analysis has imported it from
from traceprof.trace import schema
from traceprof.trace.columns import Trace, index_dtype, unique
from traceprof.trace.model import ModuleTable
from traceprof.trace.schema import Kind


def check_depth(trace: Trace, depth: int, what: str) -> None:
    """A one-line error when a tree of ``depth`` levels, from ``what``, is deeper than
    :data:`MAX_TREE_DEPTH`."""
    if depth > MAX_TREE_DEPTH:
        raise TraceReadError(
            trace.metadata.path or "the trace",
            f"{what} nested more than {MAX_TREE_DEPTH} levels deep; traceprof builds module trees "
            f"of at most {MAX_TREE_DEPTH} levels",
        )


class ScopeKey(msgspec.Struct, frozen=True):
    """What one scope name says: the node key, the module's class and its qualified name."""

    key: str
    class_name: str
    qualified_name: str | None  # known for traceprof and Lightning scopes


class HierarchyNode(msgspec.Struct, frozen=True):
    id: int
    parent: int  # -1 for a root
    path: tuple[str, ...]
    key: str
    class_name: str
    qualified_name: str
    first_ts: float
    #: a group of compiled work without module information (analysis.compiled_regions): a
    #: compiled graph, a graph replay or a kernel family, not a module
    group: bool = False


class Hierarchy(msgspec.Struct, frozen=True):
    source: Source
    nodes: tuple[HierarchyNode, ...]
    scope_mask: np.ndarray  # bool per event: the event is a scope of the chosen source
    node_of_scope: np.ndarray  # per event (trace.index_dtype): node of a scope event, -1 elsewhere
    recompute_mask: np.ndarray  # bool per event: scope opened inside a backward node op
    warnings: tuple[str, ...]
    #: per event (trace.index_dtype): the node the compiled-kernel table gives it, whatever
    #: scope is around it (a compiled kernel event and everything nested in it), -1 elsewhere;
    #: None when the trace has no compiled work joined to the table (analysis.compiled)
    event_node: np.ndarray | None = None
    #: the source asked for, when the trace has none of it (the tree is then empty)
    missing: Source | None = None
    #: per GPU work item of ``Links.gpu_work`` (trace.index_dtype): the node it goes to, whatever
    #: its anchor's node (a kernel replayed from a graph launch, analysis.compiled_regions), -1
    #: elsewhere; None when no item has one
    work_node: np.ndarray | None = None
    #: per event (trace.index_dtype): the group node it is one call of (a compiled region's
    #: run, a graph launch), -1 elsewhere; None when the tree has no group nodes
    call_node: np.ndarray | None = None

    @property
    def description(self) -> str:
        """Where the nodes come from (the profile's ``source_description``)."""
        if self.missing is not None:
            return _missing(self.missing)
        return self.source.nodes_description


def scope_labels(trace: Trace, tree: Hierarchy) -> dict[int, str]:
    """Name code -> how a viewer names the scope events of that name (a timeline's labels): the
    module's qualified name (its class for the model itself, ``""``) for traceprof and Lightning
    scopes, the node's key for the others (``GPT2Block_0``, an annotation's name); never the raw
    spelling (``[traceprof:1]GPT2LMHeadModel: ``)."""
    scopes = np.flatnonzero(tree.scope_mask)
    if not len(scopes) or not tree.nodes:
        return {}
    codes, first = np.unique(trace.events.name[scopes], return_index=True)
    named = tree.source.named
    out: dict[int, str] = {}
    for code, node in zip(codes.tolist(), tree.node_of_scope[scopes[first]].tolist()):
        if 0 <= node < len(tree.nodes):
            hn = tree.nodes[node]
            out[code] = (hn.qualified_name or hn.class_name) if named else hn.key
    return out


def _missing(requested: Source) -> str:
    return f"the trace has no {requested.description} (--hierarchy {requested.value})"


def _parse_traceprof(name: str) -> ScopeKey | None:
    m = schema.TRACEPROF_SCOPE_RE.match(name)
    if not m:
        return None
    cls, qual = m.group(2).strip(), m.group(3).strip()
    return ScopeKey(key=qual, class_name=cls, qualified_name=qual)


def _parse_lightning(name: str) -> ScopeKey | None:
    m = schema.LIGHTNING_SCOPE_RE.match(name)
    if not m:
        return None
    cls, qual = m.group(1).strip().rsplit(".", 1)[-1], m.group(2).strip()
    return ScopeKey(key=qual, class_name=cls, qualified_name=qual)


def _parse_nn_module(name: str) -> ScopeKey | None:
    m = schema.NN_MODULE_RE.match(name)
    if not m:
        return None
    return ScopeKey(key=f"{m.group(1)}_{m.group(2)}", class_name=m.group(1), qualified_name=None)


def _parse_annotation(name: str) -> ScopeKey | None:
    # steps, and the scope Inductor opens around each run of a compiled graph: not the user's
    # (a compiled graph's work gets its group nodes, analysis.compiled_regions)
    if schema.STEP_RE.match(name) or schema.COMPILED_CALL_RE.match(name):
        return None
    return ScopeKey(key=name, class_name="", qualified_name=None)


# source -> (event kinds that can carry its scopes, name parser)
_PARSERS = {
    Source.TRACEPROF: ((Kind.ANNOTATION, Kind.CPU_OP), _parse_traceprof),
    Source.LIGHTNING: ((Kind.ANNOTATION, Kind.CPU_OP), _parse_lightning),
    Source.NN_MODULE: ((Kind.PYTHON,), _parse_nn_module),
    Source.ANNOTATIONS: ((Kind.ANNOTATION,), _parse_annotation),
}


def build_hierarchy(trace: Trace, links: Links, source: Source | str | None = None) -> Hierarchy:
    """The module tree of ``trace`` from ``source``, or from the best source present."""
    ev = trace.events
    warnings: list[str] = []
    candidates = [Source(source)] if source not in (None, "auto") else list(_PARSERS)
    chosen, keys, mask = Source.NONE, [], np.zeros(len(ev), bool)
    for src in candidates:
        if src is Source.NONE:
            break
        kinds, parse = _PARSERS[src]
        parsed = [parse(s) for s in ev.names]
        has_key = np.array([p is not None for p in parsed] or [False])
        m = np.isin(ev.kind, kinds) & (links.depth >= 0)
        if len(ev):
            m &= has_key[ev.name]
        if m.any():
            chosen, keys, mask = src, parsed, m
            break
    if chosen is Source.TRACEPROF and mask.any():
        # every scope's name matched the convention (_parse_traceprof)
        matches = [schema.TRACEPROF_SCOPE_RE.match(ev.names[c]) for c in unique(ev.name[mask])]
        versions = {int(m.group(1)) for m in matches if m is not None}
        if max(versions) > schema.TRACEPROF_SCOPE_VERSION:
            warnings.append(
                f"module scopes of convention version {max(versions)} are newer than this "
                f"traceprof reads ({schema.TRACEPROF_SCOPE_VERSION}); names may be wrong"
            )
    if (
        chosen in (Source.ANNOTATIONS, Source.NONE)
        and source in (None, "auto")
        and trace.metadata.compiled_table is not None
        and trace.metadata.compiled_table.graphs
    ):
        # a trace with the compiled-kernel table but without traceprof's scopes (recorded by
        # torch.profiler itself): the table names the modules (analysis.compiled makes them)
        chosen, keys, mask = Source.TRACEPROF, [], np.zeros(len(ev), bool)
    missing = Source(source) if chosen is Source.NONE and source not in (None, "auto", Source.NONE) else None
    if missing is not None:
        warnings.append(_absent_source(trace, links, missing))
    if chosen is Source.NONE:
        empty = np.full(len(ev), -1, index_dtype(len(ev)))
        return Hierarchy(chosen, (), mask, empty, np.zeros(len(ev), bool), tuple(warnings), missing=missing)
    return _build(trace, links, chosen, keys, mask, warnings)


def _absent_source(trace: Trace, links: Links, requested: Source) -> str:
    """The warning for a requested source the trace has none of: what it has instead, and the
    value of the option that takes it."""
    found = build_hierarchy(trace, links)
    what = _missing(requested)
    if found.source is Source.NONE:
        return f"{what}, and no other module or annotation events"
    return (
        f"{what}; it has {len(found.nodes)} nodes from {found.source.description} instead: "
        f"--hierarchy {found.source.value} (or auto, the default) takes them"
    )


def _build(
    trace: Trace,
    links: Links,
    source: Source,
    keys: list[ScopeKey | None],
    mask: np.ndarray,
    warnings: list[str],
) -> Hierarchy:
    ev = trace.events
    table = trace.metadata.module_table if source is Source.TRACEPROF else None
    scope_parent = links.nearest(mask, include_self=False)
    recompute = mask & (links.backward_node >= 0)
    node_of = np.full(len(ev), -1, index_dtype(len(ev)))  # fewer nodes than events
    nodes: list[HierarchyNode] = []
    index: dict[tuple[int, str], int] = {}
    first_forward_node_of_key: dict[str, int] = {}
    # forward scopes first, so that every re-run scope finds the forward node it repeats
    passes = [(level, False) for level in links.levels] + [(level, True) for level in links.levels]
    for level, recompute_pass in passes:
        scopes = level[mask[level] & (recompute[level] == recompute_pass)]
        if len(scopes) == 0:
            continue
        order = np.argsort(ev.ts[scopes], kind="stable")
        scopes = scopes[order]
        parents = scope_parent[scopes]
        parent_nodes = np.where(parents >= 0, node_of[np.maximum(parents, 0)], -1)
        names = ev.name[scopes]
        pairs = np.stack([parent_nodes, names.astype(np.int64), recompute[scopes]], axis=1)
        uniq, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
        resolved = np.empty(len(uniq), np.int64)
        for u, ((pnode, name_code, is_recompute), f) in enumerate(zip(uniq.tolist(), first)):
            sk: ScopeKey = keys[name_code]
            if is_recompute and sk.key in first_forward_node_of_key:
                resolved[u] = first_forward_node_of_key[sk.key]
                continue
            node = index.get((pnode, sk.key))
            if node is None:
                holder = _containers(trace, nodes, index, int(pnode), sk, table, float(ev.ts[scopes[f]]))
                parent_path = nodes[holder].path if holder >= 0 else ()
                check_depth(trace, len(parent_path) + 1, source.description)
                path = parent_path + (sk.key,)
                node = len(nodes)
                nodes.append(
                    HierarchyNode(
                        id=node,
                        parent=holder,
                        path=path,
                        key=sk.key,
                        class_name=sk.class_name,
                        qualified_name=sk.qualified_name if sk.qualified_name is not None else ".".join(path),
                        first_ts=float(ev.ts[scopes[f]]),
                    )
                )
                index[(pnode, sk.key)] = node
                if not is_recompute:
                    first_forward_node_of_key.setdefault(sk.key, node)
            resolved[u] = node
        node_of[scopes] = resolved[inverse.ravel()]
    return Hierarchy(source, tuple(nodes), mask, node_of, recompute, tuple(warnings))


def _containers(
    trace: Trace,
    nodes: list[HierarchyNode],
    index: dict[tuple[int, str], int],
    pnode: int,
    sk: ScopeKey,
    table: ModuleTable | None,
    first_ts: float,
) -> int:
    """The node a module scope hangs under: its enclosing scope's node, or, between the two, the
    containers that are never called (a ``ModuleList`` ``blocks`` between the root and
    ``blocks.0``), made nodes from the module table so that the tree has the model's levels.
    Containers have no scope, so no time of their own. A module scope outside every other
    hangs under the model (the table's root, ``""``) when the model itself was not called
    (PyTorch Lightning's ``training_step`` calling ``self.encoder`` and ``self.head``, never
    ``forward``): the model stays the root, its submodules named by their qualified names."""
    if table is None or sk.qualified_name is None:
        return pnode
    if pnode < 0:
        if not sk.qualified_name or "" not in table.modules:
            return pnode
        pnode = index.get((-1, ""), -1)
        if pnode < 0:
            pnode = len(nodes)
            nodes.append(
                HierarchyNode(
                    id=pnode,
                    parent=-1,
                    path=("",),
                    key="",
                    class_name=table.modules[""].class_name,
                    qualified_name="",
                    first_ts=first_ts,
                )
            )
            index[(-1, "")] = pnode
    outer = nodes[pnode].qualified_name
    parts = sk.qualified_name.split(".")
    holder = pnode
    for k in range(1, len(parts)):
        prefix = ".".join(parts[:k])
        if (outer and not prefix.startswith(outer + ".")) or prefix not in table.modules:
            continue
        node = index.get((holder, prefix))
        if node is None:
            check_depth(trace, len(nodes[holder].path) + 1, Source.TRACEPROF.description)
            node = len(nodes)
            nodes.append(
                HierarchyNode(
                    id=node,
                    parent=holder,
                    path=nodes[holder].path + (prefix,),
                    key=prefix,
                    class_name=table.modules[prefix].class_name,
                    qualified_name=prefix,
                    first_ts=first_ts,
                )
            )
            index[(holder, prefix)] = node
        holder = node
    return holder
