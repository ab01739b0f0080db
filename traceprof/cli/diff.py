"""``traceprof diff BASE NEW``: the command line of :func:`traceprof.diff` (docs/diff.md)."""

from __future__ import annotations

import os
import sys

import click

from traceprof.cli.common import color_terminal, fail, interrupted
from traceprof.errors import OptionError, TraceprofError

_FORMATS = ["csv", "html", "json", "parquet", "tree"]


@click.command("diff")
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(_FORMATS),
    default=None,
    help="Output format [default: from -o's extension, else tree].",
)
@click.option(
    "-o",
    "--output",
    metavar="FILE",  # checked by output.resolve_output
    default=None,
    help="Write to FILE (atomically; '-' is standard output); the format "
    "follows its extension (.txt, .json, .csv, .parquet, .html). Never an input.",
)
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(min=0),
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
@click.option(
    "--hierarchy",
    type=click.Choice(["auto", "traceprof", "lightning", "nn.Module", "annotations"]),
    default="auto",
    show_default=True,
    help="Where the module trees come from.",
)
@click.option("--raw", is_flag=True, help="Times as plain microseconds.")
@click.option(
    "--tensorboard",
    "tensorboard_logdir",
    metavar="LOGDIR",
    default=None,
    type=click.Path(file_okay=False, path_type=str),
    help="Also write BASE and NEW as a pair of TensorBoard runs (LOGDIR/base, LOGDIR/new).",
)
@click.option(
    "--max-memory",
    default=None,
    metavar="SIZE",
    help="Memory limit of loading each trace (e.g. 8G) [default: as analyze].",
)
def diff_command(base, new, fmt, output, fail_pct, module, hierarchy, raw, tensorboard_logdir, max_memory):
    """Which module got slower between BASE and NEW (trace files, or two job directories), and
    what changed inside it. Exit 10 with --fail-if-slower when NEW is slower than allowed."""
    from traceprof.output import STDOUT, check_binary_output, resolve_output, write_output
    from traceprof.render.diff import DIFF_REGISTRY, get_diff, render_diff
    from traceprof.render.registry import RenderOptions

    inputs = [base, new]
    try:
        if module is not None and fail_pct is None:
            raise OptionError("--module applies to --fail-if-slower")
        if output:
            resolve_output(output, inputs=inputs)
        if fmt is None:
            chosen = DIFF_REGISTRY.for_output(output) if output else None
            fmt = chosen.name if chosen else "tree"
        renderer = get_diff(fmt)
        if renderer.binary:
            check_binary_output(fmt, output)
        result = _diff(base, new, hierarchy, max_memory)
        if module is not None:
            result.slower(fail_pct, module)  # an unknown module: the error before any output
        text = render_diff(result, fmt, RenderOptions(raw_numbers=raw))
        if not renderer.shows_warnings:
            for warning in result.warnings:
                click.echo(f"traceprof: warning: {warning}", err=True)
        if isinstance(text, bytes) or (output and output != STDOUT):
            write_output(output, text, inputs=inputs)
        elif fmt == "tree" and color_terminal():
            from rich.console import Console

            from traceprof.render.diff_terminal import styled

            Console(highlight=False, soft_wrap=True).print(styled(text), end="")
        else:
            click.echo(text, nl=False)
        if tensorboard_logdir:
            from traceprof.tensorboard import write_logdir

            for label, path in (("base", base), ("new", new)):
                for run in write_logdir(
                    [path], tensorboard_logdir, name=label, hierarchy=hierarchy, max_memory=max_memory
                ):
                    click.echo(
                        f"traceprof: wrote TensorBoard run {run.name} ({run.trace_path}) "
                        f"to {tensorboard_logdir}",
                        err=True,
                    )
        if fail_pct is not None:
            reason = result.slower(fail_pct, module)
            if reason:
                click.echo(f"traceprof: slower: {reason}", err=True)
                from traceprof.compare.diff import SLOWER_EXIT_CODE

                sys.exit(SLOWER_EXIT_CODE)
    except TraceprofError as e:
        fail(e.message, e.exit_code)
    except MemoryError:
        fail("out of memory while comparing", 5)
    except KeyboardInterrupt as e:
        interrupted(e)


def _diff(base: str, new: str, hierarchy, max_memory):
    from traceprof.compare.diff import diff, diff_jobs

    dirs = [os.path.isdir(p) for p in (base, new)]
    if all(dirs):
        return diff_jobs(base, new, hierarchy=hierarchy, max_memory=max_memory)
    if any(dirs):
        raise OptionError(
            f"{base if dirs[0] else new}: a directory compared with a file; give "
            "two trace files or two job directories"
        )
    return diff(base, new, hierarchy=None if hierarchy == "auto" else hierarchy, max_memory=max_memory)
