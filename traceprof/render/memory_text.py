"""What holds the memory, as text: the lines of the report's header, and the phrases the HTML
report and the notebook reuse (``ModuleProfile.memory_summary``)."""

from __future__ import annotations

from traceprof import units
from traceprof.result.memory import MemoryMoment, MemorySummary
from traceprof.result.model import ModuleProfile
from traceprof.result.names import path_parts, short_name_map

#: holders named in the header: the largest activations by module
HEADER_HOLDERS = 3
#: the line of a trace recorded without memory events
NOT_RECORDED = (
    "memory:    not recorded (no [memory] events): capture with profile_memory=True "
    "(torch.profiler, or traceprof.capture.profile) for memory per module, activations and the peak"
)


def categories(m: MemoryMoment) -> list[tuple[str, float | None]]:
    """(category, bytes) of the allocator's total at the moment, in the order reports show them;
    the parameters only when the total counts them (``None``: unknown)."""
    parts: list[tuple[str, float | None]] = [
        ("activations", m.activations_bytes),
        ("gradients", m.gradients_bytes),
        ("optimizer state", m.optimizer_state_bytes),
        ("temporaries", m.temporaries_bytes),
    ]
    if m.parameters_in_total:
        parts.append(("parameters", m.parameters_bytes))
    parts.append(("before the trace", m.before_trace_bytes))
    return parts


def holder_names(profile: ModuleProfile) -> dict[tuple[str, ...], str]:
    """The short name (result.names) of every node path the summary's moments name, told apart
    from every node of the tree."""
    summary = profile.memory_summary
    if summary is None:
        return {}
    moments = [m for m in (summary.peak, summary.forward_end) if m is not None]
    named = {tuple(h.path) for m in moments for h in m.activations_by_module}
    named |= {m.module_path for m in moments if m.module_path}
    if not named:
        return {}
    paths = {tuple(n.path): path_parts(n.path, n.name) for n in profile.nodes}
    for path in named - set(paths):
        paths[path] = path_parts(path)
    names = short_name_map(paths)
    return {path: names[path] for path in named}


def holders_text(
    m: MemoryMoment,
    n: int = HEADER_HOLDERS,
    raw: bool = False,
    names: dict[tuple[str, ...], str] | None = None,
) -> str:
    """The largest activations by module: ``h.0.mlp 12.6 MB, h.1.mlp 12.6 MB, 3 more 4.1 MB``
    (``names``: short names by path; else qualified names)."""
    shown = m.activations_by_module[:n]
    names = names or {}
    parts = [
        f"{names.get(tuple(h.path)) or h.qualified_name or '(root)'} {units.byte_count(h.bytes, raw)}"
        for h in shown
    ]
    rest = m.activations_by_module[n:]
    more = sum(h.bytes for h in rest) + m.other_modules_bytes
    if more > 0:
        count = len(rest) + (1 if m.other_modules_bytes > 0 else 0)
        parts.append(f"{count} more {units.byte_count(more, raw)}")
    return ", ".join(parts)


def moment_text(
    m: MemoryMoment,
    raw: bool = False,
    where: bool = True,
    device: str = "",
    names: dict[tuple[str, ...], str] | None = None,
) -> str:
    """``1.47 MB at step 1, 12.30 ms, backward pass, in fc2: activations 524 kB (drop 262 kB,
    ...), gradients 0, ...``; ``where``: with the pass and the module of the moment's event;
    ``device``: the memory device (the CPU's total counts from the start of profiling)."""
    at = f"step {m.step}, " if m.step is not None else ""
    at += units.duration(m.time_us)
    if where:
        at += f", {m.phase} pass"
        if m.module:
            at += f", in {(names or {}).get(m.module_path) or m.module}"
    parts = []
    for name, value in categories(m):
        text = f"{name} {units.byte_count(value, raw)}"
        if name == "activations" and m.activations_by_module:
            text += f" ({holders_text(m, raw=raw, names=names)})"
        parts.append(text)
    text = f"{units.byte_count(m.total_bytes, raw)} at {at}: " + ", ".join(parts)
    if where and m.parameters_bytes is not None and not m.parameters_in_total:
        why = (
            " (the CPU allocator counts only what is allocated while a profiler runs)"
            if device == "cpu"
            else ""
        )
        text += (
            f"; parameters {units.byte_count(m.parameters_bytes, raw)} (module table) not in this total{why}"
        )
    return text


def summary_lines(profile: ModuleProfile, raw: bool = False) -> list[str]:
    """The header's lines on what holds memory: the whole forward's activations beside the
    step's peak, the peak and the end of the forward by category, activation checkpointing."""
    summary = profile.memory_summary
    if summary is None:
        return []
    lines = []
    if summary.note:
        lines.append(f"holders:   {summary.note}")
    peak = summary.peak
    if summary.activation_bytes is not None:
        beside = f", beside the step's peak {units.byte_count(peak.total_bytes, raw)}" if peak else ""
        lines.append(
            f"activations: {units.byte_count(summary.activation_bytes, raw)} per step kept by the forward "
            f"for the backward (every module and the loss; act per node){beside}"
        )
    names = holder_names(profile)
    if peak is not None:
        lines.append(f"peak:      {moment_text(peak, raw, device=summary.device, names=names)}")
    if summary.forward_end is not None:
        lines.append(f"fwd end:   {moment_text(summary.forward_end, raw, where=False, names=names)}")
    lines.extend(recomputed_lines(summary, raw))
    return lines


def recomputed_lines(summary: MemorySummary, raw: bool = False) -> list[str]:
    """Activation checkpointing: the modules re-run in the backward and what they allocate."""
    if not summary.recomputed_modules:
        return []
    names = ", ".join(summary.recomputed_modules[:4])
    if len(summary.recomputed_modules) > 4:
        names += f" and {len(summary.recomputed_modules) - 4} more"
    return [
        f"checkpointing: {names} run their forward again in the backward (activation checkpointing): "
        f"{units.byte_count(summary.recomputed_bytes, raw)} allocated there per step, their activations "
        "not kept"
    ]
