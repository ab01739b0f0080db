"""``traceprof analyze TRACE...``: one trace's module profile, or the report of a job of several
ranks' traces (docs/jobs.md)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from traceprof.cli.choices import DEFAULT_TABLE_COLUMNS, FORMATS, TABLE_COLUMNS
from traceprof.cli.common import (
    USAGE_EXIT_CODE,
    Number,
    chosen_renderer,
    close,
    depth_option,
    emit,
    fail,
    hierarchy_option,
    ignore_option,
    job_progress,
    max_memory_option,
    no_cache_option,
    output_options,
    peak_tflops_option,
    print_warnings,
    progress_reporter,
    raw_option,
    reported_errors,
    sort_option,
    step_option,
    tensorboard_option,
    top_option,
    write_tensorboard,
)
from traceprof.errors import OptionError

if TYPE_CHECKING:
    from traceprof.result.model import ModuleProfile

# the analysis and the renderers are imported when the command runs: --help and usage errors
# end before (docs/performance.md "Start-up")


class AnalyzeOptions(NamedTuple):
    """The options of ``traceprof analyze``, as click parsed them: built once by the command and
    handed to the report of one trace or of a job. The names are the click parameters' names;
    :data:`SINGLE_TRACE_OPTIONS` and :data:`JOB_OPTIONS` name those that apply to one of the
    two only (given to the other, they are refused before any work)."""

    fmt: str | None
    output: str | None
    depth: int | None
    top: int | None
    ignore: tuple[str, ...]
    sort: str
    step: int | None
    hierarchy: str
    raw: bool
    all_rows: bool
    peak_tflops: float | None
    max_memory: int | None
    jobs: int | None
    # one trace's
    batch_size: int | None
    unsupported_ops: bool
    columns: str | None
    ops_module: str | None
    tensorboard_logdir: str | None
    # a job's
    engine: str
    scheduler: str | None
    scheduler_timeout: float | None
    ranks_columns: str
    straggler_threshold: float


@click.command("analyze")
@click.argument("trace", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@output_options(
    FORMATS,
    "Write to FILE (atomically; devices and pipes in place; '-' is standard "
    "output) instead of standard output; the format follows its extension "
    "(.txt, .table, .json, .csv, .html, .parquet). Never the input trace.",
)
@depth_option()
@top_option(
    "Keep the N largest children of each node (by --sort's key); in the tree report also the "
    "modules per depth of the aggregated profile [default there: 3]; with --ops the N largest "
    "rows of each section; for a job, the N largest modules under each module."
)
@ignore_option()
@click.option(
    "--batch-size",
    type=Number(int, min=1),
    default=None,
    help="Samples per step per rank, for samples/second in the tree report "
    "[default: dim 0 of the root module's first input, when recorded].",
)
@sort_option(
    "Order of siblings (a job's modules: by their median across the ranks); with --ops the "
    "order of the rows (gpu, cpu, calls, flops, name) [default there: largest time first]."
)
@step_option("Analyze this ProfilerStep alone [default: mean of the complete steps].")
@hierarchy_option()
@raw_option("Times as plain microseconds, FLOPs and bytes as plain numbers.")
@click.option(
    "--unsupported-ops",
    is_flag=True,
    help="List the ops without a FLOP formula, with calls and share of time.",
)
@click.option(
    "--columns",
    default=None,
    metavar="LIST",
    help="Columns of --format table, a comma list of: "
    + ", ".join(TABLE_COLUMNS)
    + " [default: "
    + ",".join(DEFAULT_TABLE_COLUMNS)
    + ", those the trace can fill].",
)
@click.option(
    "--ops",
    "ops_module",
    default=None,
    metavar="MODULE",
    help="Instead of the module tree: the ops and kernels of MODULE (a qualified name, a "
    "class name or a part of one name) and its submodules per pass, largest first (tree, "
    "table, csv, json, parquet); '*' for every module's own rows.",
)
@click.option(
    "--all",
    "all_rows",
    is_flag=True,
    help="As text, also the rows without time: with --ops, the Python frames of with_stack "
    "traces; for a job, the modules without time on every rank.",
)
@tensorboard_option("Also write TRACE as a new run into this TensorBoard log directory.")
@peak_tflops_option(
    "Peak TFLOP/s of one device, for MFU [default: the peaks table's; none for CPUs and devices not in it]."
)
@max_memory_option()
@no_cache_option
@click.option(
    "--jobs",
    "-j",
    "jobs",
    type=Number(int, min=1),
    default=None,
    metavar="N",
    help="Parallel workers: for one trace, the processes decoding it "
    "(docs/performance.md); for a job, the traces analyzed at once (each worker "
    "holds one trace) [default: all CPUs].",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "dask"]),
    default="local",
    show_default=True,
    help="Where a job's traces are analyzed: a local process pool, or Dask distributed "
    "(pip install 'traceprof[dask]').",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="Dask scheduler of --engine dask (tcp://HOST:PORT) [default: a LocalCluster of --jobs workers].",
)
@click.option(
    "--ranks",
    "ranks_columns",
    type=click.Choice(["summary", "all"]),
    default="summary",
    show_default=True,
    help="Job tree and table: summary columns across ranks (median, min, max, slowest "
    "rank, imbalance), or all: one column per rank too.",
)
@click.option(
    "--scheduler-timeout",
    type=Number(float, min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="--engine dask: seconds to wait for the scheduler to answer, then for a first worker [default: 30].",
)
@click.option(
    "--straggler-threshold",
    type=Number(float, min=0),
    default=0.05,
    show_default=True,
    metavar="FRACTION",
    help="Job: a rank is a straggler when its step time is above the median (of two ranks: the "
    "faster one's) by more than this fraction.",
)
def analyze(trace: tuple[str, ...], **options: Any) -> None:
    """Per-module forward and backward GPU time of TRACE (.json or .json.gz).

    Several traces, a directory or a glob pattern ('runs/*.pt.trace.json.gz') are the ranks of
    one distributed job: one report of every module across the ranks (docs/jobs.md)."""
    given = AnalyzeOptions(**options)
    single = _single_trace(trace)
    if single is None:
        _analyze_job(list(trace), given)  # the single-trace options were refused in _single_trace
    else:
        _analyze_trace(single, given)  # the job options were refused in _single_trace


def _single_trace(trace: tuple[str, ...]) -> str | None:
    """The one trace that TRACE names (a directory or pattern of one trace: that trace), or
    None for a job of several; fails when an option given does not apply to it."""
    from traceprof.read.discovery import one_trace

    single = one_trace(trace)  # a directory or pattern of one trace: that trace's own report
    job = single is None
    option = _misplaced_option(click.get_current_context(), job)
    if option is not None:
        applies = "one trace, not to a job of several" if job else "a job of several traces, not to one trace"
        if single is not None and single != trace[0]:  # a directory or pattern of one trace
            applies += f" ({trace[0]} holds one: {single})"
        fail(f"{option} applies to {applies} (docs/jobs.md)", USAGE_EXIT_CODE)
    return single


def _analyze_trace(trace: str, o: AnalyzeOptions) -> None:
    """``analyze`` of one trace: its module profile (or with --ops its ops)."""
    from traceprof import render
    from traceprof.api import analyze as analyze_api
    from traceprof.result.transforms import ignore_modules

    with reported_errors(f"{trace}: out of memory while analyzing"):
        renderer = chosen_renderer(render.REGISTRY, o.fmt, o.output, [trace])
        fmt = renderer.name
        reporter = progress_reporter(trace)
        try:
            profile = analyze_api(
                trace,
                step=o.step,
                hierarchy=o.hierarchy,
                depth=None if o.ops_module else o.depth,  # --ops: shaped in _ops_profile
                top=None if o.ops_module else o.top,  # --ops: its rows' (render_ops)
                sort="order" if o.ops_module else o.sort,
                progress=reporter,
                peak_tflops=o.peak_tflops,
                max_memory=o.max_memory,
                jobs=o.jobs,
            )
        finally:
            close(reporter)
        if o.ignore and not o.ops_module:
            profile = ignore_modules(profile, o.ignore)
        if o.columns is not None and fmt != "table":
            raise OptionError(f"--columns applies to --format table, not {fmt}")
        top_modules: dict[str, Any] = {"top_modules": o.top} if o.top is not None else {}  # else its default
        options = render.RenderOptions(
            raw_numbers=o.raw,
            unsupported_ops=o.unsupported_ops,
            batch_size=o.batch_size,
            columns=_parsed_columns(o.columns),
            **top_modules,
        )
        if o.all_rows and not o.ops_module:
            raise OptionError("--all applies to --ops and to a job (the rows without time of their text)")
        if o.ops_module:
            from traceprof.render.ops import render_ops

            shown = _ops_profile(profile, o.ops_module, o.depth, o.ignore)
            text = render_ops(shown, o.ops_module, fmt, o.raw, o.all_rows, top=o.top, sort=o.sort)
        else:
            text = render.REGISTRY.render(profile, fmt, options, encoded=True)
        if not renderer.shows_warnings:  # rows only (CSV, Parquet): warnings on stderr
            print_warnings(profile.warnings)
        emit(text, o.output, [trace], _styled if fmt in ("tree", "table") else None)
        if o.tensorboard_logdir:
            write_tensorboard(
                [trace], o.tensorboard_logdir, hierarchy=o.hierarchy, err=True, max_memory=o.max_memory
            )


def _parsed_columns(columns: str | None) -> tuple[str, ...] | None:
    if columns is None:
        return None
    from traceprof.render.table import parse_columns  # the table's module: only when it is asked for

    return parse_columns(columns)


def _ops_profile(
    profile: ModuleProfile, module: str, depth: int | None, ignore: tuple[str, ...]
) -> ModuleProfile:
    """The profile ``--ops`` reads: a module's rows are those of its whole subtree, whatever
    --depth and --ignore show of the tree, so the module is found in the whole profile; ``*``
    (every node's own rows) gives the rows of the nodes the tree shows."""
    from traceprof.render.ops import EVERY_NODE
    from traceprof.result.transforms import ignore_modules, limit_depth

    if module != EVERY_NODE:
        return profile
    if depth is not None:
        profile = limit_depth(profile, depth)
    return ignore_modules(profile, ignore) if ignore else profile


#: options of one trace's report, and of a job's: the others apply to both
SINGLE_TRACE_OPTIONS = (
    "batch_size",
    "unsupported_ops",
    "columns",
    "tensorboard_logdir",
    "ops_module",
)
JOB_OPTIONS = ("engine", "scheduler", "scheduler_timeout", "ranks_columns", "straggler_threshold")


def _misplaced_option(ctx: click.Context, job: bool) -> str | None:
    """The first option given on the command line (or by the environment) that does not apply
    to what TRACE names (a job, or one trace), as spelled in ``--help``."""
    for name in SINGLE_TRACE_OPTIONS if job else JOB_OPTIONS:
        source = ctx.get_parameter_source(name)
        if source is not None and source is not click.core.ParameterSource.DEFAULT:
            param = next(p for p in ctx.command.params if p.name == name)
            return max(param.opts, key=len)
    return None


def _styled(text: str) -> object:
    from traceprof.render.terminal import styled

    return styled(text)


def _analyze_job(traces: list[str], o: AnalyzeOptions) -> None:
    """``analyze`` of several traces, a directory or a glob: the job report."""
    from traceprof import render
    from traceprof.job.analyze import analyze_job
    from traceprof.job.runs import RUNS_NOTE
    from traceprof.read.discovery import find_traces

    with reported_errors("out of memory while analyzing the job"):
        paths = find_traces(traces)
        renderer = chosen_renderer(render.JOB_REGISTRY, o.fmt, o.output, paths)
        fmt = renderer.name
        reporter = job_progress(len(paths))
        try:
            job = analyze_job(
                paths,
                step=o.step,
                hierarchy=o.hierarchy,
                peak_tflops=o.peak_tflops,
                max_memory=o.max_memory,
                engine=o.engine,
                jobs=o.jobs,
                scheduler=o.scheduler,
                straggler_threshold=o.straggler_threshold,
                scheduler_timeout=o.scheduler_timeout,
                # a bar per trace: the per-item callback (done, total, item) analyze_job also
                # takes, besides the one-line Progress it declares (progress.per_item)
                progress=reporter,  # type: ignore[arg-type]
                newest_run=len(traces) == 1 and os.path.isdir(traces[0]),
            )
        finally:
            close(reporter)
        # the rows' shape: every format; modules without time left out of the text only
        job = job.shaped(
            depth=o.depth,
            top=o.top,
            sort=o.sort,
            ignore=o.ignore,
            all_rows=o.all_rows or fmt not in ("tree", "table"),
        )
        options = render.RenderOptions(raw_numbers=o.raw, ranks=o.ranks_columns)
        text = render.JOB_REGISTRY.render(job, fmt, options, encoded=True)
        # rows only (CSV, Parquet): every warning on stderr; else a partial job's and the runs
        # left out of a directory's there too, where a pipe reader sees them
        print_warnings(
            w
            for w in job.warnings
            if not renderer.shows_warnings or w.startswith("partial job") or RUNS_NOTE in w
        )
        emit(text, o.output, paths)
