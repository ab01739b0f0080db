"""GPU timeline of one trace per step, for jobs: busy time, time in collectives (NCCL/RCCL
kernels), the part of it not hidden behind compute, and idle time. A stage beside attribution:
it reads the Trace's event table only, and its result is a few numbers per step (what a job
needs per rank).

A step's GPU work is the work launched in it (its launch's correlation id, the launch inside the
``ProfilerStep#N`` slice on the CPU); work whose launch is not in the trace belongs to the step
its launch time would be, its own start. The step's GPU window runs from the step's start on the
CPU to the end of the later of the step and its last GPU work; idle time is the window minus GPU
busy time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceprof.result.step_times import StepTimeline
from traceprof.trace import schema
from traceprof.trace.columns import Trace, unique
from traceprof.trace.schema import Kind


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of the intervals [start, end)."""
    if len(start) == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return float(np.sum(reach[last] - s[first]))


def collective_names(names: Sequence[str]) -> np.ndarray:
    """Per name code: is it a collective kernel (schema.COLLECTIVE_KERNEL_RE)."""
    return np.array([bool(schema.COLLECTIVE_KERNEL_RE.match(n)) for n in names] or [False])


def step_timelines(trace: Trace) -> tuple[StepTimeline, ...]:
    """The GPU timeline of every ``ProfilerStep`` of the trace, in step order (one entry with
    step -1 for a trace without steps)."""
    ev = trace.events
    if len(ev) == 0:
        return ()
    # steps: ProfilerStep slices on CPU threads, widest interval per number
    is_step = ev.named(lambda n: schema.STEP_RE.match(n) is not None)
    cpu_kind = np.isin(ev.kind, schema.CPU_SLICE_KINDS)
    idx = np.flatnonzero(cpu_kind & is_step)
    numbers = np.array([schema.step_number(ev.names[ev.name[i]]) for i in idx], np.int64)
    uniq = unique(numbers)
    start = np.array([ev.ts[idx[numbers == u]].min() for u in uniq], np.float64)
    end = np.array([(ev.ts + ev.dur)[idx[numbers == u]].max() for u in uniq], np.float64)
    order = np.argsort(start, kind="stable")
    uniq, start, end = uniq[order], start[order], end[order]

    work = np.flatnonzero(np.isin(ev.kind, schema.GPU_WORK_KINDS))
    ws, we = ev.ts[work], ev.ts[work] + ev.dur[work]
    collective = collective_names(ev.names)[ev.name[work]] & (ev.kind[work] == Kind.KERNEL)
    if len(uniq) == 0:
        lo = float(min(ev.ts.min(), ws.min() if len(ws) else np.inf))
        hi = float(max((ev.ts + ev.dur).max(), we.max() if len(we) else -np.inf))
        return (_timeline(-1, hi - lo, hi - lo, ws, we, collective),)

    # the time each work item was launched (its launch's start), else its own start
    launch_time = ws.copy()
    launches = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.correlation >= 0))
    if len(launches) and len(work):
        corr = ev.correlation[launches]
        by_corr = np.argsort(corr, kind="stable")
        corr_sorted = corr[by_corr]
        wc = ev.correlation[work]
        pos = np.clip(np.searchsorted(corr_sorted, wc), 0, len(corr_sorted) - 1)
        found = (wc >= 0) & (corr_sorted[pos] == wc)
        launch_time[found] = ev.ts[launches[by_corr[pos[found]]]]
    step_of = np.searchsorted(start, launch_time, side="right") - 1
    inside = step_of >= 0
    inside[inside] &= launch_time[inside] < end[step_of[inside]]
    step_of[~inside] = -1

    out = []
    for i, number in enumerate(uniq.tolist()):
        m = step_of == i
        window_end = max(float(end[i]), float(we[m].max()) if m.any() else -np.inf)
        out.append(
            _timeline(
                int(number),
                float(end[i] - start[i]),
                window_end - float(start[i]),
                ws[m],
                we[m],
                collective[m],
            )
        )
    return tuple(out)


def _timeline(
    step: int, wall: float, window: float, ws: np.ndarray, we: np.ndarray, collective: np.ndarray
) -> StepTimeline:
    busy = union_length(ws, we)
    compute = union_length(ws[~collective], we[~collective])
    coll = union_length(ws[collective], we[collective])
    return StepTimeline(
        step=step,
        wall_us=wall,
        window_us=window,
        gpu_busy_us=busy,
        compute_us=compute,
        collective_us=coll,
        collective_exposed_us=busy - compute,
        idle_us=max(window - busy, 0.0),
        kernels=len(ws),
        collective_kernels=int(collective.sum()),
    )
