"""DeepSpeed-flops-profiler-style indented module tree."""

from __future__ import annotations

from ..profile import ModuleNode, ModuleProfile, NodeKind
from . import RenderOptions, register, units
from .header import header_lines


def _line(profile: ModuleProfile, node: ModuleNode, opts: RenderOptions) -> str:
    d = lambda us: units.duration(us, opts.raw_numbers)  # noqa: E731
    fields = []
    if profile.has_gpu:
        fields.append(f"fwd {d(node.forward.total.gpu_busy_us)}")
        fields.append(f"bwd {d(node.backward.total.gpu_busy_us)}")
        fields.append(f"{units.percent(profile.share_of_step(node))} GPU")
        fields.append(f"{units.count(node.total.kernels)} kernels")
        fields.append(f"cpu {d(node.total.cpu_us)}")
    else:
        fields.append(f"cpu fwd {d(node.forward.total.cpu_us)}")
        fields.append(f"cpu bwd {d(node.backward.total.cpu_us)}")
        fields.append(f"{units.percent(profile.share_of_step(node))} CPU")
    if profile.flops.has_shapes and (node.total.flops or node.total.unsupported_ops):
        fields.extend(flop_fields(profile, node, opts))
    if profile.memory_device:
        fields.extend(memory_fields(profile, node, opts))
    if node.kind is NodeKind.MODULE and node.calls != 1:
        fields.append(f"{units.count(node.calls)} calls")
    if node.info is not None:
        if node.info.params_total is not None:
            fields.append(f"{units.big_number(node.info.params_total)} params")
        if node.info.inputs:
            fields.append(f"in {units.shape(node.info.inputs)}")
    label = f"({node.name}): {node.class_name}" if node.class_name else node.name
    return "  " * node.depth + f"{label}(" + ", ".join(fields) + ")"


def flop_fields(profile: ModuleProfile, node: ModuleNode, opts: RenderOptions) -> list[str]:
    raw = opts.raw_numbers
    out = [f"{units.flops(node.forward.total.flops, raw)} fwd",
           f"{units.flops(node.backward.total.flops, raw)} bwd"]
    rates = profile.throughput(node.total)
    if rates.flop_per_s is not None and node.total.flops:
        out.append(units.flop_rate(rates.flop_per_s))
        if rates.mfu is not None:
            out.append(f"{units.percent(rates.mfu)} MFU")
    if node.total.unsupported_ops:
        out.append(f"{units.count(node.total.unsupported_ops)} ops without FLOPs")
    return out


def memory_fields(profile: ModuleProfile, node: ModuleNode, opts: RenderOptions) -> list[str]:
    """Bytes allocated and freed per step in both passes, and the highest allocator total."""
    use = profile.memory_of(node)
    if use is None:
        return []
    raw = opts.raw_numbers
    allocated = use.forward.allocated_bytes + use.backward.allocated_bytes
    freed = use.forward.freed_bytes + use.backward.freed_bytes
    text = f"mem +{units.byte_count(allocated, raw)} -{units.byte_count(freed, raw)}"
    peaks = [p for p in (use.forward.peak_bytes, use.backward.peak_bytes) if p is not None]
    if peaks:
        text += f" peak {units.byte_count(max(peaks), raw)}"
    return [text]


@register("tree", (".txt", ".tree"), "indented module tree (DeepSpeed flops profiler style)")
def render_tree(profile: ModuleProfile, opts: RenderOptions) -> str:
    time_kind = "GPU busy time" if profile.has_gpu else "CPU time"
    out = ["traceprof module profile"] + header_lines(profile, opts)
    out.append("")
    out.append(
        f"Each line: forward and backward {time_kind} per step (node and everything below it), "
        "share of the step, kernels, calls when not 1"
        + ("; FLOPs forward and backward, achieved FLOP/s (and MFU where the device's peak is "
           "known)." if profile.flops.has_shapes else ".")
    )
    out.append("")
    out.extend(_line(profile, n, opts) for n in profile.walk())
    return "\n".join(out) + "\n"
