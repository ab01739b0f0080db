"""Scalars and the text summary of a run, in TensorBoard's own event files (Scalars, Text tabs).

Written with tensorboard's framework-free event writer and protos (no TensorFlow, no torch). The
values come from traceprof's JSON profile documents (render/json_format.py), so fields that
other code adds there (FLOPs) are used when present.

Tags (all values per step, x axis = ProfilerStep number; 0 for a trace without steps):

- ``<metric>/step``: the step's GPU busy time (``gpu_busy_us``; ``cpu_us`` on CPU-only traces),
  and ``wall_us/step``, ``cpu_us/step``, ``kernels/step``;
- ``<metric>/<module>``: the time of the largest modules (down to depth 2), all passes, tagged
  with the module's full qualified name, not a short display name: TensorBoard draws the runs
  of one tag in one chart, so a tag must name the same module in every run, and a short name
  depends on which other modules a run lists (``self`` in one run, ``attention.self`` in
  another) and is not unique (``Linear_0`` under two parents); depth 2 keeps the names short;
- ``tflops/step`` and ``mfu/step``: achieved FLOP/s (FLOPs over the step's GPU busy time, CPU time
  on CPU-only traces) and that over the device's peak (the profile's, or ``peak_flops``), when
  the profile has FLOPs and, for MFU, a peak;
- text ``module_tree``: the DeepSpeed-style module tree.

The same points go into ``run.json`` as numbers per step (:func:`per_step_table`) for the traceprof
tab, since TensorBoard's charts draw two points as a bare line without markers.
"""

from __future__ import annotations

import time

import msgspec

from traceprof.errors import MissingDependencyError, OutputError
from traceprof.result.model import PASSES

#: modules with a scalar of their own: the largest ones, at most this many, down to this depth
TOP_MODULES = 8
TOP_MODULES_MAX_DEPTH = 2

_INSTALL_HINT = "pip install 'traceprof[tensorboard]'"


def require_tensorboard() -> None:
    """Fail with a one-line error when the tensorboard package is missing."""
    try:
        import tensorboard  # noqa: F401
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            f"TensorBoard output needs the tensorboard package: {_INSTALL_HINT}"
        ) from None


class Scalar(msgspec.Struct, frozen=True):
    tag: str
    step: int
    value: float
    description: str
    module: str | None = None  # the module's qualified name (tag label) of a module's scalar


#: the unit of each metric (the tag's first part), for the traceprof tab's per-step table
UNITS = {
    "gpu_busy_us": "us",
    "cpu_us": "us",
    "wall_us": "us",
    "kernels": "count",
    "tflops": "TFLOP/s",
    "mfu": "fraction",
}


def has_gpu(doc: dict) -> bool:
    stats = doc.get("stats", {})
    return (stats.get("kernels", 0) + stats.get("memcpys", 0) + stats.get("memsets", 0)) > 0


def time_metric(doc: dict) -> str:
    return "gpu_busy_us" if has_gpu(doc) else "cpu_us"


def node_time(node: dict, metric: str) -> float:
    """A node's time in all passes (a pass absent from an older document counts 0)."""
    return sum(float(node.get(f"{p.value}_total_{metric}", 0.0) or 0.0) for p in PASSES)


def node_flops(node: dict) -> float | None:
    """FLOPs of a node's subtree in all passes, when the profile has FLOPs."""
    keys = tuple(f"{p.value}_total_flops" for p in PASSES)
    if not any(k in node for k in keys):
        return None
    return sum(float(node.get(k) or 0.0) for k in keys)


def step_flops(doc: dict) -> float | None:
    """FLOPs of the step, when the profile has FLOPs."""
    steps = doc.get("steps", {})
    if isinstance(steps.get("flops"), (int, float)):
        return float(steps["flops"])
    nodes = doc.get("nodes", [])
    by_id = {n["id"]: n for n in nodes}
    found = [node_flops(by_id[r]) for r in doc.get("roots", []) if r in by_id]
    values = [v for v in found if v is not None]
    return sum(values) if values else None


def module_label(node: dict) -> str:
    return node.get("qualified_name") or node.get("name") or node.get("class_name") or "?"


def top_modules(doc: dict) -> list[tuple[tuple[str, ...], str]]:
    """(path, tag label) of the modules that get a scalar, largest first."""
    metric = time_metric(doc)
    candidates = [
        n
        for n in doc.get("nodes", [])
        if n.get("kind") == "module"
        and n.get("depth", 0) <= TOP_MODULES_MAX_DEPTH
        and node_time(n, metric) > 0
    ]
    candidates.sort(key=lambda n: -node_time(n, metric))
    chosen, seen = [], set()
    for n in candidates[:TOP_MODULES]:
        label = module_label(n)
        if label in seen:
            label = f"{label}#{n['id']}"
        seen.add(label)
        chosen.append((tuple(n.get("path", ())), label))
    return chosen


def scalars(mean_doc: dict, step_docs: list[tuple[int, dict]], peak_flops: float | None) -> list[Scalar]:
    """The scalars of a run: one point per step document."""
    metric = time_metric(mean_doc)
    unit = "GPU busy time" if metric == "gpu_busy_us" else "CPU time"
    modules = top_modules(mean_doc)
    out: list[Scalar] = []
    for step, doc in step_docs:
        s = doc.get("steps", {})
        out.append(Scalar(f"{metric}/step", step, s.get(metric, 0.0), f"{unit} of the step, microseconds"))
        out.append(
            Scalar("wall_us/step", step, s.get("wall_us", 0.0), "CPU wall time of the step, microseconds")
        )
        if metric != "cpu_us":
            out.append(
                Scalar("cpu_us/step", step, s.get("cpu_us", 0.0), "CPU time of the step, microseconds")
            )
            out.append(Scalar("kernels/step", step, s.get("kernels", 0.0), "kernels per step"))
        by_path = {tuple(n.get("path", ())): n for n in doc.get("nodes", [])}
        for path, label in modules:
            node = by_path.get(path)
            value = node_time(node, metric) if node else 0.0
            out.append(
                Scalar(
                    f"{metric}/{label}",
                    step,
                    value,
                    f"{unit} of the module, all passes, microseconds",
                    module=label,
                )
            )
        achieved, mfu = _achieved(doc, metric)
        if achieved:
            out.append(
                Scalar(
                    "tflops/step",
                    step,
                    achieved / 1e12,
                    f"achieved TFLOP/s: FLOPs of the step over its {unit}",
                )
            )
            if peak_flops:
                mfu = achieved / peak_flops
            if mfu is not None:
                out.append(
                    Scalar(
                        "mfu/step",
                        step,
                        mfu,
                        "model FLOPs utilization: achieved FLOP/s over the device's peak",
                    )
                )
    return out


def per_step_table(points: list[Scalar]) -> dict:
    """The scalars as numbers per step, for the traceprof tab's per-step table (``run.json``
    ``per_step``): TensorBoard's line charts draw no marker on a line of two points, so a run of
    one to a few steps looks empty there. ``steps``: the x values, ascending; ``series``: per tag
    (the step's metrics first, then the modules, each in the order written) its ``tag``,
    ``module`` (qualified name, None for a step metric), ``unit`` (:data:`UNITS`) and ``values``
    (one per step, None where the tag has no point at that step)."""
    steps = sorted({p.step for p in points})
    column = {s: i for i, s in enumerate(steps)}
    series: dict[str, dict] = {}
    for p in points:
        entry = series.setdefault(
            p.tag,
            {
                "tag": p.tag,
                "module": p.module,
                "unit": UNITS.get(p.tag.split("/", 1)[0], ""),
                "values": [None] * len(steps),
            },
        )
        entry["values"][column[p.step]] = p.value
    ordered = sorted(series.values(), key=lambda e: e["module"] is not None)
    return {"steps": steps, "series": ordered}


def _achieved(doc: dict, metric: str) -> tuple[float | None, float | None]:
    """(achieved FLOP/s, MFU) of the step: the profile's own figures where it has them
    (``flops.achieved``), else its FLOPs over the step's GPU busy time (CPU time)."""
    achieved = doc.get("flops", {}).get("achieved") or {}
    rate, mfu = achieved.get("flop_per_s"), achieved.get("mfu")
    if not isinstance(rate, (int, float)):
        flops, time_us = step_flops(doc), doc.get("steps", {}).get(metric, 0.0)
        rate = flops / (time_us * 1e-6) if flops and time_us > 0 else None
    return (rate or None), (mfu if isinstance(mfu, (int, float)) else None)


def summary_markdown(tree_text: str) -> str:
    """The tree renderer's text as a Markdown code block (TensorBoard renders text as Markdown)."""
    return "\n".join("    " + line for line in tree_text.rstrip("\n").splitlines()) + "\n"


def write_event_file(run_dir: str, points: list[Scalar], text_step: int, tree_text: str) -> None:
    """Write one event file (the scalars and the text summary) into ``run_dir``."""
    require_tensorboard()
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb
    from tensorboard.plugins.text.summary_v2 import text_pb
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    try:
        writer = EventFileWriter(run_dir, filename_suffix=".traceprof")
    except OSError as e:
        raise OutputError(f"{run_dir}: cannot write an event file ({e.strerror or e})") from None
    now = time.time()
    described: set[str] = set()
    try:
        for p in points:
            description = None if p.tag in described else p.description
            described.add(p.tag)
            writer.add_event(
                event_pb2.Event(wall_time=now, step=p.step, summary=scalar_pb(p.tag, p.value, description))
            )
        writer.add_event(
            event_pb2.Event(
                wall_time=now,
                step=text_step,
                summary=text_pb(
                    "module_tree",
                    summary_markdown(tree_text),
                    "traceprof's module tree: mean of the complete steps",
                ),
            )
        )
    finally:
        writer.close()
