"""``traceprof diff BASE NEW``: the command line of :func:`traceprof.diff` (docs/diff.md)."""

from __future__ import annotations

import os
import sys

import click

from traceprof import units
from traceprof.cli import common
from traceprof.cli.choices import DIFF_FORMATS
from traceprof.errors import OptionError


@click.command("diff")
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@common.output_options(
    DIFF_FORMATS,
    "Write to FILE (atomically; '-' is standard output); the format "
    "follows its extension (.txt, .json, .csv, .parquet, .html). Never an input.",
)
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=common.Number(float, min=0),
    default=None,
    metavar="PCT",
    help="Exit 10 when NEW is slower than BASE by more than PCT percent "
    "(the step's wall time, or --module's time).",
)
@click.option(
    "--module",
    "module",
    default=None,
    metavar="NAME",
    help="With --fail-if-slower: compare this module (qualified name) instead of the step.",
)
@common.hierarchy_option("Where the module trees come from.")
@common.depth_option()
@common.top_option(
    "Keep the N children of each node that changed most (by --sort's key); fold the rest into one '(k more)' node."
)
@common.sort_option(
    "Order of siblings: the size of the change (|Δ|, largest first) of the key's quantity "
    "(gpu: the diff's time, GPU busy or CPU; fwd, bwd, other: that pass's; kernels, calls, "
    "flops), or name, or order (as the modules first ran).",
    default="gpu",
)
@common.step_option(
    "Compare this ProfilerStep of each trace (the same number in both; of every rank for job "
    "directories) [default: the mean of each trace's complete steps]."
)
@common.ignore_option(
    "Hide modules whose class or qualified name matches PATTERN (fnmatch, repeatable); their "
    "change stays in their parent's."
)
@common.raw_option("Times as plain microseconds.")
@common.tensorboard_option("Also write BASE and NEW as a pair of TensorBoard runs (LOGDIR/base, LOGDIR/new).")
@common.max_memory_option("Memory limit of loading each trace (e.g. 8G) [default: as analyze].")
@common.no_cache_option
def diff_command(
    base,
    new,
    fmt,
    output,
    fail_pct,
    module,
    hierarchy,
    depth,
    top,
    sort,
    step,
    ignore,
    raw,
    tensorboard_logdir,
    max_memory,
):
    """Which module got slower between BASE and NEW (trace files, or two job directories), and
    what changed inside it. Exit 10 with --fail-if-slower when NEW is slower than allowed."""
    from traceprof.render.diff import DIFF_REGISTRY
    from traceprof.render.registry import RenderOptions

    inputs = [base, new]
    with common.reported_errors("out of memory while comparing"):
        if module is not None and fail_pct is None:
            raise OptionError("--module applies to --fail-if-slower")
        renderer = common.chosen_renderer(DIFF_REGISTRY, fmt, output, inputs)
        reporter = common.progress_reporter(_files(inputs), traces=None)
        try:
            result = _diff(base, new, hierarchy, max_memory, step, reporter)
        finally:
            common.close(reporter)
        if module is not None:
            result.slower(fail_pct, module)  # an unknown module: the error before any output
        shown = result.shaped(depth=depth, top=top, sort=sort, ignore=ignore)
        text = renderer.render(shown, RenderOptions(raw_numbers=raw))
        if not renderer.shows_warnings:
            common.print_warnings(shown.warnings)
        common.emit(text, output, inputs, _styled if renderer.name == "tree" else None)
        if tensorboard_logdir:
            from traceprof.tensorboard import write_logdir

            said = []  # warnings of write_logdir
            for label, path in (("base", base), ("new", new)):
                for run in write_logdir(
                    [path],
                    tensorboard_logdir,
                    name=label,
                    hierarchy=hierarchy,
                    max_memory=max_memory,
                    warnings=said,
                ):
                    click.echo(
                        f"traceprof: wrote TensorBoard run {run.name} ({run.trace_path}) "
                        f"to {tensorboard_logdir}",
                        err=True,
                    )
            common.print_warnings(said)
        if fail_pct is not None:
            reason = result.slower(fail_pct, module)
            if reason:
                click.echo(f"traceprof: slower: {units.printable(reason)}", err=True)
                from traceprof.compare.diff import SLOWER_EXIT_CODE

                sys.exit(SLOWER_EXIT_CODE)


def _files(inputs: list[str]) -> list[str]:
    """The files compared, for the progress bar's size test: the traces, or a job's traces."""
    from traceprof.errors import TraceprofError
    from traceprof.read.discovery import find_traces

    try:
        return find_traces(inputs)
    except TraceprofError:
        return []  # the diff says what is wrong with them


def _diff(base: str, new: str, hierarchy, max_memory, step, progress):
    from traceprof.compare.diff import diff, diff_jobs

    dirs = [os.path.isdir(p) for p in (base, new)]
    if all(dirs):
        return diff_jobs(base, new, hierarchy=hierarchy, max_memory=max_memory, step=step, progress=progress)
    if any(dirs):
        raise OptionError(
            f"{base if dirs[0] else new}: a directory compared with a file; give "
            "two trace files or two job directories"
        )
    return diff(
        base,
        new,
        hierarchy=None if hierarchy == "auto" else hierarchy,
        max_memory=max_memory,
        step=step,
        progress=progress,
    )


def _styled(text: str) -> object:
    from traceprof.render.diff_terminal import styled

    return styled(text)
