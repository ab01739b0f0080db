"""Inside a module: its ops and kernels, per pass (the "why" behind each module's numbers).

A stage of attribution: it receives the work items of the selected steps already attributed to
nodes and passes (GPU work through its launch, CPU time through the slice it was spent in,
FLOPs through the counted op) and groups each node's **own** work by

- **op**: the outermost CPU op around the work inside the node's innermost module scope (what
  the module's code called: ``aten::linear``, ``aten::conv2d``; in the backward, the autograd
  engine's backward node op), with that op's input shapes. Work in no op is labelled by the
  slice it was spent in (a runtime call, an annotation), or by :data:`OUTSIDE_OPS` (the
  module's own time outside every op) and :data:`BETWEEN_OPS_LABEL` (a step's time between
  its top-level slices);
- **kernel**: the name of each kernel, memcpy or memset.

So, per node and pass, the op rows add up to the node's own GPU busy time, GPU work time,
kernels, CPU time and FLOPs, and the kernel rows to its own GPU busy and work time and kernels
(``ModuleProfile.self_check``). A node keeps its :data:`MAX_ROWS` largest rows of each kind and
pass; the rest are folded into one ``(N more)`` row that keeps their sums.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .link import Links
from .profile import _OP_SUMMED as _SUMMED, OpKind, OpStat
from .schema import Kind
from .trace import Trace

#: label of a module's own CPU time outside every op (Python code of its forward)
OUTSIDE_OPS = "(outside ops)"
#: label of a step's CPU time between its top-level slices
BETWEEN_OPS_LABEL = "(between ops)"
#: label of GPU work whose launch is not in the trace
NO_LAUNCH = "(launch not in trace)"
#: rows kept per node, kind and pass; the rest are folded into one "(N more)" row
MAX_ROWS = 40
_PASS_VALUES = ("forward", "backward", "other")  # profile.PASSES order (pass codes 0, 1, 2)


@dataclass(frozen=True, slots=True)
class Attributed:
    """Events of the selected steps with their node (attribution's ids) and pass code."""

    events: np.ndarray  # int64 event indices (GPU work: its anchor is in ``anchor``)
    node: np.ndarray
    phase: np.ndarray
    weight: np.ndarray  # µs of exclusive CPU time, FLOPs, or GPU busy time (shared)


def ops_by_node(trace: Trace, links: Links, scope_mask: np.ndarray, is_step: np.ndarray,
                n_nodes: int, n_steps: int, *, cpu: Attributed, counted: Attributed,
                gpu: Attributed, gpu_anchor: np.ndarray) -> list[tuple[OpStat, ...]]:
    """The ops and kernels rows of every node (attribution's node ids), largest first."""
    ev = trace.events
    n_names = len(ev.names)
    labels = list(ev.names) + [OUTSIDE_OPS, BETWEEN_OPS_LABEL, NO_LAUNCH]
    outside, between, no_launch = n_names, n_names + 1, n_names + 2
    top = _outermost_op(ev, links, scope_mask)

    def op_of(events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(label code, shapes code) of the op each CPU event belongs to."""
        e = np.maximum(events, 0)
        op = np.where(events >= 0, top[e], -1)
        has = op >= 0
        label = np.where(has, ev.name[np.maximum(op, 0)], ev.name[e]).astype(np.int64)
        label[~has & scope_mask[e]] = outside
        label[~has & is_step[e]] = between
        label[events < 0] = no_launch
        shapes = np.where(has, ev.input_dims[np.maximum(op, 0)], -1).astype(np.int64)
        return label, shapes

    # op rows: calls (the op events themselves), CPU time, FLOPs, GPU work
    cpu_label, cpu_shapes = op_of(cpu.events)
    is_call = (cpu.events >= 0) & (top[np.maximum(cpu.events, 0)] == cpu.events)
    op_label, op_shapes = op_of(counted.events)
    gpu_label, gpu_shapes = op_of(gpu_anchor)
    work = gpu.events
    is_kernel = (ev.kind[work] == Kind.KERNEL).astype(np.float64)
    dur = ev.dur[work]
    zeros = lambda k: np.zeros(k)  # noqa: E731
    n_cpu, n_op, n_gpu = len(cpu.events), len(counted.events), len(work)
    op_rows = _grouped(
        np.concatenate([cpu.node, counted.node, gpu.node]),
        np.concatenate([cpu.phase, counted.phase, gpu.phase]),
        np.concatenate([cpu_label, op_label, gpu_label]),
        np.concatenate([cpu_shapes, op_shapes, gpu_shapes]),
        {
            "calls": np.concatenate([is_call.astype(np.float64), zeros(n_op), zeros(n_gpu)]),
            "kernels": np.concatenate([zeros(n_cpu), zeros(n_op), is_kernel]),
            "gpu_busy_us": np.concatenate([zeros(n_cpu), zeros(n_op), gpu.weight]),
            "gpu_work_us": np.concatenate([zeros(n_cpu), zeros(n_op), dur]),
            "cpu_us": np.concatenate([cpu.weight, zeros(n_op), zeros(n_gpu)]),
            "flops": np.concatenate([zeros(n_cpu), counted.weight, zeros(n_gpu)]),
        },
    )
    kernel_rows = _grouped(
        gpu.node, gpu.phase, ev.name[work].astype(np.int64), np.full(n_gpu, -1, np.int64),
        {"calls": np.ones(n_gpu), "kernels": is_kernel, "gpu_busy_us": gpu.weight,
         "gpu_work_us": dur, "cpu_us": zeros(n_gpu), "flops": zeros(n_gpu)},
    )
    out: list[list[OpStat]] = [[] for _ in range(n_nodes)]
    for kind, rows in ((OpKind.OP, op_rows), (OpKind.KERNEL, kernel_rows)):
        for node, phase, label, shapes, values in rows:
            if not 0 <= node < n_nodes:
                continue
            text = _compact(ev.texts[shapes]) if shapes >= 0 else None
            out[node].append(OpStat(kind, labels[label], _PASS_VALUES[phase], text,
                                    *(v / n_steps for v in values)))
    return [bounded(rows) for rows in out]


def bounded(rows: list[OpStat] | tuple[OpStat, ...], limit: int = MAX_ROWS) -> tuple[OpStat, ...]:
    """Rows with equal keys summed, largest first (GPU busy time, then CPU time, FLOPs, calls);
    past ``limit`` rows of a kind and pass, the rest folded into one ``(N more)`` row."""
    merged: dict[tuple, OpStat] = {}
    for r in rows:
        k = r.key()
        merged[k] = merged[k] + r if k in merged else r
    ranked = sorted(merged.values(), key=lambda r: (-r.gpu_busy_us, -r.cpu_us, -r.flops,
                                                    -r.calls, r.name))
    kept: list[OpStat] = []
    rest: dict[tuple, list[OpStat]] = {}
    seen: dict[tuple, int] = {}
    for r in ranked:
        group = (r.kind, r.phase)
        seen[group] = seen.get(group, 0) + 1
        if seen[group] <= limit:
            kept.append(r)
        else:
            rest.setdefault(group, []).append(r)
    for (kind, phase), folded in rest.items():
        total = OpStat(kind, f"({len(folded)} more)", phase)
        for r in folded:
            total = total + r
        kept.append(total)
    return tuple(kept)


def _compact(raw: bytes) -> str:
    """Recorded input dims (raw JSON) as one line: ``[[2, 3, 64, 64], [64, 3, 7, 7]]``."""
    try:
        return json.dumps(json.loads(raw))
    except (ValueError, RecursionError):
        return raw.decode("utf-8", "replace")


def _outermost_op(ev, links: Links, scope_mask: np.ndarray) -> np.ndarray:
    """For every CPU slice, the outermost CPU op around it (or itself) inside its innermost
    scope, -1 when there is none."""
    n = len(ev)
    is_op = (ev.kind == Kind.CPU_OP) & ~scope_mask
    top = np.full(n, -1, np.int64)
    for level in links.levels:
        p = links.parent[level]
        pp = np.maximum(p, 0)
        inherited = np.where((p >= 0) & ~scope_mask[pp], top[pp], -1)
        top[level] = np.where(inherited >= 0, inherited, np.where(is_op[level], level, -1))
    return top


def _grouped(node, phase, label, shapes, values: dict[str, np.ndarray]):
    """(node, phase, label, shapes, sums in _SUMMED order) per distinct key."""
    if len(node) == 0:
        return []
    keys = np.stack([node, phase, label, shapes + 1], axis=1).astype(np.int64)
    radix = keys.max(axis=0) + 1
    if float(np.prod(radix.astype(np.float64))) < 2.0**62:  # one int64 key: a 1-D sort, fast
        flat = np.ravel_multi_index(keys.T, tuple(int(r) for r in radix))
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        uniq = keys[first]
    else:
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    uniq = uniq - np.array([0, 0, 0, 1])
    inverse = inverse.ravel()
    sums = [np.bincount(inverse, weights=values[f], minlength=len(uniq)) for f in _SUMMED]
    out = []
    for k, (nd, ph, lb, sh) in enumerate(uniq.tolist()):
        vals = [float(s[k]) for s in sums]
        if any(vals):
            out.append((nd, ph, lb, sh, vals))
    return out
