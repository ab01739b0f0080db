"""The ``traceprof`` command line: a click group with one module per command (analyze, diff,
tensorboard, cache) and their shared helpers in :mod:`traceprof.cli.common`. Each command turns its
options into one API call and prints or writes the result."""

from __future__ import annotations

import gc
import os
import signal
import sys

import click

from traceprof.cli.analyze import analyze
from traceprof.cli.cache import cache_command
from traceprof.cli.common import Group, interrupted, show_cache_warnings, stop_cleanly_on_sigterm
from traceprof.cli.diff import diff_command
from traceprof.cli.tensorboard import tensorboard_command
from traceprof.version import __version__


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__)  # not package_name=: importlib.metadata costs 10 to 20 ms
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
    # what the imports made (modules, classes, functions: most of the objects alive) lives as
    # long as the process: out of the cyclic collector's reach, its passes during the command no
    # longer scan it again and again (a job's second look: 0.34 s -> 0.30 s)
    gc.freeze()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        # Ctrl-C is KeyboardInterrupt again, whatever the start-up set (one line, exit 130)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # not standalone: Ctrl-C or SIGTERM before a command's own handling (while its options
        # are read) is "interrupted" with the shells' status, not click's "Aborted!" and 1
        result = main.main(standalone_mode=False)
        code = result if type(result) is int else 0  # an exit code (ctx.exit), else success
    except click.Abort as e:
        code = _interrupted_code(
            e.__cause__ if isinstance(e.__cause__, KeyboardInterrupt) else KeyboardInterrupt()
        )
    except click.ClickException as e:
        e.show()
        code = e.exit_code
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt as e:
        code = _interrupted_code(e)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"), as the interpreter would say it
        print(code, file=sys.stderr)
        code = 1
    import atexit

    if code in (130, 128 + signal.SIGTERM):
        # interrupted: what was being started (a Dask cluster) may fail to close; the command
        # has said "interrupted", and the exit handlers' tracebacks and logs would bury it
        import logging

        sys.unraisablehook = lambda _unraisable: None
        logging.disable(logging.CRITICAL)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to write
            pass
    os._exit(code & 0xFF)


def _interrupted_code(e: KeyboardInterrupt) -> int:
    """Ctrl-C or SIGTERM outside a command's handling: said in one line, the shells' status."""
    try:
        interrupted(e)
    except SystemExit as exit:
        return int(exit.code or 0)
    return 130  # pragma: no cover - interrupted() always exits
