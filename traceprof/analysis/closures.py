"""Closures the optimizer runs: ``optimizer.step(closure)``.

PyTorch Lightning runs ``training_step`` and the backward inside ``optimizer.step(closure)``,
and so do ``torch.optim.LBFGS`` and any loop that passes a closure: the forward, the loss and
the backward then lie inside the ``Optimizer.step#<Class>.step`` annotation. Grouped by that
top-level annotation, the loss would make the whole step forward work (autograd recorded an op
in it) and the optimizer's own update would count in the forward.

So an optimizer step that holds a closure is looked through, as ``ProfilerStep#N`` is. Its
direct children (through Python frames) are marked:

- *forward evidence*: a child holding a module scope, an op autograd recorded (the loss), or a
  ``zero_grad`` call (the optimizer never zeroes its own gradients: the closure does);
- *backward evidence*: backward work, a child of the step (CPU: the autograd engine runs on the
  calling thread) or the outermost backward work on another thread that starts inside the step
  (GPU runs: the autograd thread).

A **closure run** stretches from a forward evidence to the end of the last evidence before the
next forward evidence that follows a backward one (LBFGS calls its closure several times, its
own work in between). A child that starts inside a closure run is the closure's: it is grouped
by its own name as any top-level op (rule 4 of docs/attribution.md: forward when autograd
recorded an op in it, else the other pass). The other children are the optimizer's own work:
they keep the step annotation as their top, the optimizer's step. Work of the closure after its
backward ends (a ``loss.detach()``) cannot be told apart from the optimizer's and counts there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from traceprof.analysis.link import Links
from traceprof.trace import schema
from traceprof.trace.columns import Trace
from traceprof.trace.schema import Kind

FORWARD_EVIDENCE, BACKWARD_EVIDENCE = 0, 1


def closure_tops(
    trace: Trace, links: Links, scope_mask: np.ndarray, top: np.ndarray, through: np.ndarray
) -> np.ndarray:
    """``top`` (each event's outermost op or annotation, looking through ``through``), with the
    events of closures run inside an optimizer step given their own top-level op under it."""
    ev = trace.events
    n = len(ev)
    if n == 0 or not len(links.levels):
        return top
    steps = np.flatnonzero(np.isin(ev.kind, (Kind.ANNOTATION, Kind.CPU_OP)) & ~scope_mask)
    steps = steps[top[steps] == steps]
    steps = steps[_named(trace, steps, schema.is_optimizer_annotation)]
    # a step with a module scope or an op autograd recorded inside: it runs a closure
    candidate = np.zeros(n + 1, bool)  # one more: top -1 (none) reads False
    candidate[steps] = True
    scopes = np.flatnonzero(scope_mask)
    made = links.forward_op[links.forward_op >= 0]
    if not (candidate[top[scopes]].any() or candidate[top[made]].any()):
        return top
    inner = links.outermost(through | candidate[:n])
    under = candidate[top]
    under &= inner != top
    child = np.flatnonzero(under)
    child = child[inner[child] == child]  # the direct children of a step
    # forward evidence: children holding a module scope or an op autograd recorded; zero_grad
    fwd = np.zeros(n, bool)
    fwd[inner[scopes[under[scopes]]]] = True
    fwd[inner[made[under[made]]]] = True
    fwd[child] |= _named(trace, child, schema.is_zero_grad)
    # backward evidence: backward children, and backward work of other threads inside a step
    bwd = np.zeros(n, bool)
    bwd[child] = links.backward_region[child] >= 0
    evidence = child[fwd[child] | bwd[child]]
    owners = top[evidence]
    outer = _outermost_backward(links)
    outer = outer[~under[outer] & ~candidate[outer]]
    steps = steps[np.argsort(ev.ts[steps], kind="stable")]
    pos = np.searchsorted(ev.ts[steps], ev.ts[outer], side="right") - 1
    inside = pos >= 0
    inside[inside] &= ev.ts[outer[inside]] < links.nest_end[steps[pos[inside]]]
    evidence = np.concatenate([evidence, outer[inside]])
    owners = np.concatenate([owners, steps[pos[inside]]])
    kinds = np.where(fwd[evidence], FORWARD_EVIDENCE, BACKWARD_EVIDENCE)
    runs = _closure_runs(owners, ev.ts[evidence], links.nest_end[evidence], kinds)
    closure_child = fwd.copy()  # a forward evidence is the closure's, even of no length
    closure_child[child[_starts_inside(runs, top[child], ev.ts[child])]] = True
    out: np.ndarray = top.copy()
    event = np.flatnonzero(under)
    mine = event[closure_child[inner[event]]]
    out[mine] = inner[mine]
    return out


def _named(trace: Trace, events: np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
    """Whether the name of each of ``events`` passes ``test``: one call per distinct name
    among them, not per name of the trace."""
    codes, inverse = np.unique(trace.events.name[events], return_inverse=True)
    names = trace.events.names
    passed = np.fromiter((test(names[c]) for c in codes.tolist()), bool, len(codes))
    result: np.ndarray = passed[inverse.ravel()]
    return result


def _outermost_backward(links: Links) -> np.ndarray:
    """Backward work outside any other backward work: the outermost backward node ops and
    engine wrappers."""
    region = links.backward_region
    first = np.flatnonzero(region == np.arange(len(region)))
    parent = links.parent[first]
    outer = (parent < 0) | (region[np.maximum(parent, 0)] < 0)
    result: np.ndarray = first[outer]
    return result


def _closure_runs(
    owners: np.ndarray, start: np.ndarray, end: np.ndarray, kinds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The closure runs (step, start, end) made from the evidence (step, start, end, kind): a
    run begins at a forward evidence that is its step's first or follows a backward one, and
    ends with the last evidence before the next run; evidence before its step's first run
    (backward work the step did not start) is in none."""
    order = np.lexsort((start, owners))
    owners, start, end, kinds = owners[order], start[order], end[order], kinds[order]
    m = len(owners)
    new_owner = np.r_[True, owners[1:] != owners[:-1]]
    after_bwd = np.r_[True, kinds[:-1] == BACKWARD_EVIDENCE]
    begins = (kinds == FORWARD_EVIDENCE) & (new_owner | after_bwd)
    first_of_owner = np.maximum.accumulate(np.where(new_owner, np.arange(m), 0))
    last_begin = np.maximum.accumulate(np.where(begins, np.arange(m), -1))
    keep = last_begin >= first_of_owner
    if not keep.any():
        empty = np.zeros(0, owners.dtype)
        return empty, np.zeros(0), np.zeros(0)
    run = last_begin[keep]
    owners, start, end = owners[keep], start[keep], end[keep]
    bounds = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
    run_end: np.ndarray = np.maximum.reduceat(end, bounds)
    return owners[bounds], start[bounds], run_end


def _starts_inside(
    runs: tuple[np.ndarray, np.ndarray, np.ndarray], owner: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Whether each time ``t`` lies in a run of its step ``owner`` (runs of one step are
    disjoint and in time order): the last run of the step that began at or before it."""
    run_owner, run_start, run_end = runs
    if len(run_owner) == 0:
        return np.zeros(len(owner), bool)
    # one sortable key per (step, time): the step's rank, then the time's rank
    _, step_rank = np.unique(np.concatenate([run_owner, owner]), return_inverse=True)
    times, time_rank = np.unique(np.concatenate([run_start, t]), return_inverse=True)
    key = step_rank.ravel().astype(np.int64) * (len(times) + 1) + time_rank.ravel()
    run_key, key = key[: len(run_owner)], key[len(run_owner) :]
    order = np.argsort(run_key, kind="stable")
    p = np.searchsorted(run_key[order], key, side="right") - 1
    ok = p >= 0
    r = order[np.maximum(p, 0)]
    ok &= run_owner[r] == owner
    ok &= t < run_end[r]
    return ok
