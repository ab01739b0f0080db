"""Each side of a diff summed up for its header (:class:`~traceprof.compare.model.SideSummary`):
the step's wall time and its spread, the modules', the bucket's and the collectives' time, the
memory; and the step-to-step spread (:func:`stdev`) the diff's noise marks come from."""

from __future__ import annotations

import math
from typing import Any

from msgspec.structs import replace

from traceprof.compare.model import SideSummary
from traceprof.compare.sides import BUCKET_PATH, Side
from traceprof.result.model import PASSES, ModuleProfile, NodeKind
from traceprof.trace import schema


def side_summary(side: Side) -> SideSummary:
    p = side.profile
    module_us = sum(
        p.nodes[r].total.__getattribute__(side.metric) for r in p.roots if p.nodes[r].kind is NodeKind.MODULE
    )
    bucket = p.unattributed
    # outside the modules: the bucket, and compiled or replayed work no module is around (roots
    # of kind compiled), so that modules + outside + idle add up to the step
    compiled_roots = [p.nodes[r] for r in p.roots if p.nodes[r].kind is NodeKind.COMPILED]
    outside = (getattr(bucket.total, side.metric) if bucket else 0.0) + sum(
        getattr(n.total, side.metric) for n in compiled_roots
    )
    outside_paths = [BUCKET_PATH] + [tuple(n.path) for n in compiled_roots]

    def collective(labels: dict) -> float:
        return sum(
            v
            for k, v in labels.items()
            if side.label_kind == "kernel" and schema.COLLECTIVE_KERNEL_RE.match(k)
        )

    collectives = collective(side.labels)
    outside_collectives = sum(
        collective(side.inside.get((path, code), {})) for path in outside_paths for code in range(len(PASSES))
    )
    time_us = p.selection.gpu_busy_us if p.has_gpu else p.selection.cpu_us
    return SideSummary(
        path=side.path,
        device=", ".join(p.device_names) if p.has_gpu else "CPU",
        has_gpu=p.has_gpu,
        source=p.source,
        steps=side.step_numbers,
        wall_us=p.selection.wall_us,
        time_us=time_us,
        wall_spread_us=stdev(side.step_wall_us),
        modules_us=module_us,
        outside_us=outside,
        collectives_us=collectives,
        collectives_outside_us=outside_collectives,
        complete_steps=tuple(s for s in p.selection.in_trace if s not in p.selection.incomplete),
        **_memory_fields(p),
    )


def _memory_fields(p: ModuleProfile) -> dict[str, Any]:
    """A side's memory summary for SideSummary: activations, the peak and its categories."""
    m = p.memory_summary
    if m is None:
        return {}
    peak = m.peak
    categories: tuple[tuple[str, float | None], ...] = ()
    if peak is not None:
        categories = (
            ("activations", peak.activations_bytes),
            ("gradients", peak.gradients_bytes),
            ("optimizer state", peak.optimizer_state_bytes),
            ("temporaries", peak.temporaries_bytes),
            ("parameters", peak.parameters_bytes if peak.parameters_in_total else None),
            ("before the trace", peak.before_trace_bytes),
        )
    return {
        "memory_device": m.device,
        "activation_bytes": m.activation_bytes,
        "peak_bytes": peak.total_bytes if peak is not None else None,
        "peak_categories": categories,
    }


def stdev(values) -> float | None:
    values = list(values)
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def cpu_summary(s: SideSummary, side: Side) -> SideSummary:
    """A side's summary in CPU time (one of the traces has no GPU work)."""
    p = side.profile
    modules = sum(p.nodes[r].total.cpu_us for r in p.roots if p.nodes[r].kind is NodeKind.MODULE)
    bucket = p.unattributed

    return replace(
        s,
        time_us=p.selection.cpu_us,
        modules_us=modules,
        outside_us=bucket.total.cpu_us if bucket else 0.0,
        collectives_us=0.0,
        collectives_outside_us=0.0,
    )
