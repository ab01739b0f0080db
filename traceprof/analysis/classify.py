"""Classification: the module node and the pass of each CPU event, within the selected steps.

A CPU event belongs to

- the **forward** of the node of its innermost scope, when it is not inside a backward node op;
- the **backward** of the node of a scope re-run inside the backward (activation checkpointing);
- otherwise the **backward** of the node of the forward op that created its backward node op;
- otherwise to no node (-1): the later stages put it in a "not in any module" group.

Its pass: backward for the backward's events; else forward inside a module; outside every
module, forward only under a top-level op autograd recorded (the loss), else other. An optimizer
step that runs a closure (Lightning, LBFGS) is looked through for the closure's work
(:mod:`traceprof.analysis.closures`). A tree built
from user annotations (a trace without module events) has no modules: an annotation node's pass
is the one its outermost annotation that names a pass declares (``## forward ##``,
``## optimizer ##``, ``nccl:all_reduce``: :func:`traceprof.trace.schema.annotation_pass`), else
forward when autograd recorded an op inside it (or the trace records no backward at all: an
inference), else other (metrics, waits for data).

:func:`make_context` receives the trace, its links and module tree, the steps and the selected
ones, and returns the :class:`Context` every later stage reads: the selection, the nesting of
the events (scope, top-level op), and :meth:`Context.classify`, which gives any CPU events their
node, backward flag and pass code.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.analysis.closures import closure_tops
from traceprof.analysis.hierarchy import Hierarchy, Source
from traceprof.analysis.link import Links
from traceprof.analysis.stage import gives_memory_back
from traceprof.analysis.steps import Steps
from traceprof.result.model import PASSES, Pass
from traceprof.trace import schema
from traceprof.trace.columns import BLOCK_EVENTS, Trace
from traceprof.trace.schema import Kind

FORWARD, BACKWARD, OTHER = range(3)  # pass codes, the order of profile.PASSES
assert PASSES == (Pass.FORWARD, Pass.BACKWARD, Pass.OTHER)


class Context(msgspec.Struct):
    """What every stage needs to know about the selection and the event nesting."""

    trace: Trace
    links: Links
    tree: Hierarchy
    steps: Steps
    selected: np.ndarray  # positions of the selected steps in steps.numbers
    selected_mask: np.ndarray  # whether each step is selected
    whole_trace: bool  # no step selected: the whole trace counts once
    n_steps: int  # numbers are divided by this: the mean per selected step
    scope_of: np.ndarray  # innermost module scope around each event (-1: none)
    is_step: np.ndarray  # ProfilerStep#N annotations
    is_python: np.ndarray  # Python frames
    top: np.ndarray  # outermost op or annotation around each event, through steps and frames
    autograd_top: np.ndarray  # top-level ops in which autograd recorded a backward node
    #: per node of a tree built from user annotations: the pass code of its work outside the
    #: backward (annotation_passes); None for trees of modules
    node_pass: np.ndarray | None = None

    def in_selection(self, t: np.ndarray) -> np.ndarray:
        """Whether each time lies in a selected step."""
        if self.whole_trace:
            finite: np.ndarray = np.isfinite(t)
            return finite
        # in the step that started last before it, when that step is selected and has not
        # ended: the end of every step, -inf for those not selected and before the first
        # (index -1); in blocks, so that the temporaries stay small
        ends = np.append(np.where(self.selected_mask, self.steps.end, -np.inf), -np.inf)
        out = np.empty(len(t), bool)
        for lo in range(0, len(t), BLOCK_EVENTS):
            block = t[lo : lo + BLOCK_EVENTS]
            pos = np.searchsorted(self.steps.start, block, side="right")
            pos -= 1
            np.less(block, ends[pos], out=out[lo : lo + BLOCK_EVENTS])
        return out

    def classify(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Module node (-1: none), backward flag and pass code of each CPU event; in blocks,
        so that the dozen temporaries of the lookups stay a few MB whatever the number of
        events."""
        node = np.empty(len(events), self.tree.node_of_scope.dtype)
        bwd = np.empty(len(events), bool)
        code = np.empty(len(events), np.int8)
        for lo in range(0, len(events), BLOCK_EVENTS):
            block = slice(lo, lo + BLOCK_EVENTS)
            node[block], bwd[block] = classify_events(events[block], self.links, self.tree, self.scope_of)
            code[block] = self.pass_codes(events[block], node[block], bwd[block])
        return node, bwd, code

    def pass_codes(self, events: np.ndarray, node: np.ndarray, bwd: np.ndarray) -> np.ndarray:
        """Pass code of each event, from classify_events's node and backward flag: outside every
        module, forward only under a top-level op autograd recorded, else other."""
        code = np.where(bwd, BACKWARD, FORWARD).astype(np.int8)
        if self.node_pass is not None:  # annotations, not modules: the pass of each node
            inside = ~bwd & (node >= 0) & (node < len(self.node_pass))
            code[inside] = self.node_pass[node[inside]]
        outside = ~bwd & (node < 0)
        e = np.maximum(events, 0)
        top = self.top
        recorded = (events >= 0) & (top[e] >= 0) & self.autograd_top[np.maximum(top[e], 0)]
        code[outside & ~recorded] = OTHER
        return code


@gives_memory_back
def make_context(trace: Trace, links: Links, tree: Hierarchy, steps: Steps, selected: np.ndarray) -> Context:
    """The selection and, for every event, its scope, its top-level op and whether it is a
    step or a Python frame."""
    ev = trace.events
    n_events = len(ev)
    whole_trace = len(selected) == 0
    is_step = np.zeros(n_events, bool)
    if len(ev):
        is_step_name = ev.named(lambda s: schema.STEP_RE.match(s) is not None)
        is_step = is_step_name & (links.depth >= 0)
    # group label: the outermost op or annotation around the event, looking through steps and
    # Python frames (which enclose everything in with_stack traces)
    is_python = ev.kind == Kind.PYTHON
    top = links.outermost(is_step | is_python)
    # an optimizer step that runs a closure (Lightning, LBFGS) is looked through for the
    # closure's work: the loss is forward, the optimizer's own update stays its step
    top = closure_tops(trace, links, tree.scope_mask, top, is_step | is_python)
    # top-level ops outside the modules that autograd recorded (an op in them created a backward
    # node: the loss): their work is forward; the rest outside modules is neither pass
    autograd_top = np.zeros(n_events, bool)
    made_backward = links.forward_op[links.forward_op >= 0]
    tops_of = top[made_backward]
    autograd_top[tops_of[tops_of >= 0]] = True
    selected_mask = np.zeros(len(steps.numbers), bool)
    selected_mask[selected] = True
    scope_of = links.nearest(tree.scope_mask)
    return Context(
        trace=trace,
        links=links,
        tree=tree,
        steps=steps,
        selected=selected,
        selected_mask=selected_mask,
        whole_trace=whole_trace,
        n_steps=1 if whole_trace else len(selected),
        scope_of=scope_of,
        is_step=is_step,
        is_python=is_python,
        top=top,
        autograd_top=autograd_top,
        node_pass=annotation_passes(tree, links, scope_of),
    )


_PASS_CODES = {p.value: code for code, p in enumerate(PASSES)}


def annotation_passes(tree: Hierarchy, links: Links, scope_of: np.ndarray) -> np.ndarray | None:
    """The pass code of each node's work outside the backward, for a tree built from user
    annotations (None for other trees): the pass the outermost annotation of its path that
    names one declares (its whole subtree is that pass: a collective inside ``## forward ##``
    is forward work; an optimizer step declares its own work only, not a closure's inside
    it); else forward when autograd recorded an op in the node or below it, or
    when the trace records no backward at all; else other."""
    if tree.source is not Source.ANNOTATIONS or not tree.nodes:
        return None
    n = len(tree.nodes)
    declared = np.full(n, -1, np.int8)
    in_optimizer = np.zeros(n, bool)
    for node in tree.nodes:
        for depth, key in enumerate(node.path):
            # an optimizer step declares its own work only: a closure it runs (Lightning,
            # LBFGS) holds the forward and the backward, whose annotations say so themselves
            if depth < len(node.path) - 1 and schema.is_optimizer_annotation(key):
                in_optimizer[node.id] = True
                continue
            named = schema.annotation_pass(key)
            if named is not None:
                declared[node.id] = _PASS_CODES[named]
                break
    made_backward = links.forward_op[links.forward_op >= 0]
    scopes = scope_of[made_backward]
    nodes = tree.node_of_scope[scopes[scopes >= 0]]
    recorded = np.zeros(n, bool)
    recorded[nodes[nodes >= 0]] = True
    for node in reversed(tree.nodes):  # a parent's id is below its children's
        if recorded[node.id] and node.parent >= 0:
            recorded[node.parent] = True
    # inside an optimizer step, forward only where autograd recorded (a closure's loss)
    undeclared = np.where(recorded | ((len(made_backward) == 0) & ~in_optimizer), FORWARD, OTHER)
    passes: np.ndarray = np.where(declared >= 0, declared, undeclared).astype(np.int8)
    # nodes without a scope of their own (group nodes of compiled work, modules that kernel
    # labels name; parents first): their parent's pass, forward at a root
    scoped = np.zeros(n, bool)
    of_scopes = tree.node_of_scope[tree.scope_mask]
    scoped[of_scopes[of_scopes >= 0]] = True
    for node in tree.nodes:
        if node.group or not scoped[node.id]:
            passes[node.id] = passes[node.parent] if node.parent >= 0 else FORWARD
    return passes


def classify_events(
    events: np.ndarray, links: Links, tree: Hierarchy, scope_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Module node (-1: none) and backward flag of each CPU event (-1 event: none, forward)."""
    n = len(events)
    node = np.full(n, -1, tree.node_of_scope.dtype)
    valid = events >= 0
    e = np.maximum(events, 0)
    bnode = np.where(valid, links.backward_node[e], -1)
    region = np.where(valid, links.backward_region[e], -1)
    scope = np.where(valid, scope_of[e], -1)
    backward = region >= 0
    fwd = valid & ~backward & (scope >= 0)
    node[fwd] = tree.node_of_scope[scope[fwd]]
    # a scope opened inside the backward: a module re-run by activation checkpointing
    inner = backward & (scope >= 0)
    inner[inner] &= links.depth[scope[inner]] > links.depth[region[inner]]
    node[inner] = tree.node_of_scope[scope[inner]]
    # otherwise: the module of the forward op that created the backward node
    rest = backward & ~inner & (bnode >= 0)
    fop = np.full(n, -1, links.forward_op.dtype)
    fop[rest] = links.forward_op[bnode[rest]]
    has = fop >= 0
    fscope = np.full(n, -1, scope_of.dtype)
    fscope[has] = scope_of[fop[has]]
    ok = fscope >= 0
    node[ok] = tree.node_of_scope[fscope[ok]]
    if tree.event_node is not None:  # compiled kernels: the node of their graph's table
        forced = np.where(valid, tree.event_node[e], -1)
        node = np.where(forced >= 0, forced, node).astype(node.dtype, copy=False)
    return node, backward
