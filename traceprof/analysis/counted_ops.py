"""Ops and FLOPs attribution: the counted and unsupported ops of the selection, and the FLOP
summary.

The ops come from :mod:`traceprof.analysis.op_costs`, counted once for the whole trace. They are
attributed like every other CPU event: a backward op goes to the module of the forward op that
created it. :func:`ops_in_selection` receives the
:class:`~traceprof.analysis.classify.Context` and candidate ops and returns :class:`Ops` (those
in the selection, with their node and pass); :func:`flop_summary` receives the selection's ops
and GPU work and returns the :class:`FlopSummary` (FLOPs by precision, the device's peak,
unsupported ops); :func:`with_peak` puts a peak given by the user into a finished profile.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec
import numpy as np
from msgspec.structs import replace

from traceprof.analysis.classify import Context
from traceprof.analysis.link import Links
from traceprof.analysis.op_costs import OpCosts
from traceprof.analysis.stage import gives_memory_back
from traceprof.flops import FAMILIES, Family
from traceprof.result.model import FlopSummary, ModuleProfile, Peak, UnsupportedOp
from traceprof.trace import hardware
from traceprof.trace.columns import Trace


class Ops(msgspec.Struct):
    """Ops in the selection (``keep``: which of the candidates), and where they go."""

    keep: np.ndarray
    events: np.ndarray
    node: np.ndarray
    pass_code: np.ndarray


def ops_in_selection(ctx: Context, candidates: np.ndarray, forced: np.ndarray | None = None) -> Ops:
    """The ops among ``candidates`` in the selection, with their node and pass. ``forced``: per
    candidate, a node that takes its cost whatever its event's node is (-1: its event's;
    ``OpCosts.node``)."""
    keep = ctx.in_selection(ctx.trace.events.ts[candidates])
    ops = candidates[keep]
    node, _, pass_code = ctx.classify(ops)
    if forced is not None:
        chosen = forced[keep]
        node = np.where(chosen >= 0, chosen, node).astype(node.dtype, copy=False)
    return Ops(keep, ops, node, pass_code)


@gives_memory_back
def flop_summary(
    trace: Trace,
    links: Links,
    costs: OpCosts,
    *,
    op_keep: np.ndarray,
    unsupported_keep: np.ndarray,
    anchor: np.ndarray,
    busy: np.ndarray,
    n_steps: int,
    has_gpu: bool,
    step_time_us: float,
) -> FlopSummary:
    """FLOPs by precision, the device's peak for the main one, and the unsupported ops with
    their calls and time per step. ``anchor`` and ``busy``: the selected GPU work items'
    anchors and busy-time shares."""
    if not costs.has_shapes:
        return FlopSummary(has_shapes=False)
    peaks = _device_peaks(trace) if has_gpu else None
    # precision of each op: its dtype's, except fp32 convolutions on GPUs with TF32 units, which
    # cuDNN runs in TF32 by default (torch.backends.cudnn.allow_tf32)
    conv = FAMILIES.index(Family.CONV)
    pair = costs.dtype[op_keep].astype(np.int64) * len(FAMILIES) + costs.family[op_keep]
    pairs, inverse = np.unique(pair, return_inverse=True)
    flops_of_pair = np.bincount(inverse.ravel(), weights=costs.flops[op_keep], minlength=len(pairs))
    by_precision: dict[str, float] = defaultdict(float)
    for code, flops in zip(pairs.tolist(), flops_of_pair.tolist()):
        dtype, family = costs.dtypes[code // len(FAMILIES)], code % len(FAMILIES)
        precision = hardware.PRECISION_OF_DTYPE.get(dtype, dtype)
        if precision == "fp32" and family == conv and peaks and peaks.peak("tf32"):
            precision = "tf32"
        by_precision[precision] += flops / n_steps
    ranked = tuple(sorted(((k, v) for k, v in by_precision.items() if v > 0), key=lambda kv: -kv[1]))
    peak = None
    if peaks is not None:
        precision = ranked[0][0] if ranked else "fp32"
        peak = Peak(peaks.name, precision, peaks.peak(precision), peaks.bytes_per_s, peaks.source)

    # unsupported ops: calls, and the GPU time of the work they launched themselves, not
    # through an op inside them (their own CPU time on CPU-only traces)
    events = costs.unsupported[unsupported_keep]
    labels = costs.unsupported_label[unsupported_keep]
    n_labels = len(costs.labels)
    calls = np.bincount(labels, minlength=n_labels)
    if has_gpu:
        is_op = costs.is_op.copy()
        is_op[events] = True
        around = links.nearest(is_op)
        del is_op
        inside = np.where(anchor >= 0, around[np.maximum(anchor, 0)], -1)
        del around
        # the unsupported op each item was launched in: its row in ``events`` (ascending)
        at = np.searchsorted(events, inside)
        has = (inside >= 0) & (at < len(events))
        has[has] &= events[at[has]] == inside[has]
        time = np.bincount(labels[at[has]], weights=busy[has], minlength=n_labels)
    else:
        own = costs.unsupported_own_us[unsupported_keep]
        time = np.bincount(labels, weights=own, minlength=n_labels)
    listed = [
        UnsupportedOp(
            name=costs.labels[k],
            calls=float(calls[k] / n_steps),
            time_us=float(time[k] / n_steps),
            share_of_step=float(time[k] / n_steps / step_time_us) if step_time_us > 0 else 0.0,
        )
        for k in range(n_labels)
        if calls[k]
    ]
    listed.sort(key=lambda u: (-u.time_us, -u.calls, u.name))
    return FlopSummary(True, ranked, peak, tuple(listed))


def _device_peaks(trace: Trace) -> hardware.DevicePeaks | None:
    for device in trace.metadata.devices:
        found = hardware.find_peaks(device.name, device.memory_bytes)
        if found is not None:
            return found
    return None


def with_peak(profile: ModuleProfile, peak_flops: float) -> ModuleProfile:
    """``profile`` with the peak FLOP/s given by the user (``--peak-tflops``): for its main
    precision, keeping the table's memory bandwidth when the device is in it."""
    summary = profile.flops
    if not summary.has_shapes:
        return profile
    known = summary.peak
    device = known.device if known else (", ".join(profile.device_names) if profile.has_gpu else "CPU")
    peak = Peak(
        device=device,
        precision=summary.precision or "fp32",
        flop_per_s=float(peak_flops),
        bytes_per_s=known.bytes_per_s if known else 0.0,
        source="given (--peak-tflops)",
    )
    return replace(profile, flops=replace(summary, peak=peak))
