"""The job report as text: the ranks' step times (GPU busy, compute, collectives, collective time
not overlapped by compute, idle), the stragglers, and the module tree (``tree``) or table of
qualified names (``table``) with the time of every module across the ranks: median, min, max,
spread, the slowest rank and the imbalance (max / median); ``--ranks all`` adds one column per
rank."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from traceprof import units
from traceprof.job.model import StepMetric
from traceprof.job.records import step_spreads
from traceprof.render.registry import RenderOptions
from traceprof.result.metric import TimeMetric
from traceprof.result.model import UNATTRIBUTED_NAME, NodeKind, Pass
from traceprof.result.names import Parts, path_parts, short_name_map

if TYPE_CHECKING:  # the job module is imported by whoever builds a Job
    from traceprof.job.model import Job, Straggler
    from traceprof.job.modules import JobModule

_STEP_COLUMNS = (
    ("wall_us", "step wall"),
    ("gpu_busy_us", "GPU busy"),
    ("compute_us", "compute"),
    ("collective_us", "collectives"),
    ("collective_exposed_us", "not overlapped"),
    ("idle_us", "GPU idle"),
)
#: CPU-only jobs: the step's wall time and what stragglers are found by
_CPU_STEP_COLUMNS = (
    ("wall_us", "step wall"),
    ("cpu_compute_us", "CPU compute"),
)
_STRAGGLER_METRICS = {
    "compute_us": "GPU compute time per step (GPU busy outside collectives)",
    "cpu_compute_us": "CPU compute time per step (CPU time in ops outside collectives)",
}


def _grid(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Columns padded to their widest cell; the first ``left`` columns left-aligned."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return [line(header)] + [line(r) for r in rows]


def _header(job: Job, raw: bool) -> list[str]:
    first = job.ranks[0]
    md = first.profile.metadata
    paths = [r.path for r in job.ranks]
    where = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
    size = f"world size {job.world_size}" if job.world_size is not None else "world size unknown"
    backend = f", {md.distributed_backend}" if md.distributed_backend else ""
    devices = sorted({name for r in job.ranks for name in r.profile.device_names})
    total = sum(r.profile.metadata.size_bytes for r in job.ranks)
    lines = [
        "traceprof job profile",
        f"job:       {len(job.ranks)} rank{'s' if len(job.ranks) != 1 else ''} ({size}{backend})"
        + (f", {', '.join(devices)}" if devices else ""),
        f"traces:    {len(paths)} in "
        f"{os.path.relpath(where) if not os.path.isabs(paths[0]) else where}"
        f" ({units.file_size(total)} JSON in all), analyzed by the {job.engine} engine",
        f"modules:   {job.matched_modules} nodes matched across ranks from {first.profile.source_description}",
    ]
    if job.steps:
        lines.append(
            f"steps:     mean of {len(job.steps)} step{'s' if len(job.steps) > 1 else ''} "
            f"({', '.join(map(str, job.steps))}) on every rank"
        )
    else:
        lines.append("steps:     the whole trace (no ProfilerStep in the traces)")
    if job.missing_ranks:
        lines.append(
            f"missing:   rank{'s' if len(job.missing_ranks) > 1 else ''} "
            f"{', '.join(map(str, job.missing_ranks))} (no trace)"
        )
    for w in job.warnings:
        lines.append(f"warning:   {w}")
    return lines


def _ranks_section(job: Job, raw: bool) -> list[str]:
    d = lambda v: units.duration(v, raw)  # noqa: E731
    cpu_only = job.step_metric is StepMetric.CPU_COMPUTE
    columns = _CPU_STEP_COLUMNS if cpu_only else _STEP_COLUMNS
    lines = [
        "",
        "Per rank, per step (CPU time; CPU compute: time in ops outside collectives)"
        if cpu_only
        else "Per rank, per step (GPU time; collectives: NCCL/RCCL kernels; not overlapped: "
        "collective time with no other GPU work running)",
    ]
    # the memory peak per rank: only for jobs whose traces have [memory] events
    peaks = [r.memory_peak_bytes for r in job.ranks]
    memory = [] if all(p is None for p in peaks) else ["memory peak"]
    header = ["rank"] + [title for _, title in columns] + ["kernels"] + memory + [""]
    straggling = {s.rank for s in job.stragglers}
    rows = []
    for r, peak in zip(job.ranks, peaks):
        rows.append(
            [str(r.rank)]
            + [d(r.step_time(k)) for k, _ in columns]
            + [units.count(r.selected.kernels)]
            + ([units.byte_count(peak, raw)] if memory else [])
            + ["straggler" if r.rank in straggling else ""]
        )
    spreads = step_spreads(job)
    blank = [""] * (len(memory) + 2)
    if len(job.ranks) > 1:
        for label, key in (("median", "median"), ("max", "max")):
            rows.append([label] + [d(spreads[k][key]) if spreads[k] else "--" for k, _ in columns] + blank)
        rows.append(
            ["slowest"]
            + [f"rank {spreads[k]['slowest_rank']}" if spreads[k] else "--" for k, _ in columns]
            + blank
        )
    # a rank whose modules' times add up to more than its step says why, as a trace's report does
    metric = "GPU busy time" if job.metric is TimeMetric.GPU_BUSY else "CPU time"
    notes = [
        f"rank {r.rank}: its modules and {UNATTRIBUTED_NAME} add up to "
        f"{d(getattr(r.profile.selection, job.metric))} of {metric} per step, above its step's "
        f"wall time {d(r.profile.selection.wall_us)}: {over}"
        for r in job.ranks
        if (over := r.profile.over_wall())
    ]
    return lines + _grid(header, rows) + notes


def _stragglers_section(job: Job, raw: bool) -> list[str]:
    what = _STRAGGLER_METRICS.get(job.step_metric, "step wall time")
    # the reference (job.reduce.straggler_reference): the faster of two ranks, else the median
    above = "the faster rank's" if len(job.ranks) == 2 else "the median"
    lines = [
        "",
        f"Stragglers: ranks whose {what} is above {above} by more than "
        f"{units.percent(job.straggler_threshold)}",
    ]
    if len(job.ranks) < 2:
        return lines + ["  (one rank: nothing to compare)"]
    if not job.stragglers:
        return lines + ["  none"]
    short = job_short_names(job)
    for s in job.stragglers:
        lines.append(
            f"  rank {s.rank}: {units.duration(s.step_us, raw)}, "
            f"{units.signed_duration(s.excess_us, raw)} "
            f"({units.signed_percent(s.excess_fraction)}) over {reference_text(s)} "
            f"{units.duration(s.reference_us, raw)}"
        )
        if s.modules:
            lines.append("    " + straggler_explanation(s, job.metric is TimeMetric.GPU_BUSY, raw, short))
    return lines


def _path_of(key: tuple[str, ...]) -> tuple[str, ...]:
    """A job module's path: its key without the mark of the bucket's groups."""
    return key[1:] if key[:1] == ("\0bucket",) else key


def job_short_names(job: Job) -> dict[tuple[str, ...], str]:
    """Short display names of the job's modules (and of the stragglers' ones) by
    ``JobModule.key`` (traceprof.result.names), told apart from every
    node of every rank, not only from those a shaped job still shows (at ``--depth 1`` a
    straggler's ``h.1.mlp.c_fc`` is not ``c_fc``: ``h.0.mlp.c_fc`` exists too)."""
    paths: dict[tuple[str, ...], Parts] = {}
    for r in job.ranks:
        for n in r.profile.nodes:
            path = tuple(n.path) or (n.qualified_name or n.name,)
            if path not in paths:  # the ranks share most of their nodes: each path's parts once
                paths[path] = path_parts(path, n.name)
    modules = list(job.modules) + [m for s in job.stragglers for m, _ in s.modules]
    for m in modules:  # the shaped job's own rows: (k more)
        paths[_path_of(m.key)] = path_parts(_path_of(m.key), m.name)
    short = short_name_map(paths)
    return {m.key: short[_path_of(m.key)] for m in modules}


def straggler_explanation(
    s: Straggler, gpu: bool, raw: bool = False, short: dict[tuple[str, ...], str] | None = None
) -> str:
    """What makes up a straggler's excess, adding up to it: the modules over the median rank(s),
    the other modules together, and what the modules' own times do not hold."""
    own = "own GPU work outside collectives" if gpu else "own CPU time outside collectives"
    ref = reference_text(s)
    name = (lambda m: short.get(m.key, _label(m))) if short is not None else _label
    parts = [f"{name(m)} {units.signed_duration(e, raw)}" for m, e in s.modules]
    parts.append(f"the other modules {units.signed_duration(s.other_modules_us, raw)}")
    rest = (
        "kernels running at once (summed per module, counted once in the step time)"
        if gpu
        else "time outside the modules' own time"
    )
    parts.append(f"{rest} {units.signed_duration(s.unexplained_us, raw)}")
    return f"modules against {ref} ({own}, all passes): " + ", ".join(parts)


def reference_text(s: Straggler) -> str:
    """What a straggler is compared with: ``the faster rank (rank 0)``, ``the median rank
    (rank 3)``, ``the median ranks (rank 3 and rank 4, their mean)``."""
    from traceprof.job.model import MEDIAN_RANKS

    ranks = " and ".join(f"rank {r}" for r in s.reference_ranks)
    if s.reference == MEDIAN_RANKS:
        return f"the median ranks ({ranks}, their mean)"
    return f"the {s.reference} ({ranks})"


def _label(m: JobModule) -> str:
    return m.qualified_name or m.name


def _modules_section(job: Job, opts: RenderOptions, tree: bool) -> list[str]:
    raw = opts.raw_numbers
    metric = "GPU busy time" if job.metric is TimeMetric.GPU_BUSY else "CPU time"
    lines = [
        "",
        f"Modules: {metric} per step across the ranks (all passes: fwd + bwd + other; "
        "imbalance = max / median)",
    ]
    ranks = list(job.rank_numbers)
    header = [
        "module",
        "median",
        "min",
        "max",
        "spread",
        "slowest",
        "imbalance",
        "fwd median",
        "bwd median",
        "ranks",
    ]
    if opts.ranks == "all":
        header += [f"r{r}" for r in ranks]
    rows = []
    short = job_short_names(job) if not tree else {}  # a tree line shows the node's own part
    for m in job.modules:
        if opts.depth is not None and m.depth > opts.depth:
            continue
        s = m.spread(job.metric)
        fwd, bwd = m.spread(job.metric, Pass.FORWARD), m.spread(job.metric, Pass.BACKWARD)
        if tree:
            name = "  " * m.depth + (
                m.name
                if m.kind is not NodeKind.MODULE or not m.class_name or m.class_name == m.name
                else f"{m.name} ({m.class_name})"
            )
        else:
            name = short.get(m.key, _label(m))
        row = [
            name,
            units.duration(s.median, raw),
            units.duration(s.min, raw),
            units.duration(s.max, raw),
            units.duration(s.spread, raw),
            f"rank {s.slowest_rank}" if s.max > 0 else "--",
            units.ratio(s.imbalance, raw),
            units.duration(fwd.median, raw),
            units.duration(bwd.median, raw),
            f"{len(m.nodes)}/{len(ranks)}",
        ]
        if opts.ranks == "all":
            times = m.times(job.metric)
            row += [units.duration(times[r], raw) if r in times else "--" for r in ranks]
        rows.append(row)
    notes = []
    if job.hidden_modules:
        notes.append(
            f"{job.hidden_modules} module{'s' if job.hidden_modules != 1 else ''} without time on any "
            "rank not shown (--all shows them)"
        )
    return lines + _grid(header, rows) + notes


def job_report(job: Job, opts: RenderOptions, tree: bool = True) -> str:
    raw = opts.raw_numbers
    lines = (
        _header(job, raw)
        + _ranks_section(job, raw)
        + _stragglers_section(job, raw)
        + _modules_section(job, opts, tree)
    )
    return "\n".join(lines) + "\n"


def render_job_tree(job: Job, opts: RenderOptions) -> str:
    return job_report(job, opts, tree=True)


def render_job_table(job: Job, opts: RenderOptions) -> str:
    return job_report(job, opts, tree=False)
