"""The summary lines above the tree and the table."""

from __future__ import annotations

from traceprof import units
from traceprof.render import memory_text
from traceprof.render.registry import RenderOptions
from traceprof.result.model import PASSES, ModuleNode, ModuleProfile


def header_lines(profile: ModuleProfile, opts: RenderOptions | None = None) -> list[str]:
    opts = opts or RenderOptions()
    md = profile.metadata
    sel = profile.selection
    device = ", ".join(profile.device_names) or "CPU only"
    dist = f", rank {md.rank} of {md.world_size}" if md.rank is not None and md.world_size else ""
    lines = [f"trace:     {md.path} ({units.file_size(md.size_bytes)} JSON), {device}{dist}"]
    lines.append(f"modules:   {modules_text(profile.module_nodes, profile.source_description)}")
    if sel.numbers:
        shown = ", ".join(map(str, sel.numbers[:8])) + (", ..." if len(sel.numbers) > 8 else "")
        what = f"mean of {sel.count} step{'s' if sel.count != 1 else ''} ({shown})"
    else:
        what = "whole trace (no ProfilerStep in it)"
    left_out = [s for s in sel.incomplete if s not in sel.numbers]
    if left_out:
        what += f"; incomplete steps left out: {', '.join(map(str, left_out))}"
    lines.append(f"steps:     {what}")
    # CPU time in ops (per thread, the union of the step's top-level ops, annotations and
    # Python frames), then the step's time outside all of them
    per = f"wall {units.duration(sel.wall_us)}, CPU {units.duration(sel.cpu_in_ops_us)} in ops"
    if sel.cpu_between_ops_us:
        per += f" + {units.duration(sel.cpu_between_ops_us)} between ops"
    if profile.has_gpu:
        per += (
            f", GPU busy {units.duration(sel.gpu_busy_us)}"
            f" (sum of GPU work {units.duration(sel.gpu_work_us)}), "
            f"{units.step_count(sel.kernels, 'kernels', averaged(profile))}"
        )
    lines.append(f"per step:  {per}")
    lines.extend(compiled_lines(profile))
    lines.extend(flop_lines(profile, opts))
    lines.extend(memory_lines(profile))
    lines.extend(memory_text.summary_lines(profile, opts.raw_numbers))
    for w in profile.warnings:
        lines.append(f"warning:   {w}")
    return lines


def averaged(profile: ModuleProfile) -> bool:
    """The profile's numbers are means over several steps (so its counts can have fractions)."""
    return bool(profile.selection.numbers) and profile.selection.count > 1


def modules_text(nodes: int, source_description: str) -> str:
    """How many nodes the tree has and where they come from; ``none: ...`` when it has none
    (the description then says why)."""
    if nodes == 0:
        return f"none: {source_description}"
    return f"{units.count(nodes)} node{'s' if nodes != 1 else ''} from {source_description}"


def flop_lines(profile: ModuleProfile, opts: RenderOptions) -> list[str]:
    """FLOPs per step, achieved throughput against the device's peak, unsupported ops."""
    summary = profile.flops
    if not summary.has_shapes:
        return []
    sel = profile.selection
    by_pass = ", ".join(
        f"{p.short} {units.flops(sum(profile.nodes[r].phase(p).total.flops for r in profile.roots))}"
        for p in PASSES
    )
    # prose: quantities keep their units with --raw too
    lines = [
        f"flops:     {units.flops(sel.flops)} per step ({by_pass}), {units.si(sel.macs, 'MAC')}; "
        f"{units.byte_count(sel.bytes_read)} read, {units.byte_count(sel.bytes_written)} "
        "written (each op's inputs and outputs once)"
    ]
    rates = profile.throughput(sel)
    over = "GPU busy time" if profile.has_gpu else "CPU time"
    # FLOPs of ops covering only part of the step: the rate and the MFU are lower bounds
    at_least = "≥ " if summary.partial else ""
    partial = (
        f" (FLOPs of ops covering only {units.percent(1 - summary.unsupported_share)} of the step's {over})"
        if summary.partial
        else ""
    )
    achieved = (
        f"achieved:  {at_least}{units.flop_rate(rates.flop_per_s)} over "
        f"{over if profile.has_gpu else 'CPU time in ops'}"
    )
    peak = summary.peak
    if peak is None or not peak.flop_per_s:
        achieved += partial
    if peak is not None:
        if peak.flop_per_s:
            achieved += (
                f", MFU {at_least}{units.fraction(rates.mfu)} of the {peak.device} {peak.precision} "
                f"peak {units.flop_rate(peak.flop_per_s)}{partial}"
            )
            if peak.source.startswith("given"):
                achieved += " (--peak-tflops)"
        else:
            achieved += f" (no {peak.precision} peak known for the {peak.device})"
        if peak.bytes_per_s:
            achieved += (
                f"; {units.byte_rate(rates.bytes_per_s)}, "
                f"{units.fraction(rates.bandwidth_use)} of {units.byte_rate(peak.bytes_per_s)}"
            )
    elif profile.has_gpu:
        achieved += "; no peak known for this device"
    lines.append(achieved)
    if summary.unsupported:
        calls = sum(u.calls for u in summary.unsupported)
        share = sum(u.share_of_step for u in summary.unsupported)
        hint = "" if opts.unsupported_ops else "; --unsupported-ops lists them"
        lines.append(
            f"unsupported: {len(summary.unsupported)} kind{'s' if len(summary.unsupported) != 1 else ''}"
            " of op without a FLOP formula "
            f"({units.step_count(calls, 'calls', averaged(profile))} per step, "
            f"{units.percent(share)} of the step's {over}){hint}"
        )
        if opts.unsupported_ops:
            lines.extend(unsupported_lines(profile, opts))
    return lines


def unsupported_lines(profile: ModuleProfile, opts: RenderOptions) -> list[str]:
    listed = profile.flops.unsupported
    width = max(len(u.name) for u in listed)
    return [
        f"  {u.name.ljust(width)}  {units.step_count(u.calls, 'calls', averaged(profile)):>13}  "
        f"{units.duration(u.time_us, opts.raw_numbers):>10}  {units.percent(u.share_of_step):>6}"
        for u in listed
    ]


def memory_lines(profile: ModuleProfile) -> list[str]:
    """Memory allocated and freed per step on the reported device, from [memory] events."""
    device = profile.memory_device
    if device is None:
        return [memory_text.NOT_RECORDED]
    uses = [u for u in (profile.memory_of(profile.nodes[r]) for r in profile.roots) if u]
    allocated = sum(ph.allocated_bytes for u in uses for ph in u.phases)
    freed = sum(ph.freed_bytes for u in uses for ph in u.phases)
    peaks = [ph.peak_bytes for u in uses for ph in u.phases if ph.peak_bytes is not None]
    line = (
        f"memory:    {device}, {units.byte_count(allocated)} allocated and "
        f"{units.byte_count(freed)} freed per step"
    )
    if peaks:
        line += f", peak allocated {units.byte_count(max(peaks))}"
    return [line + " ([memory] events; mem +allocated -freed per node)"]


def fused_time(profile: ModuleProfile, node: ModuleNode) -> float:
    """The node's time (all passes) in kernels fused across modules: GPU busy time, CPU time on
    CPU-only traces; 0 without compiled work."""
    if node.fused is None:
        return 0.0
    total = node.fused.total
    return total.gpu_busy_us if profile.has_gpu else total.cpu_us


def compiled_lines(profile: ModuleProfile) -> list[str]:
    """The compiled graphs joined to modules through the compiled-kernel table (only for traces
    with compiled work joined to it)."""
    c = profile.compiled
    if c is None:
        return []
    step = profile.selection.gpu_busy_us if profile.has_gpu else profile.selection.cpu_us
    fused = sum(fused_time(profile, profile.nodes[r]) for r in profile.roots)
    what = "GPU busy time" if profile.has_gpu else "CPU time"
    line = (
        f"compiled:  {units.step_count(c.runs, 'runs', averaged(profile))} per step of {c.graphs} compiled "
        f"graph{'s' if c.graphs != 1 else ''}; "
        f"{units.step_count(c.matched, f'of their {units.count(c.events)} kernel calls', averaged(profile))}"
        " joined to modules; "
        f"{units.percent(fused / step if step > 0 else 0.0)} of the step's {what} in kernels "
        "fused across modules (on the modules' common ancestor: fused)"
    )
    line += (
        f"; {units.duration(c.overhead_us)} of compiled-code overhead (Dynamo's guards, the "
        "graphs' wrappers) on the compiled roots"
    )
    if c.recomputed_flops:
        line += f"; backward recomputes {units.flops(c.recomputed_flops)} of the forward"
    return [line]
