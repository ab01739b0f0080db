"""Ctrl-C while the ``traceprof`` command is still loading its modules: one line and exit 130,
as an interrupt later in the command (``cli.run`` puts Python's own handling back once the
command starts). Imported first by the package; a no-op when the package is imported by
anything but the command (a script, a notebook, a worker process)."""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = b"traceprof: error: interrupted\n"


def _command_starting() -> bool:
    """The console script ``traceprof``, or ``python [options] -m traceprof``."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    argv = list(getattr(sys, "orig_argv", ()))
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
    return script == "traceprof" or module == "traceprof"


def _interrupted(signum: int, frame: object) -> None:
    os.write(2, INTERRUPTED)
    os._exit(128 + signum)


if _command_starting() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted)
