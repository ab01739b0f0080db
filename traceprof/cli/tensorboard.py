"""``traceprof tensorboard TRACES --logdir DIR``: traces as runs of a TensorBoard log directory
(docs/tensorboard.md)."""

from __future__ import annotations

import shlex
import sys

import click

from traceprof.cli.common import (
    Number,
    hierarchy_option,
    max_memory_option,
    no_cache_option,
    peak_tflops_option,
    reported_errors,
    write_tensorboard,
)

#: printed by ``traceprof tensorboard``: what works without network access (docs/tensorboard.md)
OFFLINE_NOTE = (
    "note: the PyTorch Profiler tab (torch-tb-profiler) draws its charts with Google Charts, "
    "loaded from www.gstatic.com: it needs internet access. The traceprof tab needs none: module "
    "tree, ops and kernels per module, timeline of a step and memory curve, offline."
)


@click.command("tensorboard")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--logdir",
    required=True,
    type=click.Path(file_okay=False, path_type=str),
    help="TensorBoard log directory to add the runs to (created when missing).",
)
@click.option(
    "--name",
    default=None,
    help="Run name for one trace; parent of the runs for several [default: file names].",
)
@hierarchy_option()
@peak_tflops_option("Peak TFLOP/s of one device, for the MFU scalar (when the profile has FLOPs).")
@click.option("--serve", is_flag=True, help="Then start TensorBoard on 127.0.0.1 for LOGDIR.")
@click.option(
    "--port",
    type=Number(int, min=1, max=65535),
    default=None,
    help="Port for --serve [default: 6006 or the next free one].",
)
@click.option(
    "--tb-profiler",
    type=click.Choice(("auto", "always", "never")),
    default="auto",
    show_default=True,
    help="Which runs get a trace copy for the PyTorch Profiler tab: auto stops once the logdir "
    "holds 16 (TensorBoard loads each in a process of its own; docs/tensorboard.md).",
)
@max_memory_option()
@no_cache_option
def tensorboard_command(traces, logdir, name, hierarchy, peak_tflops, serve, port, tb_profiler, max_memory):
    """Write TRACES (files or directories) as runs of a TensorBoard log directory.

    One run per trace: the traceprof tab (module tree, icicle, ops and kernels per module,
    timeline of a step, memory; works offline), a copy of the trace for the PyTorch Profiler
    tab (torch-tb-profiler; its charts need internet access), scalars and a text summary. Existing runs are
    never overwritten. Needs the extra: pip install 'traceprof[tensorboard]'.
    """
    with reported_errors("out of memory while analyzing"):
        from traceprof.read.discovery import expand_patterns

        write_tensorboard(
            expand_patterns(traces),
            logdir,
            name=name,
            hierarchy=hierarchy,
            peak_flops=peak_tflops * 1e12 if peak_tflops else None,
            max_memory=max_memory,
            tb_profiler=tb_profiler,
        )
        click.echo(f"traceprof: {OFFLINE_NOTE}")
        if serve:
            from traceprof.tensorboard import serve as serve_logdir

            click.echo(
                "traceprof: starting TensorBoard on 127.0.0.1; open the traceprof tab (Ctrl-C stops it)"
            )
            sys.exit(serve_logdir(logdir, port))
        click.echo(f"view them: tensorboard --logdir {shlex.quote(logdir)} --host 127.0.0.1")
