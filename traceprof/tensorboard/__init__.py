"""TensorBoard output: a log directory with one run per trace, and the traceprof plugin.

``write_logdir`` needs the ``tensorboard`` package (extra ``traceprof[tensorboard]``) only for
the event files; this package imports it lazily. The plugin (``plugin.py``) is loaded by
TensorBoard through the ``tensorboard_plugins`` entry point. See docs/tensorboard.md.
"""

from traceprof.tensorboard.logdir import MAX_STEP_PROFILES, RunInfo, collect_traces, write_logdir, write_run
from traceprof.tensorboard.serve import serve, tensorboard_argv

__all__ = [
    "MAX_STEP_PROFILES",
    "RunInfo",
    "collect_traces",
    "serve",
    "tensorboard_argv",
    "write_logdir",
    "write_run",
]
