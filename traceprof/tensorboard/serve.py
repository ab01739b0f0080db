"""Start TensorBoard on 127.0.0.1 for a log directory (``traceprof tensorboard --serve``)."""

from __future__ import annotations

import os
import subprocess
import sys

from traceprof.tensorboard.events import require_tensorboard

HOST = "127.0.0.1"


def tensorboard_argv(logdir: str, port: int | None = None) -> list[str]:
    """The command line that serves ``logdir`` on 127.0.0.1 (this Python's tensorboard)."""
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir", os.fspath(logdir), "--host", HOST]
    if port is not None:
        argv += ["--port", str(port)]
    return argv


def serve(logdir: str, port: int | None = None) -> int:
    """Run TensorBoard in the foreground until it stops (Ctrl-C); its exit status.

    On POSIX the process becomes TensorBoard (exec), so signals reach it directly and no child
    is left behind. Without ``port``, TensorBoard takes 6006 or the next free port.
    """
    require_tensorboard()
    argv = tensorboard_argv(logdir, port)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(argv[0], argv)  # does not return
    try:
        return subprocess.call(argv)
    except KeyboardInterrupt:
        return 130
