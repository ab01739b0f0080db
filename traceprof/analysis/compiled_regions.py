"""Compiled regions and graph replays whose work has no module information: named, never silent.

A trace of a ``torch.compile``d model runs each compiled graph as one scope
(``Torch-Compiled Region: <frame>/<n>`` in the forward, ``CompiledFunctionBackward`` in the
backward); the kernels inside it carry no module scope, so without traceprof's compiled-kernel
table they land on the module around the region (the root when the whole model is compiled),
or in ``(not in any module)``. A CUDA / HIP graph replay is one launch (``cudaGraphLaunch``,
``hipGraphLaunch``) whose kernels all come from it. :func:`compiled_work_warnings` receives the
attributed CPU time and GPU work of the selection and returns one warning for each kind, with
its share of the step (GPU busy time, or CPU time on a trace without GPU work), the number of
regions, graphs and launches, the forward / backward split and the kernel families
(``schema.KERNEL_FAMILIES``), so the reader knows how much of the tree is not broken down
by module, and why. Work the compiled-kernel table attributed (``attributed``) is left out.
"""

from __future__ import annotations

import numpy as np

from traceprof.analysis.classify import Context
from traceprof.analysis.cpu_time import CpuTime
from traceprof.analysis.gpu_work import GpuWork
from traceprof.result.model import StepSelection
from traceprof.trace import schema

#: the smallest share of the step worth a warning
WARN_SHARE = 0.01


def _counted(n: int, noun: str, plural: str | None = None) -> str:
    from traceprof import units

    return f"{units.count(n)} {noun if n == 1 else plural or noun + 's'}"


def kernel_families(names: list[str]) -> list[str]:
    """The family of each kernel name (``schema.KERNEL_FAMILIES``; ``other`` when none fits)."""
    out = []
    for name in names:
        for family, pattern in schema.KERNEL_FAMILIES:
            if pattern.search(name):
                out.append(family)
                break
        else:
            out.append(schema.OTHER_KERNEL_FAMILY)
    return out


def _families_text(names: list[str], weights: np.ndarray, total: float) -> str:
    """``pointwise 40%, GEMM/extern 35%, ...``: the families of ``names``, largest first."""
    from traceprof import units

    share: dict[str, float] = {}
    for family, w in zip(kernel_families(names), weights.tolist()):
        share[family] = share.get(family, 0.0) + w
    ranked = sorted(share.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{family} {units.percent(w / total)}" for family, w in ranked if w > 0)


def compiled_work_warnings(
    ctx: Context,
    cpu: CpuTime,
    gpu: GpuWork,
    selection: StepSelection,
    attributed: np.ndarray | None = None,
) -> list[str]:
    """A warning for the compiled regions' work without module information, and one for the
    kernels of graph replays, when either is at least WARN_SHARE of the step. ``attributed``:
    per event, whether the compiled-kernel table gave it a module (such work is left out)."""
    from traceprof import units  # warnings are text: numbers formatted in the one place

    ev, links = ctx.trace.events, ctx.links
    names, codes = ev.names, ev.name
    is_region = ev.named(lambda n: n.startswith(schema.COMPILED_REGION_PREFIX))
    is_backward = ev.named(lambda n: n == schema.COMPILED_BACKWARD_NAME)
    if not (is_region.any() or is_backward.any() or schema.GRAPH_LAUNCH_NAMES & set(names)):
        return []
    region = links.nearest(is_region | is_backward)  # the innermost compiled scope, -1: none
    out: list[str] = []
    has_gpu = len(gpu.work) > 0 and selection.gpu_busy_us > 0
    n = ctx.n_steps

    # the compiled regions' work, on the GPU (through each item's anchor) or the CPU
    if has_gpu:
        anchor = np.maximum(gpu.anchor, 0)
        inside = (gpu.anchor >= 0) & (region[anchor] >= 0)
        if attributed is not None:
            inside &= ~attributed[anchor]
        weight, total, what = gpu.busy_us[inside], selection.gpu_busy_us * n, "GPU busy time"
        owner = region[anchor[inside]]
        kernels = [names[c] for c in codes[gpu.work[inside]].tolist()]
    else:
        inside = region[cpu.events] >= 0
        if attributed is not None:
            inside &= ~attributed[cpu.events]
        weight, total, what = cpu.exclusive_us[inside], selection.cpu_us * n, "CPU time"
        owner = region[cpu.events[inside]]
        # on CPUs the kernels are the events themselves (Inductor's C++ kernels, extern ops)
        kernels = [names[c] for c in codes[cpu.events[inside]].tolist()]
    share = float(weight.sum()) / total if total > 0 else 0.0
    if share >= WARN_SHARE:
        backward = is_backward[owner]
        bwd_share = float(weight[backward].sum()) / total
        runs = np.unique(owner)
        bwd_runs = int(is_backward[runs].sum())
        frames = len({names[c] for c in codes[runs[~is_backward[runs]]].tolist()})
        of_frames = f" of {_counted(frames, 'compiled frame')}" if frames else ""
        out.append(
            f"{units.percent(share)} of the step's {what} ran in compiled regions "
            f"({units.count(len(runs) - bwd_runs)} forward runs{of_frames}, "
            f"{units.count(bwd_runs)} backward runs; forward "
            f"{units.percent(share - bwd_share)}, backward {units.percent(bwd_share)}) without "
            f"module information: it sits on the module around each region, not on its "
            f"submodules. Kernels: {_families_text(kernels, weight, total)}. Capture with "
            "traceprof.capture.profile, which records the compiled-kernel table "
            "(docs/capture.md)"
        )

    # graph replays: every kernel of a captured graph comes from one launch
    if has_gpu:
        from_graph = ev.named(lambda nm: nm in schema.GRAPH_LAUNCH_NAMES)
        # the launching runtime call of each item of the selection (its anchor may be the op)
        item_launch = links.launch[np.searchsorted(links.gpu_work, gpu.work)]
        replayed = (item_launch >= 0) & from_graph[np.maximum(item_launch, 0)]
        weight = gpu.busy_us[replayed]
        share = float(weight.sum()) / (selection.gpu_busy_us * n)
        if share >= WARN_SHARE:
            launches = len(np.unique(item_launch[replayed]))
            spelled = sorted({names[c] for c in codes[item_launch[replayed]].tolist()})
            kernels = [names[c] for c in codes[gpu.work[replayed]].tolist()]
            out.append(
                f"{units.percent(share)} of the step's GPU busy time is "
                f"{units.count(int(replayed.sum()))} kernels replayed from "
                f"{_counted(launches, 'graph launch', 'graph launches')} ({', '.join(spelled)}): the graph's "
                f"capture is not in the trace, so they sit on the module or group around each "
                f"launch. Kernels: {_families_text(kernels, weight, selection.gpu_busy_us * n)}"
            )
    return out
