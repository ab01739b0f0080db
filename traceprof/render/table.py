"""torchinfo-style table: one row per node with box-drawing depth guides."""

from __future__ import annotations

from ..profile import ModuleNode, ModuleProfile, NodeKind
from . import RenderOptions, register, units
from .header import header_lines


def _layer_labels(profile: ModuleProfile) -> dict[int, str]:
    """``├─conv1 (Conv2d): 1-1`` labels, torchinfo's "var_names" row style."""
    labels: dict[int, str] = {}
    for node in profile.walk():
        if node.parent < 0:
            labels[node.id] = node.name if not node.class_name else f"{node.name} ({node.class_name})"
            if node.class_name and node.name == node.class_name:
                labels[node.id] = node.class_name
            continue
        index = profile.nodes[node.parent].children.index(node.id) + 1
        guide = "│    " * (node.depth - 1) + "└─" if node.depth > 1 else "├─"
        what = f"{node.name} ({node.class_name})" if node.class_name else node.name
        labels[node.id] = f"{guide}{what}: {node.depth}-{index}"
    return labels


def _columns(profile: ModuleProfile, opts: RenderOptions):
    d = lambda us: units.duration(us, opts.raw_numbers)  # noqa: E731
    cols = [("Calls", lambda n: units.count(n.calls) if n.kind is NodeKind.MODULE else "")]
    if profile.has_gpu:
        cols += [
            ("Fwd GPU", lambda n: d(n.forward.total.gpu_busy_us)),
            ("Bwd GPU", lambda n: d(n.backward.total.gpu_busy_us)),
            ("GPU %", lambda n: units.percent(profile.share_of_step(n))),
            ("Kernels", lambda n: units.count(n.total.kernels)),
        ]
    cols += [
        ("Fwd CPU", lambda n: d(n.forward.total.cpu_us)),
        ("Bwd CPU", lambda n: d(n.backward.total.cpu_us)),
    ]
    if not profile.has_gpu:
        cols.append(("CPU %", lambda n: units.percent(profile.share_of_step(n))))
    if profile.flops.has_shapes:
        raw = opts.raw_numbers
        cols += [
            ("Fwd FLOPs", lambda n: units.flops(n.forward.total.flops, raw)),
            ("Bwd FLOPs", lambda n: units.flops(n.backward.total.flops, raw)),
            ("FLOP/s", lambda n: units.flop_rate(profile.throughput(n.total).flop_per_s)
             if n.total.flops else "--"),
        ]
        peak = profile.flops.peak
        if profile.has_gpu and peak is not None and peak.flop_per_s:
            cols.append(("MFU", lambda n: units.fraction(profile.throughput(n.total).mfu)
                         if n.total.flops else "--"))
    if any(n.info is not None for n in profile.nodes):
        cols += [
            ("Param #", lambda n: f"{n.info.params_total:,}" if n.info and n.info.params_total is not None else "--"),
            ("Input shape", lambda n: units.shape(n.info.inputs) if n.info else "--"),
            ("Output shape", lambda n: units.shape(n.info.outputs) if n.info else "--"),
        ]
    return cols


@register("table", (".table",), "one row per module (torchinfo style)")
def render_table(profile: ModuleProfile, opts: RenderOptions) -> str:
    labels = _layer_labels(profile)
    cols = _columns(profile, opts)
    nodes = list(profile.walk())
    cells = [[fn(n) for _, fn in cols] for n in nodes]
    first = max([len("Layer (type:depth-idx)")] + [len(labels[n.id]) for n in nodes])
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, (h, _) in enumerate(cols)]

    def row(label: str, values: list[str]) -> str:
        return (label.ljust(first) + "  " + "  ".join(v.rjust(w) for v, w in zip(values, widths))).rstrip()

    rule = "=" * (first + 2 + sum(widths) + 2 * (len(widths) - 1))
    out = header_lines(profile, opts) + [rule, row("Layer (type:depth-idx)", [h for h, _ in cols]), rule]
    for node, values in zip(nodes, cells):
        if node.kind is NodeKind.UNATTRIBUTED:
            out.append(rule)
        out.append(row(labels[node.id], values))
    out.append(rule)
    sel = profile.selection
    out.append(f"Steps analysed: {sel.count} ({'mean per step' if sel.numbers else 'whole trace'})")
    if profile.has_gpu:
        out.append(f"GPU busy time per step: {units.duration(sel.gpu_busy_us)}")
        out.append(f"Kernels per step: {units.count(sel.kernels)}")
    out.append(f"CPU time per step: {units.duration(sel.cpu_us)}")
    if profile.flops.has_shapes:
        out.append(f"FLOPs per step: {units.flops(sel.flops, opts.raw_numbers)}")
    table = profile.metadata.module_table
    if table is not None and "" in table.modules and table.modules[""].params_total is not None:
        root = table.modules[""]
        out.append(f"Total params: {root.params_total:,}")
        if root.trainable_total is not None:
            out.append(f"Trainable params: {root.trainable_total:,}")
        if root.frozen_total is not None:
            out.append(f"Non-trainable params: {root.frozen_total:,}")
    out.append(rule)
    return "\n".join(out) + "\n"
