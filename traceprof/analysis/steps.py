"""Step selection: the ``ProfilerStep#N`` intervals of a trace and which of them are analyzed.

:func:`find_steps` receives the trace and its links and returns its :class:`Steps` (one interval
per step number, and whether all the GPU work launched in it is in the trace);
:func:`select_steps` receives those and a step number (None: the mean over the complete steps)
and returns the positions of the selected steps, with warnings for an incomplete selection.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.analysis.link import Links
from traceprof.errors import OptionError
from traceprof.trace import schema
from traceprof.trace.columns import Trace, unique
from traceprof.trace.schema import Kind


class Steps(msgspec.Struct, frozen=True):
    """The trace's steps, one interval per step number, sorted by start."""

    numbers: np.ndarray  # int64, sorted by start
    start: np.ndarray
    end: np.ndarray
    complete: np.ndarray  # bool

    def of_time(self, t: np.ndarray) -> np.ndarray:
        """Position (into these arrays) of the step holding each time, -1 outside steps."""
        if len(self.numbers) == 0:
            return np.full(len(t), -1, np.int64)
        pos = np.searchsorted(self.start, t, side="right") - 1
        ok = pos >= 0
        ok[ok] &= t[ok] < self.end[pos[ok]]
        return np.where(ok, pos, -1)


def find_steps(trace: Trace, links: Links) -> Steps:
    ev = trace.events
    is_step_name = ev.named(lambda s: schema.STEP_RE.match(s) is not None)
    idx = np.flatnonzero((links.depth >= 0) & is_step_name) if len(ev) else np.zeros(0, int)
    numbers = np.array([schema.step_number(ev.names[ev.name[i]]) for i in idx], np.int64)
    # one event per step number (a step seen on several threads keeps its widest interval)
    uniq = unique(numbers)
    step_start, step_end = ev.ts[idx], ev.ts[idx] + ev.dur[idx]
    start = np.array([step_start[numbers == u].min() for u in uniq], np.float64)
    end = np.array([step_end[numbers == u].max() for u in uniq], np.float64)
    order = np.argsort(start, kind="stable")
    steps = Steps(uniq[order], start[order], end[order], np.ones(len(uniq), bool))
    if len(uniq) == 0:
        return steps
    # A step is incomplete when a launch made in it has no GPU work in the trace (the trace
    # stopped before the GPU finished, or the work was dropped).
    launch_names = np.array([bool(schema.LAUNCH_NAME_RE.match(s)) for s in ev.names])
    launches = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.correlation >= 0) & launch_names[ev.name])
    gpu_corr = unique(ev.correlation[links.gpu_work])
    if len(links.gpu_work):
        corr = ev.correlation[launches]
        at = np.minimum(np.searchsorted(gpu_corr, corr), len(gpu_corr) - 1)  # gpu_corr is sorted
        lost = launches[gpu_corr[at] != corr]  # no GPU work has their correlation
        bad = steps.of_time(ev.ts[lost])
        complete = steps.complete.copy()
        complete[bad[bad >= 0]] = False
        complete &= steps.end > steps.start
        steps = Steps(steps.numbers, steps.start, steps.end, complete)
    return steps


def select_steps(steps: Steps, step: int | None, path: str = "") -> tuple[np.ndarray, list[str]]:
    """Positions of the selected steps; empty array = the whole trace (no steps). ``path``: the
    trace's, the prefix of the error for a step not in it."""
    warnings: list[str] = []
    if step is not None:
        pos = np.flatnonzero(steps.numbers == step)
        if len(pos) == 0:
            have = ", ".join(map(str, steps.numbers.tolist())) or "none"
            where = f"{path}: " if path else ""
            raise OptionError(f"{where}step {step} is not in the trace (steps in the trace: {have})")
        if not steps.complete[pos[0]]:
            warnings.append(f"step {step} is incomplete: some of its GPU work is not in the trace")
        return pos, warnings
    if len(steps.numbers) == 0:
        return np.zeros(0, np.int64), warnings
    pos = np.flatnonzero(steps.complete)
    if len(pos) == 0:
        warnings.append("no complete step in the trace; using all steps")
        pos = np.arange(len(steps.numbers))
    return pos, warnings
