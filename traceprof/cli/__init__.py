"""The ``traceprof`` command line: a click group with one module per command (analyze, diff,
tensorboard, cache) and their shared helpers in :mod:`traceprof.cli.common`. Each command turns its
options into one API call and prints or writes the result."""

from __future__ import annotations

import os
import sys

import click

from traceprof.cli.analyze import analyze
from traceprof.cli.cache import cache_command
from traceprof.cli.common import show_cache_warnings, stop_cleanly_on_sigterm
from traceprof.cli.diff import diff_command
from traceprof.cli.tensorboard import tensorboard_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="traceprof")
def main() -> None:
    """Per-nn.Module GPU time, forward and backward, from PyTorch profiler traces."""
    stop_cleanly_on_sigterm()
    show_cache_warnings()


#: the commands, in the order of ``traceprof --help``
for command in (analyze, tensorboard_command, diff_command, cache_command):
    main.add_command(command)


def run() -> None:
    """The ``traceprof`` command (the console script and ``python -m traceprof``): :func:`main`,
    then the exit handlers (``atexit``), then the process ends with the command's exit status
    as soon as its output is flushed. Tearing the interpreter down module by module and object
    by object took about 20 ms of every command, for memory the process gives back anyway.
    Calling :func:`main` itself (as click's test runner does) is unchanged."""
    code: str | int | None
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"), as the interpreter would say it
        print(code, file=sys.stderr)
        code = 1
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to write
            pass
    os._exit(code & 0xFF)
