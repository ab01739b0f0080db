"""The summary lines above the tree and the table."""

from __future__ import annotations

from ..profile import ModuleProfile
from . import units


def header_lines(profile: ModuleProfile) -> list[str]:
    md = profile.metadata
    sel = profile.selection
    device = ", ".join(sorted({d.name for d in md.devices if d.name})) or "CPU only"
    dist = f", rank {md.rank} of {md.world_size}" if md.rank is not None and md.world_size else ""
    lines = [f"trace:     {md.path} ({md.size_bytes / 1e6:.1f} MB JSON), {device}{dist}"]
    lines.append(f"modules:   {profile.module_nodes} nodes from {profile.source_description}")
    if sel.numbers:
        shown = ", ".join(map(str, sel.numbers[:8])) + (", ..." if len(sel.numbers) > 8 else "")
        what = f"mean of {sel.count} step{'s' if sel.count != 1 else ''} ({shown})"
    else:
        what = "whole trace (no ProfilerStep in it)"
    left_out = [s for s in sel.incomplete if s not in sel.numbers]
    if left_out:
        what += f"; incomplete steps left out: {', '.join(map(str, left_out))}"
    lines.append(f"steps:     {what}")
    per = f"wall {units.duration(sel.wall_us)}, CPU {units.duration(sel.cpu_us)}"
    if profile.has_gpu:
        per += (
            f", GPU busy {units.duration(sel.gpu_busy_us)}"
            f" (sum of GPU work {units.duration(sel.gpu_work_us)}), {units.count(sel.kernels)} kernels"
        )
    lines.append(f"per step:  {per}")
    for w in profile.warnings:
        lines.append(f"warning:   {w}")
    return lines
