"""The DeepSpeed-flops-profiler-style report (``--format tree``): traceprof's header, the
profile summary, the aggregated profile (top modules per depth) and the detailed module tree,
in the layout of DeepSpeed's ``print_model_profile``, with traceprof's measured numbers."""

from __future__ import annotations

import msgspec

from traceprof import units
from traceprof.render.header import averaged, fused_time, header_lines
from traceprof.render.registry import RenderOptions
from traceprof.result.model import (
    PASSES,
    ZERO,
    ModuleNode,
    ModuleProfile,
    NodeKind,
    Times,
    is_optimizer_group,
)
from traceprof.result.params import CountedOnce, params_counted_once
from traceprof.result.shaping import depth_first
from traceprof.trace.schema import DATA_PARALLEL_WRAPPERS


def memory_fields(profile: ModuleProfile, node: ModuleNode, opts: RenderOptions) -> list[str]:
    """Bytes allocated and freed per step in all passes, and the highest allocator total."""
    use = profile.memory_of(node)
    if use is None:
        return []
    raw = opts.raw_numbers
    allocated = sum(ph.allocated_bytes for ph in use.phases)
    freed = sum(ph.freed_bytes for ph in use.phases)
    text = f"mem +{units.byte_count(allocated, raw)} -{units.byte_count(freed, raw)}"
    peaks = [ph.peak_bytes for ph in use.phases if ph.peak_bytes is not None]
    if peaks:
        text += f" peak {units.byte_count(max(peaks), raw)}"
    if use.activation_bytes is not None:
        text += f", act {units.byte_count(use.activation_bytes, raw)}"
    return [text]


BANNER = "-------------------------- DeepSpeed Flops Profiler --------------------------"
AGGREGATED = "----------------------------- Aggregated Profile per GPU -----------------------------"
DETAILED = "------------------------------ Detailed Profile per GPU ------------------------------"
RULE = "------------------------------------------------------------------------------"


class Summary(msgspec.Struct, frozen=True):
    """The report's summary numbers, per step. Latencies are GPU busy time (CPU time on CPU-only
    traces), in microseconds; they add up: ``fwd + bwd + step + other == iter`` == the step's
    time, one term per pass (the optimizer step is a part of the other pass).

    - ``fwd``: the forward pass: the module roots' forward totals plus the forward work of the
      "(not in any module)" bucket (ops autograd recorded there: the loss).
    - ``bwd``: the backward pass (gradient all-reduce, ``AccumulateGrad``, ...).
    - ``step``: the other pass of the bucket's groups recognised as the optimizer
      (``schema.OPTIMIZER_STEP_PREFIXES``; ``ModuleProfile.optimizer_step``, found before
      ``--depth``/``--top``).
    - ``other``: the rest of the other pass: zero_grad, copies, time between ops, GPU work whose
      launch is not in the trace.
    """

    fwd_us: float
    bwd_us: float
    step_us: float
    other_us: float  # the other pass without the optimizer step
    iter_us: float
    modules_fwd_us: float
    modules_bwd_us: float
    outside_fwd_us: float  # not in any module
    outside_bwd_us: float
    params: int | None
    fwd_macs: float
    fwd_flops: float
    bwd_flops: float
    other_flops: float  # the whole other pass, optimizer step included
    model_fwd_macs: float  # module roots only
    batch_size: int | None
    batch_source: str
    world_size: int | None
    dp_size: int | None
    dp_source: str
    mp_size: int | None


def _time(profile: ModuleProfile, t: Times) -> float:
    return t.gpu_busy_us if profile.has_gpu else t.cpu_us


def summarize(profile: ModuleProfile, batch_size: int | None = None) -> Summary:
    """The summary block's numbers (see :class:`Summary`)."""
    roots = [profile.nodes[r] for r in profile.roots]
    # outside the modules: the bucket, and compiled or replayed work no module is around (roots
    # of kind compiled), as in a diff's "where" line
    outside = (NodeKind.UNATTRIBUTED, NodeKind.COMPILED)
    modules = [n for n in roots if n.kind not in outside]
    fwd_m, bwd_m, out_fwd, out_bwd = ZERO, ZERO, ZERO, ZERO
    for n in roots:
        if n.kind in outside:
            out_fwd, out_bwd = out_fwd + n.forward.total, out_bwd + n.backward.total
        else:
            fwd_m, bwd_m = fwd_m + n.forward.total, bwd_m + n.backward.total
    opt = profile.optimizer_step  # found before --depth/--top transforms
    other_all = ZERO  # the other pass of every root (modules have none of their own)
    for n in roots:
        other_all = other_all + n.other.total
    t = lambda x: _time(profile, x)  # noqa: E731
    fwd_us, bwd_us = t(fwd_m) + t(out_fwd), t(bwd_m) + t(out_bwd)
    step_us = t(opt.other)
    other_us = t(other_all) - step_us
    params = None
    infos = [n.info for n in modules if n.kind is NodeKind.MODULE]
    totals = [i.params_total for i in infos if i is not None and i.params_total is not None]
    if infos and len(totals) == len(infos):
        params = sum(totals)
    source = "--batch-size"
    if batch_size is None:
        batch_size, source = _batch_from_table(modules)
    md = profile.metadata
    world = md.world_size
    dp, dp_source, mp = None, "unknown", None
    if world == 1:
        dp, dp_source, mp = 1, "single process", 1
    elif world and modules and modules[0].class_name in DATA_PARALLEL_WRAPPERS:
        # data parallel over every rank: each holds the whole model, no model parallelism
        dp, dp_source, mp = world, f"{modules[0].class_name} over all {world} ranks", 1
    return Summary(
        fwd_us=fwd_us,
        bwd_us=bwd_us,
        step_us=step_us,
        other_us=other_us,
        iter_us=fwd_us + bwd_us + step_us + other_us,
        modules_fwd_us=t(fwd_m),
        modules_bwd_us=t(bwd_m),
        outside_fwd_us=t(out_fwd),
        outside_bwd_us=t(out_bwd),
        params=params,
        fwd_macs=fwd_m.macs + out_fwd.macs,
        fwd_flops=fwd_m.flops + out_fwd.flops,
        bwd_flops=bwd_m.flops + out_bwd.flops,
        other_flops=other_all.flops,
        model_fwd_macs=fwd_m.macs,
        batch_size=batch_size,
        batch_source=source,
        world_size=world,
        dp_size=dp,
        dp_source=dp_source,
        mp_size=mp,
    )


def iter_over_wall(profile: ModuleProfile, s: Summary) -> str | None:
    """Why the iter latency (``s.iter_us``, the roots' time) is above the step's wall time, or
    None when it is not (ModuleProfile.over_wall)."""
    return profile.over_wall()


def _batch_from_table(modules: list[ModuleNode]) -> tuple[int | None, str]:
    """Dim 0 of the first tensor input of the first root module, from the module table."""
    if not modules or modules[0].info is None:
        return None, "no module table in the trace; --batch-size N sets it"

    def first_shape(spec):
        if isinstance(spec, dict):
            if "shape" in spec:
                return spec["shape"]
            spec = list(spec.values())
        if isinstance(spec, list):
            for s in spec:
                found = first_shape(s)
                if found is not None:
                    return found
        return None

    shape = first_shape(modules[0].info.inputs)
    if shape:
        return int(shape[0]), "dim 0 of the root module's first input"
    return None, "unknown: the root module's inputs have no tensor shape; --batch-size N sets it"


def _kv(label: str, value: str) -> str:
    return f"{label:<60}  {value:<8}".rstrip()


def _known(value: object, why: str = "") -> str:
    return "unknown" + why if value is None else f"{value}"


def _per_s(work: float, us: float) -> float | None:
    return work / (us * 1e-6) if us else None


def summary_lines(profile: ModuleProfile, opts: RenderOptions) -> list[str]:
    """The summary block: its heading and notations, the sizes of the run, the latencies and
    rates of the step, and traceprof's extras."""
    s = summarize(profile, opts.batch_size)
    raw = opts.raw_numbers
    return (
        _notation_lines(profile)
        + _size_lines(profile, s, raw)
        + _latency_lines(profile, s, raw)
        + _extra_lines(profile, s, raw)
    )


def _notation_lines(profile: ModuleProfile) -> list[str]:
    """The banner, the steps the numbers are of, and what the names mean."""
    sel = profile.selection
    if sel.numbers:
        steps = ", ".join(map(str, sel.numbers[:8])) + (", ..." if len(sel.numbers) > 8 else "")
        at = f"at step {steps}" + (f" (mean of {sel.count} steps)" if sel.count > 1 else "")
    else:
        at = "over the whole trace (no ProfilerStep in it)"
    time_kind = "GPU busy time" if profile.has_gpu else "CPU time (a CPU-only trace)"
    return [
        BANNER,
        f"Profile Summary {at}:",
        "Notations:",
        "data parallel size (dp_size), model parallel size(mp_size),",
        "number of parameters (params), number of multiply-accumulate operations(MACs),",
        "number of floating-point operations (flops), floating-point operations per second (FLOPS),",
        "fwd latency (forward propagation latency), bwd latency (backward propagation latency),",
        "step (weights update latency), iter latency (sum of fwd, bwd and step latency)",
        f"traceprof: latencies are {time_kind} per step, one per pass; fwd and bwd latency "
        "include the work of that pass outside every module",
        "(listed under (not in any module)); step latency is the optimizer's groups there, other "
        "latency the rest of the work that is neither",
        "forward nor backward (zero_grad, copies, time between ops, GPU work launched outside the "
        "trace), so iter latency is the step's whole time;",
        "flops are counted from the ops' recorded shapes in both passes: bwd flops are measured, "
        "not estimated as 2 * fwd flops.",
        "",
    ]


def _size_lines(profile: ModuleProfile, s: Summary, raw: bool) -> list[str]:
    """World, data and model parallel sizes, the batch, the parameters, forward MACs and flops."""
    out = [
        _kv("world size: ", _known(s.world_size)),
        _kv("data parallel size: ", _known(s.dp_size) + (f" ({s.dp_source})" if s.dp_size else "")),
        _kv("model parallel size: ", _known(s.mp_size)),
        _kv("batch size per GPU: ", _known(s.batch_size) + f" ({s.batch_source})"),
    ]
    mp = s.mp_size or 1
    out.append(
        _kv(
            "params per GPU: ",
            units.params(s.params, raw) if s.params is not None else "unknown (no module table in the trace)",
        )
    )
    if s.params is not None:
        out.append(
            _kv(
                "params of model = params per GPU * mp_size: ",
                units.params(s.params * mp, raw) if s.mp_size else "unknown (mp_size unknown)",
            )
        )
    if profile.flops.has_shapes:
        out.append(_kv("fwd MACs per GPU: ", units.mac_count(s.fwd_macs, raw)))
        out.append(_kv("fwd flops per GPU: ", units.flops(s.fwd_flops, raw)))
        out.append(
            _kv(
                "fwd flops of model = fwd flops per GPU * mp_size: ",
                units.flops(s.fwd_flops * mp, raw) if s.mp_size else "unknown (mp_size unknown)",
            )
        )
    else:
        out.append(_kv("fwd MACs per GPU: ", "unknown (trace recorded without shapes)"))
        out.append(_kv("fwd flops per GPU: ", "unknown (trace recorded without shapes)"))
    return out


def _latency_lines(profile: ModuleProfile, s: Summary, raw: bool) -> list[str]:
    """The latency of each pass and the FLOPS over it, the iteration, samples per second."""
    d = lambda us: units.duration(us, raw) if us is not None else "unknown"  # noqa: E731
    rate = lambda v: units.flop_rate_raw(v, raw) if profile.flops.has_shapes else "unknown"  # noqa: E731
    out = [
        _kv("fwd latency: ", d(s.fwd_us)),
        _kv("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", rate(_per_s(s.fwd_flops, s.fwd_us))),
        _kv("bwd latency: ", d(s.bwd_us)),
        _kv("bwd FLOPS per GPU = bwd flops per GPU / bwd latency: ", rate(_per_s(s.bwd_flops, s.bwd_us))),
        _kv(
            "fwd+bwd FLOPS per GPU = fwd+bwd flops / (fwd+bwd latency): ",
            rate(_per_s(s.fwd_flops + s.bwd_flops, s.fwd_us + s.bwd_us)),
        ),
        _kv("step latency: ", d(s.step_us)),
        _kv("other latency (neither fwd, bwd nor step): ", d(s.other_us)),
        _kv("iter latency: ", d(s.iter_us)),
    ]
    over = iter_over_wall(profile, s)
    if over:
        out.append(
            _kv(
                "  iter latency above the step's wall time: ",
                f"by {d(s.iter_us - profile.selection.wall_us)}: {over}",
            )
        )
    total_flops = s.fwd_flops + s.bwd_flops + s.other_flops
    out.append(
        _kv(
            "FLOPS per GPU = (fwd+bwd+step+other flops) / iter latency: ",
            rate(_per_s(total_flops, s.iter_us)),
        )
    )
    samples = s.batch_size * (s.world_size or 1) if s.batch_size else None
    sps = samples / (s.iter_us * 1e-6) if samples and s.iter_us else None
    note = "" if s.world_size else " (world size unknown: one process)"
    out.append(_kv("samples/second: ", (units.rate(sps, "samples/s", raw) + note) if sps else "unknown"))
    return out


def _extra_lines(profile: ModuleProfile, s: Summary, raw: bool) -> list[str]:
    """traceprof's extras: latencies inside and outside the modules, the measured backward
    flops, the step's wall time and the samples per second over it."""
    d = lambda us: units.duration(us, raw) if us is not None else "unknown"  # noqa: E731
    wall_us = profile.selection.wall_us
    samples = s.batch_size * (s.world_size or 1) if s.batch_size else None
    sps_wall = samples / (wall_us * 1e-6) if samples and wall_us else None
    bwd_flops = units.flops(s.bwd_flops, raw) if profile.flops.has_shapes else "unknown"
    return [
        "traceprof extras:",
        _kv("  fwd / bwd latency inside the modules: ", f"{d(s.modules_fwd_us)} / {d(s.modules_bwd_us)}"),
        _kv("  fwd / bwd latency not in any module: ", f"{d(s.outside_fwd_us)} / {d(s.outside_bwd_us)}"),
        _kv("  bwd flops per GPU (measured): ", bwd_flops),
        _kv("  step wall time (CPU): ", d(wall_us)),
        _kv(
            "  samples/second over the step's wall time: ",
            units.rate(sps_wall, "samples/s", raw) if sps_wall else "unknown",
        ),
    ]


def aggregated_lines(profile: ModuleProfile, opts: RenderOptions) -> list[str]:
    """Top-k module classes per depth by params, fwd MACs and fwd latency, summed over the
    modules of one class at one depth (as DeepSpeed's aggregated profile)."""
    raw = opts.raw_numbers
    k = opts.top_modules
    by_depth: dict[int, dict[str, list]] = {}
    once = params_counted_once(profile)
    for n in profile.walk():
        if n.kind is not NodeKind.MODULE:
            continue
        acc = by_depth.setdefault(n.depth, {}).setdefault(n.class_name or n.name, [None, 0.0, 0.0])
        if n.info is not None and n.info.name in once:  # tied parameters counted once
            acc[0] = (acc[0] or 0) + once[n.info.name].params
        acc[1] += n.forward.total.macs
        acc[2] += _time(profile, n.forward.total)
    out = [AGGREGATED, f"Top {k} modules in terms of params, MACs or fwd latency at different model depths:"]
    for depth in sorted(by_depth):
        info = by_depth[depth]
        top = lambda i, info=info: sorted(info.items(), key=lambda kv: -(kv[1][i] or 0))[:k]  # noqa: E731
        out.append(f"depth {depth}:")
        if any(v[0] is not None for v in info.values()):
            out.append(
                "    params      - " + units.python_dict([(c, units.params(v[0], raw)) for c, v in top(0)])
            )
        else:
            out.append("    params      - unknown (no module table in the trace)")
        if profile.flops.has_shapes:
            out.append(
                "    MACs        - " + units.python_dict([(c, units.mac_count(v[1], raw)) for c, v in top(1)])
            )
        else:
            out.append("    MACs        - unknown (trace recorded without shapes)")
        out.append(
            "    fwd latency - " + units.python_dict([(c, units.duration(v[2], raw)) for c, v in top(2)])
        )
    return out


def _params_field(node: ModuleNode, s: Summary, once: dict[str, CountedOnce], raw: bool) -> str:
    """``800 = 6.6% Params``; ``(tied)`` when some of them are counted where the model met them
    first (not here)."""
    counted = once.get(node.info.name) if node.info is not None else None
    if counted is None:
        return "-- Params"
    mark = " (tied)" if counted.tied else ""
    return f"{units.params(counted.params, raw)} = {units.share(counted.params, s.params)} Params{mark}"


def _module_fields(
    profile: ModuleProfile,
    node: ModuleNode,
    s: Summary,
    opts: RenderOptions,
    once: dict[str, CountedOnce] | None = None,
) -> list[str]:
    raw = opts.raw_numbers
    fields = []
    fwd, bwd = node.forward.total, node.backward.total
    if node.kind in (NodeKind.UNATTRIBUTED, NodeKind.GROUP):
        return _outside_fields(profile, node, s, opts)
    if node.kind is NodeKind.MODULE:
        fields.append(_params_field(node, s, params_counted_once(profile) if once is None else once, raw))
    has_flops = profile.flops.has_shapes
    if has_flops:
        fields.append(f"{units.mac_count(fwd.macs, raw)} = {units.share(fwd.macs, s.fwd_macs)} MACs")
    fwd_t, bwd_t = _time(profile, fwd), _time(profile, bwd)
    fields.append(f"{units.duration(fwd_t, raw)} = {units.share(fwd_t, s.fwd_us)} latency")
    if has_flops:
        fields.append(units.flop_rate_raw(_flop_rate(profile, fwd), raw))
    # traceprof's extras
    fields.append(f"bwd {units.duration(bwd_t, raw)} = {units.share(bwd_t, s.bwd_us)} bwd latency")
    if has_flops and bwd.flops:
        fields.append(f"bwd {units.flop_rate_raw(_flop_rate(profile, bwd), raw)}")
    other_t = _time(profile, node.other.total)
    if other_t:  # a module's work is forward or backward; only folded groups carry other work
        fields.append(f"other {units.duration(other_t, raw)}")
    fused_t = fused_time(profile, node)
    if fused_t:  # compiled kernels of several modules, booked here (part of the latencies)
        fields.append(f"fused {units.duration(fused_t, raw)}")
    if node.kind is NodeKind.MODULE and node.calls != 1:
        fields.append(units.step_count(node.calls, "calls", averaged(profile)))
    if node.info is not None and node.info.inputs:
        fields.append(f"in {units.shape(node.info.inputs)}")
    if profile.memory_device:
        fields.extend(memory_fields(profile, node, opts))
    if node.info is not None and node.info.extra_repr:
        fields.append(node.info.extra_repr)
    return fields


def _flop_rate(profile: ModuleProfile, t: Times) -> float:
    """Achieved FLOP/s of ``t`` over the time its GPU work ran (ModuleProfile.throughput)."""
    return profile.throughput(t).flop_per_s or 0.0


def _outside_fields(profile: ModuleProfile, node: ModuleNode, s: Summary, opts: RenderOptions) -> list[str]:
    """The bucket and its groups: every pass and their sum's share of the iter latency (the
    bucket holds the other pass: the optimizer step and the rest of the work that is neither
    forward nor backward)."""
    raw = opts.raw_numbers
    times = [(p, _time(profile, node.phase(p).total)) for p in PASSES]
    total = sum(t for _, t in times)
    fields = [f"{p.short} {units.duration(t, raw)}" for p, t in times]
    fields.append(f"{units.duration(total, raw)} = {units.share(total, s.iter_us)} iter latency")
    if profile.flops.has_shapes and node.total.flops:
        fields.append(f"{units.flops(node.total.flops, raw)}")
        fields.append(units.flop_rate_raw(_flop_rate(profile, node.total), raw))
    if is_optimizer_group(node):
        fields.append("optimizer step")
    if profile.memory_device:
        fields.extend(memory_fields(profile, node, opts))
    return fields


def detailed_lines(profile: ModuleProfile, opts: RenderOptions) -> list[str]:
    s = summarize(profile, opts.batch_size)
    time_kind = "GPU busy time" if profile.has_gpu else "CPU time"
    out = [
        DETAILED,
        "Each module profile is listed after its name in the following order: ",
        "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
        "percentage of total fwd latency, fwd FLOPS",
        f"then traceprof's: bwd latency, percentage of total bwd latency, bwd FLOPS, calls when "
        f"not 1, input shapes, memory when recorded, extra_repr (latencies: {time_kind} per step; "
        "percentages: of the summary's totals above)",
        "",
        "Note: 1. Work a module runs itself (functional calls, ops in its forward) makes up the "
        "difference between its numbers and the sum of its submodules'.",
        "2. FLOPs and MACs are computed from the ops' recorded shapes (docs/flops.md); FLOPS are "
        "achieved rates over the module's own measured time.",
        "3. Work outside every module is listed last under (not in any module), grouped by the "
        "top-level op or annotation it ran under, with its time per pass: fwd, bwd and other "
        "(neither: the optimizer step, zero_grad, copies, time between ops).",
        "",
    ]
    if profile.compiled is not None:
        out[-1:-1] = [
            "4. Compiled kernels are joined to their modules through the compiled-kernel table; "
            "fused: the time (both passes, within the latencies)",
            "of kernels that fuse ops of several modules, which sits on their common ancestor "
            "(their FLOPs go to the modules of their ops); --ops lists them.",
        ]

    once = params_counted_once(profile)

    def label(node: ModuleNode, is_root: bool) -> str:
        name = node.class_name if node.kind is NodeKind.MODULE and node.class_name else ""
        if is_root and name:
            return name
        if name:
            return f"({node.name}): {name}"
        return f"({node.name})" if not node.name.startswith("(") else node.name

    roots = [profile.nodes[r] for r in profile.roots]
    # depth first without recursion: a tree is as deep as its trace makes it
    for node, level, entering in depth_first(roots, lambda n, _: (profile.nodes[c] for c in n.children)):
        pad = "  " * level
        if not entering:
            if node.children:
                out.append(f"{pad})")
            continue
        fields = ", ".join(_module_fields(profile, node, s, opts, once))
        if not node.children:
            out.append(f"{pad}{label(node, level == 0)}({fields})")
        else:
            out.append(f"{pad}{label(node, level == 0)}(")
            out.append(f"{pad}  {fields}")
    out.append(RULE)
    return out


def render_tree(profile: ModuleProfile, opts: RenderOptions) -> str:
    out = ["traceprof module profile"] + header_lines(profile, opts)
    out.append("")
    out.extend(summary_lines(profile, opts))
    out.append("")
    out.extend(aggregated_lines(profile, opts))
    out.append("")
    out.extend(detailed_lines(profile, opts))
    return "\n".join(out) + "\n"
