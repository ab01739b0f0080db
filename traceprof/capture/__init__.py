"""Capture PyTorch profiler traces that carry traceprof's module scopes and module table.

``profile`` wraps a training or inference loop (``with profile(model, logdir=...) as prof:``
... ``prof.step()``); ``profile_once`` profiles a single call. ``prof.analyze()`` and
``prof.report(depth=...)`` (and the same methods of the path ``profile_once`` returns) give the
``ModuleProfile`` of the trace written and print its module tree. Both work with compiled models
(``torch.compile(model)``, ``model.compile()``, blocks compiled one by one): the compiled-kernel
table of ``traceprof.capture.compiled`` says which module each kernel of their graphs works for.
What they write into a trace is described in ``docs/trace-conventions.md``.

This package is the only part of traceprof that uses torch, and it imports torch only when a
session starts: importing ``traceprof.capture`` does not import torch.
"""

from __future__ import annotations

from traceprof.capture.module_table import decode_table
from traceprof.capture.session import CapturedTrace, profile, profile_once

__all__ = ["CapturedTrace", "decode_table", "profile", "profile_once"]
