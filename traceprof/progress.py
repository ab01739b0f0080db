"""What a long call says while it runs: one callback type for :func:`traceprof.analyze`,
:func:`traceprof.analyze_job` and :func:`traceprof.diff`.

A :data:`Progress` is called with one line of text each time the call moves on: a trace's
stages (``reading``, ``decoding``, ``indexing``, ``attributing``), a diff's ``comparing``, a
job's traces one by one (``analyzed rank3.pt.trace.json.gz (4 of 8)``). ``print`` is one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: called with what the call is doing or has just done, one line of text
Progress = Callable[[str], None]
#: called as each item of a map is done: (items done, items in all, the item just done); the
#: engines' interface (traceprof.engine), and the callback analyze_job took before Progress
ItemProgress = Callable[[int, int, Any], None]


def per_item(progress: Progress | ItemProgress | None) -> ItemProgress | None:
    """An engine's per-item callback that reports to ``progress``: one line per item done,
    ``analyzed NAME (DONE of TOTAL)`` (an item is a path, or a tuple whose first element is
    one). A callback with three required positional parameters is the earlier style,
    ``progress(done, total, item)``, and is called so."""
    if progress is None:
        return None
    if _takes_counts(progress):
        return progress  # type: ignore[return-value]
    say: Progress = progress  # type: ignore[assignment]

    def report(done: int, total: int, item: Any) -> None:
        path = item[0] if isinstance(item, tuple) else item
        say(f"analyzed {os.path.basename(str(path))} ({done} of {total})")

    return report


def _takes_counts(callback: Callable[..., Any]) -> bool:
    import inspect  # only for a job's callback

    try:
        parameters = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature (print): one line of text
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in parameters if p.kind in positional and p.default is inspect.Parameter.empty]
    return len(required) >= 3
