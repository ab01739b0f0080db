"""The "not in any module" groups: where the work outside every module goes.

Work outside the modules (an event classified to no node, GPU work without a launch) is grouped
by the name of its top-level op or annotation, one group node each, under the bucket node
:data:`~traceprof.result.model.UNATTRIBUTED_NAME`. :class:`Groups` receives the
:class:`~traceprof.analysis.classify.Context` and numbers the groups after the module nodes and
the bucket; :func:`group_unattributed` gives every unclassified CPU slice, GPU work item and op
its group (in place); :func:`unattributed_gpu_warnings` returns the warnings for GPU work that
reached no CPU event.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.counted_ops import Ops
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.analysis.labels import BETWEEN_OPS_GROUP
from traceprof.result.model import UNATTRIBUTED_NAME, StepSelection

#: GPU work attributed to no CPU event above this share of the step's GPU busy time is a warning
UNATTRIBUTED_GPU_WARN_SHARE = 0.01
#: "(not in any module)" groups of GPU work whose launch is not in the trace
LAUNCHED_BEFORE_TRACE = "(launched before the trace)"
LAUNCH_NOT_IN_TRACE = "(launch not in trace)"


class Groups:
    """The "not in any module" groups: one node per top-level op or annotation name, numbered
    after the module nodes and the bucket in the order they are first met."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.n_modules = len(ctx.tree.nodes)
        self.bucket = self.n_modules
        self.ids: dict[str, int] = {}

    def of(self, anchors: np.ndarray, missing: str = LAUNCH_NOT_IN_TRACE) -> np.ndarray:
        """The group node of each event, by the name of its top-level op or annotation."""
        ctx, ev = self.ctx, self.ctx.trace.events
        tops = np.where(anchors >= 0, ctx.top[np.maximum(anchors, 0)], -1)
        uniq, inverse = np.unique(tops, return_inverse=True)
        # the label of each top as a code: its name's, or one past the names for the others
        names, n = ev.names, len(ev.names)
        others = (missing, BETWEEN_OPS_GROUP, "(Python code)")
        t = np.maximum(uniq, 0)
        code = np.select([uniq < 0, ctx.is_step[t], ctx.is_python[t]], [n, n + 1, n + 2], ev.name[t])
        codes, first, of_code = np.unique(code, return_index=True, return_inverse=True)
        ids = np.empty(len(codes), np.int64)
        for k in np.argsort(first).tolist():  # numbered in the order of the tops
            c = int(codes[k])
            label = names[c] if c < n else others[c - n]
            ids[k] = self.ids.setdefault(label, self.n_modules + 1 + len(self.ids))
        return ids[of_code.ravel()][inverse.ravel()]

    @property
    def n_nodes(self) -> int:
        return self.n_modules + 1 + len(self.ids)

    def names(self) -> dict[int, str]:
        return {v: k for k, v in self.ids.items()}


def group_unattributed(groups: Groups, cpu: CpuTime, gpu: GpuWork, counted: Ops, unsupported: Ops) -> None:
    """Put every event outside the modules into its "not in any module" group (in place)."""
    cpu.node[cpu.node < 0] = groups.of(cpu.events[cpu.node < 0])
    gpu.node[gpu.before_trace] = groups.of(gpu.anchor[gpu.before_trace], LAUNCHED_BEFORE_TRACE)
    gpu.node[gpu.node < 0] = groups.of(gpu.anchor[gpu.node < 0])
    counted.node[counted.node < 0] = groups.of(counted.events[counted.node < 0])
    unsupported.node[unsupported.node < 0] = groups.of(unsupported.events[unsupported.node < 0])


def unattributed_gpu_warnings(sel: StepSelection, n_before: int, n_missing: int, n_work: int) -> list[str]:
    """A warning for each kind of GPU work attributed to no CPU event, when its share of the
    step's GPU busy time is above UNATTRIBUTED_GPU_WARN_SHARE."""
    from traceprof import units  # warnings are text: numbers formatted in the one place

    out: list[str] = []
    if sel.gpu_busy_us <= 0:
        return out
    for us, count, group, reason in (
        (
            sel.gpu_launched_before_trace_us,
            n_before,
            LAUNCHED_BEFORE_TRACE,
            "launched before the trace began (correlation ids below the first launch in the trace: "
            "the profiler's CPU window opened after the launches)",
        ),
        (
            sel.gpu_launch_missing_us,
            n_missing,
            LAUNCH_NOT_IN_TRACE,
            "has no launch in the trace (no runtime call with its correlation id)",
        ),
    ):
        share = us / sel.gpu_busy_us
        if share > UNATTRIBUTED_GPU_WARN_SHARE:
            out.append(
                f"{units.percent(share)} of the step's GPU busy time ({units.duration(us)} per "
                f"step; {units.count(count)} of the {units.count(n_work)} GPU work items of the "
                f"selected steps) "
                f"{reason}: counted in the step's GPU time, attributed to no module, under "
                f"{UNATTRIBUTED_NAME}/{group} in the other pass"
            )
    return out
