"""Ctrl-C or SIGTERM while the ``traceprof`` command is still loading its modules: one line and
exit 130 or 143, as later in the command (``cli.run`` puts Python's own handling of Ctrl-C back
once the command starts, and the command its own of SIGTERM). Imported first by the package; a
no-op when the package is imported by anything but the command (a script, a notebook, a worker
process)."""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = b"traceprof: error: interrupted\n"
TERMINATED = b"traceprof: error: terminated\n"


def _command_starting() -> bool:
    """The console script ``traceprof``, or ``python [options] -m traceprof``."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    argv = list(getattr(sys, "orig_argv", ()))
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
    return script == "traceprof" or module == "traceprof"


def interrupted_at_start(signum: int, frame: object) -> None:
    """One line, and the shells' status (130, 143), before the command handles signals itself."""
    os.write(2, TERMINATED if signum == signal.SIGTERM else INTERRUPTED)
    os._exit(128 + signum)


if _command_starting():
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, interrupted_at_start)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # before: the process ended silently
        signal.signal(signal.SIGTERM, interrupted_at_start)
