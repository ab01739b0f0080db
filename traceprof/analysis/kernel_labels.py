"""Kernel labels: the labels PyTorch's own tools write on GPU work, read where a trace has them
(docs/attribution.md "Kernel labels"; the spellings: ``schema.KERNEL_LABEL_ARGS``).

**Module labels.** A GPU work item (kernel, memcpy, memset) labelled with a module's qualified
name goes to that module's node: torchtitan's ``{"module_fqn": "layers.0.attention.wq"}``,
relative to the model, and Inductor's cudagraph labels (``"L.layers.0.attention.wq"``, relative
to the module the compiled frame ran on: ``L`` is that module). The node is found by qualified
name, else made under the deepest node that holds it, with the levels in between, as the
compiled-kernel table's join makes its nodes (:mod:`traceprof.analysis.compiled`). A label of
several modules (``"L.a + L.b"``: a kernel fused from the work of several modules) puts the
item on their deepest common module, *fused across modules*: in the node's fused record too.
With a module table, a label must name one of its modules (Inductor's labels may end with the
FX node's op name, ``L.layers.0.fc1.linear.addmm``: then the module is the name without it);
labels naming no module of the table are counted in a warning and change nothing.

**Source stacks.** A kernel labelled with the source stacks of the FX nodes it computes
(``torch._inductor.profiler``) goes to the module whose ``forward`` the stacks name, where the
trace says which module that is: a frame ``File "m.py", line 14, in forward`` lies in the
``forward`` of the modules whose calls run that function in the trace (the first ``forward``
Python frame inside their module scopes, with_stack=True). The frames are walked from the
outermost, each narrowing the module to one inside the previous; a frame that several
instances run (blocks called in a loop share one stack) ends the walk. A stack that ends no
deeper than the module the kernel's launch is in places nothing.

Work that the compiled-kernel table placed keeps its module. What labels do not place keeps
the grouping of :mod:`traceprof.analysis.compiled_regions`. Only GPU work moves: the CPU time
of its launch stays where the launch is.

Python loops here run over distinct labels and distinct (label, module of the launch) pairs;
per-item work is numpy over columns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import numpy as np

from traceprof.analysis.classify import Context, classify_events
from traceprof.analysis.compiled_nodes import CONTAINER_CLASSES, order_made
from traceprof.analysis.hierarchy import Hierarchy, HierarchyNode, Source
from traceprof.analysis.link import Links
from traceprof.flops import REGISTRY
from traceprof.read.limits import MAX_TREE_DEPTH
from traceprof.result.model import PASSES, OpKind
from traceprof.result.sources import NAMED_SOURCES
from traceprof.trace import schema
from traceprof.trace.columns import KernelLabels, Trace, index_dtype
from traceprof.trace.module_names import common_module, joined_name
from traceprof.trace.schema import Kind

#: sources whose nodes have qualified names, under which labelled modules are found or made
_NAMED = NAMED_SOURCES
#: sources whose nodes are no modules: labelled modules are made beside them
_UNNAMED = (Source.ANNOTATIONS, Source.NONE)
#: what the header adds to the source of the tree, per kind of label that placed work
_DESCRIBED = {
    schema.KERNEL_LABEL_MODULE_FQN: schema.KERNEL_LABEL_MODULE_FQN,
    schema.KERNEL_LABEL_STR: "Inductor cudagraph labels",
    schema.KERNEL_LABEL_ANNOTATION: schema.KERNEL_LABEL_ANNOTATION,
    schema.KERNEL_LABEL_STACK: "source stacks",
}
_PASS_VALUES = tuple(p.value for p in PASSES)


class LabelWork(msgspec.Struct, frozen=True):
    """What the kernel labels placed (numpy arrays; no per-event Python object)."""

    events: np.ndarray  # the GPU work events placed, ascending
    node: np.ndarray  # per placed event: its node
    run: np.ndarray  # per placed event: the run it is a call of (its compiled region, else its launch)
    backward: np.ndarray  # per placed event: its launch is backward work
    span: np.ndarray  # per placed event: code into spans, -1 when not fused
    spans: tuple[str, ...]  # "a, b": the modules of a label of several modules
    placed: np.ndarray  # bool per event: a GPU work event the labels placed
    fused: np.ndarray  # bool per event: placed on the common module of several
    created: np.ndarray  # bool per tree node: made from the labels
    container: np.ndarray  # bool per tree node: a container never called (a ModuleList)
    kinds: tuple[str, ...]  # the arg names of the labels that placed work, in schema order

    @property
    def description(self) -> str:
        """What the header adds to the tree's source: ``kernel labels (module_fqn)``."""
        return f"kernel labels ({', '.join(_DESCRIBED[k] for k in self.kinds)})"


def place_labelled_work(trace: Trace, links: Links, tree: Hierarchy) -> tuple[Hierarchy, LabelWork | None]:
    """The tree with the GPU work the trace's kernel labels place (``work_node`` set, nodes made
    by qualified name), and what they placed; ``(tree, None)`` when the trace has no label that
    places anything (the tree keeps its warnings about labels that did not)."""
    labels = trace.labels
    if labels is None or not len(labels) or not len(links.gpu_work):
        return tree, None
    return _Placement(trace, links, tree, labels).result()


class _Placement:
    """One placement of a trace's labelled work (the state of :func:`place_labelled_work`)."""

    def __init__(self, trace: Trace, links: Links, tree: Hierarchy, labels: KernelLabels) -> None:
        self.trace, self.links, self.tree, self.labels = trace, links, tree, labels
        self.warnings: list[str] = []
        table = trace.metadata.module_table
        self.modules = set(table.modules) if table is not None else None
        self.classes = {q: m.class_name for q, m in table.modules.items()} if table is not None else {}
        self.named = tree.source in _NAMED
        self.nodes = list(tree.nodes)
        self.index: dict[tuple[int, str], int] = {}
        self.by_name: dict[str, int] = {}
        if self.named:
            for n in tree.nodes:
                if not n.group:
                    self.index[(n.parent, n.key)] = n.id
                    self.by_name.setdefault(n.qualified_name, n.id)
        self.tree_names = set(self.by_name)
        #: the distinct module labels, each part's path and whether it is Inductor's
        self.parsed: list[tuple[tuple[str, bool], ...]] = []
        #: the spans of work placed on the common module of several ("a, b") -> its code
        self.spans: dict[str, int] = {}
        #: the arg names of the labels that placed work
        self.kinds: set[str] = set()

    def result(self) -> tuple[Hierarchy, LabelWork | None]:
        ev, links, labels, tree = self.trace.events, self.links, self.labels, self.tree
        # the labelled rows that are GPU work items (with a time), and their items
        item = np.searchsorted(links.gpu_work, labels.event)
        ok = item < len(links.gpu_work)
        ok[ok] = links.gpu_work[item[ok]] == labels.event[ok]
        rows, item = np.flatnonzero(ok), item[ok]
        anchor = links.anchor[item].astype(np.int64)
        scope_of = links.nearest(tree.scope_mask)
        base, backward = classify_events(anchor, links, tree, scope_of)
        base = base.astype(np.int64)
        if tree.event_node is not None:  # placed by the compiled-kernel table: it is exact
            free = (anchor < 0) | (tree.event_node[np.maximum(anchor, 0)] < 0)
            rows, item, anchor, base, backward = (a[free] for a in (rows, item, anchor, base, backward))
        if not len(rows):
            return tree, None
        base = self._module_of(base)
        texts = ev.texts
        fqn, kind_of = self._module_labels(rows, texts)
        node = np.full(len(rows), -1, np.int64)
        span = np.full(len(rows), -1, np.int64)
        first_ts = ev.ts[links.gpu_work[item]]
        if (fqn >= 0).any():
            self._place_modules(fqn, kind_of, base, first_ts, (node, span))
        stack = labels.stack[rows].astype(np.int64)
        todo = (node < 0) & (stack >= 0)
        if todo.any():
            self._place_stacks(stack, base, todo, (node, span))
        placed = node >= 0
        if not placed.any():
            return self._tree(None), None
        n = len(ev)
        events = links.gpu_work[item[placed]].astype(np.int64)
        order = np.argsort(events, kind="stable")
        events, p_node, p_span = events[order], node[placed][order], span[placed][order]
        p_anchor, p_backward = anchor[placed][order], backward[placed][order]
        work_node = np.full(len(links.gpu_work), -1, index_dtype(n))
        work_node[item[placed]] = node[placed]
        placed_event = np.zeros(n, bool)
        placed_event[events] = True
        fused_event = np.zeros(n, bool)
        fused_event[events[p_span >= 0]] = True
        created = np.zeros(len(self.nodes), bool)
        created[len(tree.nodes) :] = True
        order_made(self.nodes, len(self.tree.nodes), p_node, ev.ts[events])  # display order
        container = np.array([hn.class_name in CONTAINER_CLASSES for hn in self.nodes], bool)
        work = LabelWork(
            events=events,
            node=p_node,
            run=self._runs(p_anchor),
            backward=p_backward,
            span=p_span,
            spans=tuple(self.spans),
            placed=placed_event,
            fused=fused_event,
            created=created,
            container=container,
            kinds=tuple(k for k in _DESCRIBED if k in self.kinds),
        )
        return self._tree(work_node), work

    def _tree(self, work_node: np.ndarray | None) -> Hierarchy:
        return msgspec.structs.replace(
            self.tree,
            nodes=tuple(self.nodes),
            work_node=work_node if work_node is not None else self.tree.work_node,
            warnings=(*self.tree.warnings, *self.warnings),
        )

    # -- module labels ---------------------------------------------------------------------------

    def _module_labels(self, rows: np.ndarray, texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Per labelled row, its module label (a code into self.parsed, -1: none) and the arg
        that gave it: ``module_fqn``, else an Inductor label (``str``), else one inside
        ``annotation``."""
        seen: dict[tuple[tuple[str, bool], ...], int] = {}
        out = np.full(len(rows), -1, np.int64)
        kind_of = np.full(len(rows), -1, np.int8)
        columns = (
            (schema.KERNEL_LABEL_MODULE_FQN, self.labels.module_fqn),
            (schema.KERNEL_LABEL_STR, self.labels.text),
            (schema.KERNEL_LABEL_ANNOTATION, self.labels.annotation),
        )
        for k, (arg, column) in enumerate(columns):
            codes = column[rows].astype(np.int64)
            take = (codes >= 0) & (out < 0)
            distinct = np.unique(codes[take])
            if not len(distinct):
                continue
            parsed = np.full(len(distinct), -1, np.int64)
            for i, code in enumerate(distinct.tolist()):
                parts = _module_label(arg, texts[code])
                if parts is not None:
                    parsed[i] = seen.setdefault(parts, len(seen))
            out[take] = parsed[np.searchsorted(distinct, codes[take])]
            kind_of[take & (out >= 0)] = k
        self.parsed = list(seen)
        return out, kind_of

    def _place_modules(
        self,
        fqn: np.ndarray,
        kind_of: np.ndarray,
        base: np.ndarray,
        first_ts: np.ndarray,
        out: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """Each row's module label placed: its node (and span when fused) in ``out``."""
        node, span = out
        if self.tree.source not in _NAMED + _UNNAMED:
            self.warnings.append(
                f"kernel labels naming modules not used: the module tree comes from "
                f"{self.tree.source.description}, without qualified names to put the labelled "
                "modules under"
            )
            return
        with_op = self._with_op_names()
        rows = np.flatnonzero(fqn >= 0)
        pairs, first, inverse = _distinct_pairs(fqn[rows], base[rows])
        counts = np.bincount(inverse, minlength=len(pairs))
        pair_node = np.full(len(pairs), -1, np.int64)
        pair_span = np.full(len(pairs), -1, np.int64)
        unknown: dict[str, int] = {}
        for k, (label, at) in enumerate(pairs.tolist()):
            parts = self.parsed[label]
            resolved = self._resolve(parts, self._qualified(at), with_op)
            if resolved is None:
                text = _spelled(parts)
                unknown[text] = unknown.get(text, 0) + int(counts[k])
                continue
            module = common_module(resolved)
            pair_node[k] = self._node(module, float(first_ts[rows[first[k]]]))
            if len(set(resolved)) > 1:
                pair_span[k] = self._span(set(resolved))
        node[rows] = pair_node[inverse]
        span[rows] = pair_span[inverse]
        arg_names = (schema.KERNEL_LABEL_MODULE_FQN, schema.KERNEL_LABEL_STR, schema.KERNEL_LABEL_ANNOTATION)
        self.kinds.update(arg_names[k] for k in np.unique(kind_of[rows][node[rows] >= 0]).tolist())
        if unknown:
            names = sorted(unknown, key=lambda t: -unknown[t])
            shown = ", ".join(n if len(n) <= 80 else n[:77] + "..." for n in names[:3])
            shown += ", ..." if len(names) > 3 else ""
            count = sum(unknown.values())
            where = (
                "the trace's module table does not have"
                if self.modules is not None
                else "too deep for a module tree"
            )
            self.warnings.append(
                f"{count} GPU work item{'s carry' if count != 1 else ' carries'} kernel labels naming "
                f"{len(names)} module{'s' if len(names) != 1 else ''} {where} ({shown}): they stay "
                "where the rest of the trace puts them"
            )

    def _span(self, modules: Iterable[str]) -> int:
        """The code of the span of work fused across ``modules``, named ``"a, b"`` (sorted)."""
        return self.spans.setdefault(", ".join(sorted(modules)), len(self.spans))

    def _with_op_names(self) -> bool:
        """Whether the trace's Inductor labels end with the FX node's op name (a revision of
        them does: ``L.layers.0.fc1.linear.addmm``), told without a module table by every
        one of them ending with the name of an ATen op."""
        ends = [p.rsplit(".", 1)[-1] for parts in self.parsed for p, anchored in parts if anchored and p]
        return bool(ends) and all(_is_op_name(e) for e in ends)

    def _resolve(self, parts: tuple[tuple[str, bool], ...], base: str, with_op: bool) -> list[str] | None:
        """The qualified names a label's parts name (None: one names no module the trace has).
        A part of an Inductor label (``anchored``) is relative to the module the compiled frame
        ran on, taken to be the module of the launch (``base``), else to the model; one may end
        with an op name. A ``module_fqn`` is relative to the model."""
        out = []
        for path, anchored in parts:
            if anchored:
                exact = [joined_name(base, path), path] if base else [path]
                shorter = path.rsplit(".", 1)[0] if "." in path else ""
                dropped = ([joined_name(base, shorter), shorter] if base else [shorter]) if path else []
                found: str | None
                if self.modules is not None:
                    found = next((q for q in exact + dropped if q in self.modules), None)
                else:  # nothing says which modules exist: the trace's own names, else as spelled
                    tried = dropped + exact if with_op else exact
                    found = next((q for q in tried if q in self.tree_names), tried[0])
            else:
                found = path if self.modules is None or path in self.modules else None
            if found is None or found.count(".") >= MAX_TREE_DEPTH - 2:
                return None
            out.append(found)
        return out

    # -- source stacks ---------------------------------------------------------------------------

    def _place_stacks(
        self,
        stack: np.ndarray,
        base: np.ndarray,
        todo: np.ndarray,
        out: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """Each row of ``todo``'s source stacks placed where they name a module's forward: its
        node (and span when fused) in ``out``."""
        node, span = out
        rows = np.flatnonzero(todo)
        known = self._known_forwards() if self.tree.source in _NAMED + (Source.NN_MODULE,) else {}
        pairs, _, inverse = _distinct_pairs(stack[rows], base[rows])
        pair_node = np.full(len(pairs), -1, np.int64)
        pair_span = np.full(len(pairs), -1, np.int64)
        parents = [n.parent for n in self.nodes]
        for k, (code, at) in enumerate(pairs.tolist()):
            stacks = _stacks(self.trace.events.texts[code])
            if not stacks or not known:
                continue
            ends = [_walk(frames, at, parents, known) for frames in stacks]
            if any(e < 0 or e == at for e in ends):
                continue  # a stack that says no more than the launch's module
            distinct = sorted(set(ends))
            pair_node[k] = _common_node(distinct, parents)
            if len(distinct) > 1:
                pair_span[k] = self._span(self.nodes[d].qualified_name or self.nodes[d].key for d in distinct)
        node[rows] = pair_node[inverse]
        span[rows] = pair_span[inverse]
        missed = int((node[rows] < 0).sum())
        if missed < len(rows):
            self.kinds.add(schema.KERNEL_LABEL_STACK)
        if missed:
            self.warnings.append(
                f"{missed} GPU work item{'s' if missed != 1 else ''} with source stacks "
                f"({schema.KERNEL_LABEL_STACK}) not placed by them: a stack names code, not a "
                "module instance (blocks called in a loop share one), and only the forward of "
                "modules whose calls the trace's scopes and Python frames (with_stack=True) "
                "show can be named; they stay where the rest of the trace puts them"
            )

    def _known_forwards(self) -> dict[str, dict[int, frozenset[int]]]:
        """The ``forward`` functions the trace shows modules run: file path -> the line each
        starts at -> the nodes whose calls run it (the first ``forward`` Python frame inside
        each of their scopes)."""
        ev, links, tree = self.trace.events, self.links, self.tree

        def is_forward(name: str) -> bool:
            m = schema.PYTHON_FRAME_RE.match(name)
            return m is not None and m.group(3) == schema.MODULE_FORWARD_NAME

        frames = np.flatnonzero(ev.named(is_forward) & (ev.kind == Kind.PYTHON) & (links.depth >= 0))
        if not len(frames):
            return {}
        scope = links.nearest(tree.scope_mask)[frames]
        frames, scope = frames[scope >= 0], scope[scope >= 0].astype(np.int64)
        order = np.lexsort((ev.ts[frames], scope))
        frames, scope = frames[order], scope[order]
        first = np.ones(len(scope), bool)
        first[1:] = scope[1:] != scope[:-1]
        nodes = tree.node_of_scope[scope[first]].astype(np.int64)
        pairs = np.unique(np.stack([ev.name[frames[first]].astype(np.int64), nodes], axis=1), axis=0)
        out: dict[str, dict[int, set[int]]] = {}
        for code, nd in pairs.tolist():
            m = schema.PYTHON_FRAME_RE.match(ev.names[code])
            if m is not None and nd >= 0:
                out.setdefault(m.group(1), {}).setdefault(int(m.group(2)), set()).add(nd)
        return {path: {line: frozenset(s) for line, s in starts.items()} for path, starts in out.items()}

    # -- nodes ---------------------------------------------------------------------------------

    def _module_of(self, node: np.ndarray) -> np.ndarray:
        """Each node, or its nearest ancestor that is a module (-1: none): a group node's
        module, nothing for trees whose nodes are no modules."""
        if self.tree.source in _UNNAMED:
            return np.full(len(node), -1, np.int64)
        up = np.array([hn.parent if hn.group else hn.id for hn in self.nodes] + [-1], np.int64)
        out: np.ndarray = node.copy()
        for _ in range(MAX_TREE_DEPTH):
            nxt: np.ndarray = up[np.where(out >= 0, out, len(self.nodes))]
            if np.array_equal(nxt, out):
                break
            out = nxt
        return out

    def _qualified(self, node: int) -> str:
        return self.nodes[node].qualified_name if node >= 0 and self.named else ""

    def _node(self, qualified: str, first_ts: float) -> int:
        """The node of the module ``qualified``: found by qualified name, else made under the
        deepest node that holds it, with the levels in between; without one, under the model's
        root when the module table lists it, else as a root."""
        if qualified in self.by_name:
            return self.by_name[qualified]
        parts = qualified.split(".") if qualified else []
        for k in range(len(parts) - 1, -1, -1):
            holder = self.by_name.get(".".join(parts[:k]))
            if holder is not None:
                return self._below(holder, parts, k, first_ts)
        if not parts or (self.modules is not None and "" in self.modules):
            root = self._add(-1, "", first_ts)
            return self._below(root, parts, 0, first_ts)
        return self._below(-1, parts, 0, first_ts)

    def _below(self, holder: int, parts: list[str], k: int, first_ts: float) -> int:
        for j in range(k + 1, len(parts) + 1):
            qualified = ".".join(parts[:j])
            found = self.index.get((holder, qualified))
            holder = found if found is not None else self._add(holder, qualified, first_ts)
        return holder

    def _add(self, parent: int, qualified: str, first_ts: float) -> int:
        node = len(self.nodes)
        path = (self.nodes[parent].path if parent >= 0 else ()) + (qualified,)
        class_name = self.classes.get(qualified, "")
        self.nodes.append(HierarchyNode(node, parent, path, qualified, class_name, qualified, first_ts))
        self.index[(parent, qualified)] = node
        self.by_name.setdefault(qualified, node)
        return node

    def _runs(self, anchor: np.ndarray) -> np.ndarray:
        """Per launch, the run it is part of: its compiled region (a graph's run), else the
        launch itself (a graph launch)."""
        ev = self.trace.events
        region = ev.named(
            lambda s: s.startswith(schema.COMPILED_REGION_PREFIX) or s == schema.COMPILED_BACKWARD_NAME
        )
        around = self.links.nearest(region)[np.maximum(anchor, 0)].astype(np.int64)
        return np.where(anchor < 0, -1, np.where(around >= 0, around, anchor))


# -- reading labels ------------------------------------------------------------------------------


def _distinct_pairs(labels: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (label, base node) pairs of the rows, each placed once: the pairs, the
    first row of each and each row's pair."""
    pairs, first, inverse = np.unique(
        np.stack([labels, base], axis=1), axis=0, return_index=True, return_inverse=True
    )
    return pairs, first, inverse.ravel()


def _decoded(text: bytes) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


def _module_label(arg: str, text: bytes) -> tuple[tuple[str, bool], ...] | None:
    """A label's modules: each part's path and whether it is Inductor's (relative to the
    compiled frame's root, ``L``); None when the label names no module. A ``module_fqn`` is a
    module's qualified name (several joined by " + "); a ``str`` label names modules only in
    Inductor's spelling (any other string is some other label); an ``annotation`` is the CUPTI
    monitor's JSON text of a list of annotation dicts (their ``module_fqn`` or ``str``, later
    ones winning), or a plain string read as a ``str`` label."""
    value = _decoded(text)
    if arg == schema.KERNEL_LABEL_ANNOTATION:
        inner: Any = value
        if isinstance(value, str):
            try:
                inner = json.loads(value)
            except (ValueError, RecursionError):
                inner = value
        if isinstance(inner, dict):
            inner = [inner]
        if isinstance(inner, list):
            merged: dict[str, Any] = {}
            for item in inner:
                if isinstance(item, dict):
                    merged.update(item)
            fqn, label = merged.get(schema.KERNEL_LABEL_MODULE_FQN), merged.get(schema.KERNEL_LABEL_STR)
            if isinstance(fqn, str):
                return _module_label(schema.KERNEL_LABEL_MODULE_FQN, msgspec.json.encode(fqn))
            if isinstance(label, str):
                return _module_label(schema.KERNEL_LABEL_STR, msgspec.json.encode(label))
            return None
        arg = schema.KERNEL_LABEL_STR
    if not isinstance(value, str) or not value.strip():
        return None
    parts = tuple(_part(p.strip()) for p in value.split(schema.KERNEL_LABEL_JOINER))
    if arg == schema.KERNEL_LABEL_STR and not all(anchored for _, anchored in parts):
        return None
    return parts if all(p or anchored for p, anchored in parts) else None


def _part(text: str) -> tuple[str, bool]:
    """A part of a label: its path, and whether it is spelled from Inductor's root (``L``)."""
    root = schema.KERNEL_LABEL_ROOT
    if text == root:
        return "", True
    if text.startswith(root + "."):
        return text[len(root) + 1 :], True
    return text, False


def _spelled(parts: tuple[tuple[str, bool], ...]) -> str:
    root = schema.KERNEL_LABEL_ROOT
    return schema.KERNEL_LABEL_JOINER.join(
        (f"{root}.{p}" if p else root) if anchored else p for p, anchored in parts
    )


def _is_op_name(name: str) -> bool:
    """An ATen op's name (``addmm``, ``convolution``), as FX names its nodes."""
    return name == "getitem" or REGISTRY.get(f"{schema.ATEN_OP_PREFIX}{name}") is not None


def _stacks(text: bytes) -> list[list[tuple[str, int, str]]]:
    """The frames (file, line, function) of each stack of a ``stack`` label, outermost first."""
    value = _decoded(text)
    texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    out = []
    for t in texts:
        if isinstance(t, str):
            frames = [(f, int(line), fn) for f, line, fn in schema.STACK_FRAME_RE.findall(t)]
            if frames:
                out.append(frames)
    return out


def _walk(
    frames: list[tuple[str, int, str]],
    start: int,
    parents: list[int],
    known: dict[str, dict[int, frozenset[int]]],
) -> int:
    """The module a stack names, from ``start`` (the launch's module, -1: none): each frame in
    a known ``forward`` narrows it to the one module inside the current one that runs it; a
    frame that several do ends the walk."""
    current = start
    for file, line, function in frames:
        runs = _forward_nodes(known, file, line, function)
        inside = [n for n in runs if current < 0 or _within(n, current, parents)]
        if len(inside) == 1:
            current = inside[0]
        elif len(inside) > 1 and current not in inside:
            break
    return current


def _forward_nodes(
    known: dict[str, dict[int, frozenset[int]]], file: str, line: int, function: str
) -> frozenset[int]:
    """The nodes whose ``forward`` holds a frame: the known forward of the longest path that
    names the frame's file, starting last at or before its line."""
    if function != schema.MODULE_FORWARD_NAME:
        return frozenset()
    paths = [p for p in known if p == file or file.endswith("/" + p) or p.endswith("/" + file)]
    if not paths:
        return frozenset()
    starts = known[max(paths, key=len)]
    before = [s for s in starts if s <= line]
    return starts[max(before)] if before else frozenset()


def _within(node: int, ancestor: int, parents: list[int]) -> bool:
    for _ in range(MAX_TREE_DEPTH + 1):
        if node == ancestor:
            return True
        if node < 0:
            return False
        node = parents[node]
    return False


def _common_node(nodes: list[int], parents: list[int]) -> int:
    """The deepest node that holds every one of ``nodes``."""

    def chain(n: int) -> list[int]:
        out: list[int] = []
        while n >= 0 and len(out) <= MAX_TREE_DEPTH:
            out.append(n)
            n = parents[n]
        return out[::-1]

    chains = [chain(n) for n in nodes]
    common = -1
    for level in zip(*chains):
        if any(x != level[0] for x in level):
            break
        common = level[0]
    return common


# -- what the later stages ask ---------------------------------------------------------------------


def label_calls(ctx: Context, work: LabelWork) -> np.ndarray:
    """Per tree node: the forward runs of the selection (a compiled region's run, a graph
    launch) that ran labelled work of the node or of its descendants, per step."""
    n = len(work.created)
    parent = np.array([hn.parent for hn in ctx.tree.nodes[:n]], np.int64)
    keep = ~work.backward & (work.run >= 0) & ctx.in_selection(ctx.trace.events.ts[np.maximum(work.run, 0)])
    pairs = np.unique(np.stack([work.run[keep], work.node[keep]], axis=1), axis=0)
    seen = [pairs]
    while len(pairs):  # their ancestors, a level at a time
        up = parent[pairs[:, 1]]
        pairs = np.unique(np.stack([pairs[up >= 0, 0], up[up >= 0]], axis=1), axis=0)
        seen.append(pairs)
    every = np.unique(np.concatenate(seen), axis=0)
    out: np.ndarray = np.bincount(every[:, 1], minlength=n)[:n] / ctx.n_steps
    return out


def label_fused_rows(
    ctx: Context, work: LabelWork, gpu_work: np.ndarray, node: np.ndarray, pass_code: np.ndarray
) -> dict[tuple[str, int, str, str], str]:
    """(kind, node, pass, name) of the kernel rows of labelled kernels fused across modules ->
    the modules their labels name (``gpu_work``, ``node``, ``pass_code``: the attributed GPU
    work of the selection)."""
    ev = ctx.trace.events
    fused = work.fused[gpu_work]
    if not fused.any():
        return {}
    at = np.searchsorted(work.events, gpu_work[fused])
    rows = np.stack([node[fused], pass_code[fused], ev.name[gpu_work[fused]], work.span[at]], axis=1)
    return {
        (OpKind.KERNEL.value, nd, _PASS_VALUES[ph], ev.names[name]): work.spans[sp]
        for nd, ph, name, sp in np.unique(rows, axis=0).tolist()
        if sp >= 0
    }
