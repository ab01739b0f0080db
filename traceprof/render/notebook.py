"""Profiles, diffs and jobs in a notebook: a short ``repr`` and, for Jupyter's rich display
(``_repr_html_``), the summary cards of the HTML report's header, the largest modules and a
static icicle drawn as inline SVG (docs/notebooks.md).

The HTML has no script, no ``<style>`` element and loads nothing: styles are inline attributes,
so it shows alike in JupyterLab, VS Code and GitHub's notebook viewer, trusted or not. Every
name comes from a trace and is escaped; a cell's ``<title>`` gives its full name and numbers on
hover.
"""

from __future__ import annotations

import colorsys
import functools
import html
import os
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from traceprof import units
from traceprof.job.modules import spread_of
from traceprof.render import memory_text
from traceprof.render.job_text import reference_text
from traceprof.result.memory import CATEGORIES
from traceprof.result.metric import TimeMetric
from traceprof.result.model import PASSES, ModuleNode, ModuleProfile, NodeKind

if TYPE_CHECKING:  # types only: a diff or a job arrives built, its module already loaded
    from traceprof.compare.model import DiffProfile
    from traceprof.compare.nodes import DiffNode
    from traceprof.job.model import Job
    from traceprof.job.modules import JobModule

#: the icicle's drawing width (it scales to the output's width) and the height of a row
WIDTH, ROW = 960, 20
#: rows drawn; deeper nodes are left out (the JSON and the HTML report have them)
MAX_ROWS = 12
#: cells narrower than this many pixels are left out, with their subtrees
MIN_CELL = 1.0
#: width of a character of the cells' 11 px text, for cutting labels to fit
_CHAR = 6.4
#: rows of the tables of largest modules, changes and stragglers, and the characters of a cell
TOP, CELL_CHARS = 5, 90
_NEUTRAL, _OUTSIDE = "#d9d9d9", "#c4c4c4"
_FAMILY = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
_FONT = f"font-family:{_FAMILY}"


# ---- short reprs ------------------------------------------------------------------------------


R = TypeVar("R")


def _printable(repr_of: Callable[[R], str]) -> Callable[[R], str]:
    """A repr shown as a person's terminal shows text: its names (a trace's file name, its
    modules') with their control characters escaped (docs/security.md)."""

    @functools.wraps(repr_of)
    def shown(value: R) -> str:
        return units.printable(repr_of(value))

    return shown


@_printable
def profile_repr(profile: ModuleProfile) -> str:
    """``<ModuleProfile trace.json: 84 modules, 1 step, GPU busy 309.4 us>``."""
    sel = profile.selection
    steps = _plural(sel.count, "step") if sel.numbers else "whole trace"
    time = (
        f"GPU busy {units.duration(sel.gpu_busy_us)}"
        if profile.has_gpu
        else f"CPU {units.duration(sel.cpu_in_ops_us)}"
    )
    modules = _plural(profile.module_nodes, "module")
    return f"<ModuleProfile {_base(profile.metadata.path)}: {modules}, {steps}, {time}>"


@_printable
def node_repr(node: ModuleNode) -> str:
    """``<ModuleNode layer1.0.conv1 (Conv2d): 1 call, GPU busy fwd 12.0 us, bwd 30.1 us>``: its
    time per pass (GPU busy time when it ran GPU work, else CPU time), the other pass when it
    has some."""
    metric, what = _node_metric(node)
    passes = [
        f"{p.short} {units.duration(getattr(node.phase(p).total, metric))}"
        for p in PASSES
        if p.value != "other" or getattr(node.other.total, metric) > 0
    ]
    cls = f" ({node.class_name})" if node.class_name and node.class_name != node.label else ""
    children = f", {units.counted(len(node.children), 'child', 'children')}" if node.children else ""
    return (
        f"<ModuleNode {node.label}{cls}: {units.counted(node.calls, 'call')}, {what} "
        f"{', '.join(passes)}{children}>"
    )


def _node_metric(node: ModuleNode) -> tuple[str, str]:
    return ("gpu_busy_us", "GPU busy") if node.total.gpu_busy_us > 0 else ("cpu_us", "CPU")


def node_html(node: ModuleNode) -> str:
    """A node on its own (no profile around it): cards (class, calls, parameters, shapes), its
    time, FLOPs and kernels per pass, and its largest own ops and kernels."""
    metric, what = _node_metric(node)
    cards = [
        ("Class", node.class_name or "--"),
        ("Kind", node.kind.value),
        ("Calls / step", units.count(node.calls)),
    ]
    info = node.info
    if info is not None and info.params_total is not None:
        cards.append(("Params", units.grouped(info.params_total)))
    if info is not None and (info.inputs is not None or info.outputs is not None):
        cards.append(("Input → output", f"{units.shape(info.inputs)} → {units.shape(info.outputs)}"))
    if node.children:
        cards.append(("Children", units.count(len(node.children))))
    held = next((m for m in node.memory if m.activation_bytes is not None), None)
    if held is not None and held.activation_bytes is not None:
        cards.append((f"Activations / step ({held.device})", units.byte_count(held.activation_bytes)))
    rows = [
        (
            p.value,
            units.duration(getattr(node.phase(p).total, metric)),
            units.duration(getattr(node.phase(p).own, metric)),
            units.count(node.phase(p).total.kernels),
            units.flops(node.phase(p).total.flops),
        )
        for p in PASSES
    ]
    ops = sorted(node.ops, key=lambda o: -(o.gpu_busy_us if metric == "gpu_busy_us" else o.cpu_us))
    op_rows = [
        (
            o.kind.value,
            o.name,
            o.phase,
            units.count(o.calls),
            units.duration(o.gpu_busy_us if metric == "gpu_busy_us" else o.cpu_us),
        )
        for o in ops[:TOP]
    ]
    return _frame(
        f"traceprof · {node.label}",
        _cards(cards),
        _table(f"{what} per step, by pass", ("pass", "total", "own", "kernels", "FLOPs"), rows),
        _table(f"Largest own ops and kernels by {what}", ("kind", "name", "pass", "calls", "time"), op_rows),
    )


@_printable
def diff_repr(diff: DiffProfile) -> str:
    """``<DiffProfile a.json -> b.json: step 1.20 ms -> 1.50 ms (+25.0%), 84 matched, ...>``."""
    counts = _status_counts(diff)
    change = f" ({units.signed_percent(diff.wall_delta_ratio)})" if diff.wall_delta_ratio is not None else ""
    return (
        f"<DiffProfile {_base(diff.base.path)} -> {_base(diff.new.path)}: step "
        f"{units.duration(diff.base.wall_us)} -> {units.duration(diff.new.wall_us)}{change}, "
        f"{_plural(counts['matched'], 'module')} matched, {counts['added']} added, "
        f"{counts['removed']} removed>"
    )


@_printable
def job_repr(job: Job) -> str:
    """``<Job 8 ranks (multi_rank): 46 modules, GPU compute median 3.41 ms, 1 straggler>``."""
    spread = spread_of(job.step_times())
    median = f", {_step_metric(job)} median {units.duration(spread.median)}" if spread else ""
    return (
        f"<Job {_plural(len(job.ranks), 'rank')} ({_job_place(job)}): "
        f"{_plural(job.matched_modules, 'module')}{median}, {_plural(len(job.stragglers), 'straggler')}>"
    )


# ---- HTML of a profile ------------------------------------------------------------------------


def profile_html(profile: ModuleProfile) -> str:
    """Summary cards, the modules with the most own time, and the icicle of the module tree."""
    what = "GPU busy time" if profile.has_gpu else "CPU time"
    top = _table(
        f"Largest modules by own {what} per step",
        ("module", "class", "own", "of the step", "total"),
        _top_module_rows(profile),
    )
    return _page(
        f"traceprof · {_base(profile.metadata.path)}",
        profile_cards(profile),
        profile.warnings,
        [top, _memory_table(profile)],
        _profile_cells(profile),
        f"Width: {what} per step, all passes (forward, backward, other).",
    )


def _memory_table(profile: ModuleProfile) -> str:
    """What holds the memory device's memory at the step's peak and at the end of the forward,
    by category, with the largest activations by module."""
    summary = profile.memory_summary
    moments = [
        (w, m)
        for w, m in (
            ("at the peak", summary and summary.peak),
            ("end of forward", summary and summary.forward_end),
        )
        if m
    ]
    if summary is None or not moments:
        return ""
    names = memory_text.holder_names(profile)
    header = ("", "total", *CATEGORIES, "parameters", "before the trace", "largest activations")
    rows = [
        (
            what,
            units.byte_count(m.total_bytes),
            *(
                units.byte_count(v)
                for v in (
                    m.activations_bytes,
                    m.gradients_bytes,
                    m.optimizer_state_bytes,
                    m.temporaries_bytes,
                )
            ),
            units.byte_count(m.parameters_bytes) + ("" if m.parameters_in_total else " (not in the total)")
            if m.parameters_bytes is not None
            else "--",
            units.byte_count(m.before_trace_bytes),
            memory_text.holders_text(m, names=names),
        )
        for what, m in moments
    ]
    return _table(f"What holds memory on {summary.device}", header, rows)


def profile_cards(profile: ModuleProfile) -> list[tuple[str, str]]:
    """The headline numbers of the HTML report's header, as (name, value) pairs."""
    md, sel = profile.metadata, profile.selection
    device = ", ".join(profile.device_names) or "CPU only"
    if md.rank is not None and md.world_size:
        device += f" · rank {md.rank} of {md.world_size}"
    cards = [
        ("Device", device),
        ("Modules", f"{profile.module_nodes} from {profile.source_description}"),
        ("Steps", _steps(profile)),
        ("Wall / step", units.duration(sel.wall_us)),
    ]
    if profile.has_gpu:
        cards += [
            ("GPU busy / step", units.duration(sel.gpu_busy_us)),
            ("Kernels / step", units.count(sel.kernels)),
        ]
    cards.append(("CPU in ops / step", units.duration(sel.cpu_in_ops_us)))
    if profile.flops.has_shapes:
        rates = profile.throughput(sel)
        cards.append(("FLOPs / step", units.flops(sel.flops)))
        if rates.flop_per_s:
            cards.append(("Achieved", units.flop_rate(rates.flop_per_s)))
        peak = profile.flops.peak
        if rates.mfu is not None and peak is not None:
            cards.append(("MFU", f"{units.fraction(rates.mfu)} of {peak.device} {peak.precision}"))
    memory = profile.memory_summary
    if memory is not None and memory.peak is not None:
        cards.append(("Memory peak", f"{units.byte_count(memory.peak.total_bytes)} ({memory.device})"))
    if memory is not None and memory.activation_bytes is not None:
        cards.append(("Activations / step", units.byte_count(memory.activation_bytes)))
    return cards


def _steps(profile: ModuleProfile) -> str:
    sel = profile.selection
    if not sel.numbers:
        return "whole trace (no ProfilerStep)"
    if sel.count == 1:
        return f"ProfilerStep#{sel.numbers[0]}"
    shown = ", ".join(map(str, sel.numbers[:8])) + (", …" if len(sel.numbers) > 8 else "")
    return f"mean of {sel.count} steps ({shown})"


def _metric(profile: ModuleProfile) -> TimeMetric:
    return TimeMetric.of(profile.has_gpu)


def _top_module_rows(profile: ModuleProfile) -> list[tuple[str, ...]]:
    metric = _metric(profile)
    step = getattr(profile.selection, metric)
    modules = [n for n in profile.nodes if n.kind is NodeKind.MODULE]
    modules.sort(key=lambda n: -getattr(n.own, metric))
    return [
        (
            n.label,
            n.class_name,
            units.duration(getattr(n.own, metric)),
            units.percent(getattr(n.own, metric) / step) if step > 0 else "--",
            units.duration(getattr(n.total, metric)),
        )
        for n in modules[:TOP]
    ]


def _profile_cells(profile: ModuleProfile) -> list[Cell]:
    metric = _metric(profile)
    step = getattr(profile.selection, metric)
    return [
        Cell(
            key=n.id,
            parent=n.parent,
            value=getattr(n.total, metric),
            label=n.name,
            title=_profile_title(n, metric, step),
            fill=_class_colour(n.class_name) if n.kind is NodeKind.MODULE else _OUTSIDE,
        )
        for n in profile.walk()
    ]


def _profile_title(node: ModuleNode, metric: str, step: float) -> str:
    total = getattr(node.total, metric)
    share = f", {units.percent(total / step)} of the step" if step > 0 else ""
    passes = ", ".join(f"{p.short} {units.duration(getattr(node.phase(p).total, metric))}" for p in PASSES)
    cls = f" ({node.class_name})" if node.class_name and node.class_name != node.label else ""
    return (
        f"{node.label}{cls}\n{units.duration(total)} per step{share}\n"
        f"own {units.duration(getattr(node.own, metric))}; {passes}"
    )


# ---- HTML of a diff ---------------------------------------------------------------------------


def diff_html(diff: DiffProfile) -> str:
    """The two steps and their change, where it went, the largest changes, and an icicle of
    both runs' tree coloured by the change (red slower, green faster)."""
    what = "GPU busy time" if diff.metric is TimeMetric.GPU_BUSY else "CPU time"
    rows = [
        (
            n.qualified_name or n.class_name or n.name,
            n.status.value,
            units.duration(n.base_us),
            units.duration(n.new_us),
            units.signed_duration(diff.own_delta_us(n)),
            units.signed_duration(n.delta_us),
        )
        for n in diff.ranked()[:TOP]
    ]
    top = _table(
        f"Largest changes of a module's own {what} per step",
        ("module", "", "base", "new", "Δ own", "Δ total"),
        rows,
    )
    return _page(
        f"traceprof diff · {_base(diff.base.path)} → {_base(diff.new.path)}",
        diff_cards(diff),
        diff.warnings,
        [top],
        _diff_cells(diff),
        f"Width: the larger of the two runs' {what} per step. Red: slower, green: faster, "
        "grey: within the step-to-step spread or unchanged; orange: new run only, blue: base "
        "run only.",
    )


def diff_cards(diff: DiffProfile) -> list[tuple[str, str]]:
    counts = _status_counts(diff)
    change = units.signed_duration(diff.wall_delta_us)
    if diff.wall_delta_ratio is not None:
        change += f" ({units.signed_percent(diff.wall_delta_ratio)})"
    spread = diff.wall_spread_us
    if spread is not None and abs(diff.wall_delta_us) <= spread:
        change += " noise"
    where = ", ".join(f"{k} {units.signed_duration(v)}" for k, v in diff.where())
    return [
        ("Base step", f"{units.duration(diff.base.wall_us)} · {diff.base.device}"),
        ("New step", f"{units.duration(diff.new.wall_us)} · {diff.new.device}"),
        ("Δ step", change),
        ("Where", where),
        ("Modules", f"{counts['matched']} matched by {diff.matched_by}"),
        ("Added / removed", f"{counts['added']} / {counts['removed']}"),
    ]


def _status_counts(diff: DiffProfile) -> dict[str, int]:
    counts = {"matched": 0, "added": 0, "removed": 0}
    for n in diff.modules():
        counts[n.status.value] += 1
    return counts


def _diff_cells(diff: DiffProfile) -> list[Cell]:
    return [
        Cell(
            key=n.id,
            parent=n.parent,
            value=max(n.base_us, n.new_us),
            label=n.name,
            title=_diff_title(n),
            fill=_change_colour(n),
        )
        for n in diff.walk()
    ]


def _diff_title(node: DiffNode) -> str:
    label = node.qualified_name or node.class_name or node.name
    cls = f" ({node.class_name})" if node.class_name and node.class_name != label else ""
    ratio = f" ({units.signed_percent(node.delta_ratio)})" if node.delta_ratio is not None else ""
    status = "" if node.status.value == "matched" else f"; {node.status.value}"
    noise = "; within the step-to-step spread" if node.noise else ""
    return (
        f"{label}{cls}\nbase {units.duration(node.base_us)} → new {units.duration(node.new_us)}: "
        f"{units.signed_duration(node.delta_us)}{ratio}{status}{noise}"
    )


def _change_colour(node: DiffNode) -> str:
    if node.status.value == "added":
        return "#f4b26b"
    if node.status.value == "removed":
        return "#8fb8e0"
    ratio = node.delta_ratio
    if node.noise or not ratio:
        return _NEUTRAL
    strength = min(abs(ratio) / 0.5, 1.0)  # a change of 50% or more is the strongest colour
    return _mix((0.85, 0.85, 0.85), (0.86, 0.30, 0.27) if ratio > 0 else (0.30, 0.69, 0.36), strength)


# ---- HTML of a job ----------------------------------------------------------------------------


def job_html(job: Job) -> str:
    """The ranks and their step times, the stragglers, and an icicle of the module tree sized
    by the median over the ranks and coloured by the imbalance (max / median)."""
    what = "GPU busy time" if job.metric is TimeMetric.GPU_BUSY else "CPU time"
    rows = [
        (
            str(s.rank),
            units.duration(s.step_us),
            f"{units.signed_duration(s.excess_us)} ({units.signed_percent(s.excess_fraction)}) over "
            f"{reference_text(s)}",
            ", ".join(f"{m.name} {units.signed_duration(e)}" for m, e in s.modules[:3]),
        )
        for s in job.stragglers[:TOP]
    ]
    return _page(
        f"traceprof job · {len(job.ranks)} ranks · {_job_place(job)}",
        job_cards(job),
        job.warnings,
        [_table("Stragglers", ("rank", "step", "over", "modules over it"), rows)],
        _job_cells(job),
        f"Width: the median over the ranks of each module's {what} per step. Redder: a larger "
        "imbalance (the slowest rank's time over the median, 1.5x or more the reddest).",
    )


def job_cards(job: Job) -> list[tuple[str, str]]:
    size = f" of {job.world_size}" if job.world_size is not None else ""
    devices = sorted({name for r in job.ranks for name in r.profile.device_names})
    steps = ", ".join(map(str, job.steps)) if job.steps else "whole trace"
    cards = [
        ("Ranks", f"{len(job.ranks)}{size}"),
        ("Device", ", ".join(devices) or "CPU only"),
        ("Steps", steps),
        ("Modules", f"{job.matched_modules} matched across ranks"),
    ]
    if job.missing_ranks:
        cards.append(("Missing ranks", ", ".join(map(str, job.missing_ranks))))
    spread = spread_of(job.step_times())
    if spread is not None:
        name = _step_metric(job)
        cards += [
            (f"{name} median", units.duration(spread.median)),
            (f"{name} min – max", f"{units.duration(spread.min)} – {units.duration(spread.max)}"),
            ("Slowest rank", f"{spread.slowest_rank} ({units.ratio(spread.imbalance)} the median)"),
        ]
    stragglers = ", ".join(str(s.rank) for s in job.stragglers) or "none"
    cards.append(("Stragglers", stragglers))
    return cards


#: what a job's step times measure, by Job.step_metric
_STEP_METRICS = {"compute_us": "GPU compute", "cpu_compute_us": "CPU compute", "wall_us": "Step wall"}


def _step_metric(job: Job) -> str:
    return _STEP_METRICS.get(job.step_metric, job.step_metric)


def _job_label(module: JobModule) -> str:
    return module.qualified_name or module.class_name or module.name


def _job_cells(job: Job) -> list[Cell]:
    index = {m.key: i for i, m in enumerate(job.modules)}
    cells = []
    for i, m in enumerate(job.modules):
        spread = m.spread(job.metric)
        cls = f" ({m.class_name})" if m.class_name and m.class_name != _job_label(m) else ""
        title = (
            f"{_job_label(m)}{cls}\nmedian {units.duration(spread.median)}, min "
            f"{units.duration(spread.min)}, max {units.duration(spread.max)} (rank "
            f"{spread.slowest_rank}); imbalance {units.ratio(spread.imbalance)}"
        )
        imbalance = (spread.imbalance or 1.0) - 1.0
        fill = _mix((0.85, 0.85, 0.85), (0.86, 0.30, 0.27), min(max(imbalance, 0.0) / 0.5, 1.0))
        parent = index.get(m.parent, -1) if m.parent is not None else -1
        cells.append(Cell(i, parent, spread.median, m.name, title, fill))
    return cells


def _job_place(job: Job) -> str:
    where = os.path.dirname(job.ranks[0].path) if job.ranks else ""
    return os.path.basename(where.rstrip("/")) or where or "."


# ---- the icicle -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cell:
    """One node of an icicle: ``parent`` is another cell's key, -1 for a root; siblings are
    drawn in the order given."""

    key: int
    parent: int
    value: float  # the width it is drawn with, in any unit
    label: str  # drawn in the cell where it fits
    title: str  # shown on hover: the full name and numbers
    fill: str


@dataclass(frozen=True, slots=True)
class _Placed:
    cell: Cell
    x: float
    width: float
    row: int


def layout(cells: Sequence[Cell], width: float = WIDTH, max_rows: int = MAX_ROWS) -> list[_Placed]:
    """Cells placed on rows: the roots across the width by value, each cell's children across
    the cell (scaled down when they add up to more than it). Cells narrower than
    :data:`MIN_CELL` are left out with their subtrees, and rows past ``max_rows``."""
    children: dict[int, list[Cell]] = {}
    for c in cells:
        children.setdefault(c.parent, []).append(c)
    placed: list[_Placed] = []
    todo = [(children.get(-1, []), 0.0, width, 0, 0.0)]
    while todo:
        siblings, x, span, row, whole = todo.pop()
        total = sum(max(c.value, 0.0) for c in siblings)
        scale = span / max(whole, total) if max(whole, total) > 0 else 0.0
        for c in siblings:
            w = max(c.value, 0.0) * scale
            if w >= MIN_CELL and row < max_rows:
                placed.append(_Placed(c, x, w, row))
                todo.append((children.get(c.key, []), x, w, row + 1, max(c.value, 0.0)))
            x += w
    return placed


def icicle_svg(cells: Sequence[Cell], width: int = WIDTH) -> str:
    """An icicle as inline SVG: one rectangle per cell with its ``<title>``, the label where it
    fits; nothing but SVG elements and presentation attributes."""
    placed = layout(cells, width)
    if not placed:
        return '<div style="color:#757575;margin:6px 0">(no time to draw)</div>'
    rows = max(p.row for p in placed) + 1
    height = rows * ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="traceprof-icicle" role="img" '
        f'viewBox="0 0 {width} {height}" width="100%" style="max-width:{width}px;display:block" '
        f'font-size="11" font-family="{_FAMILY}">'
    ]
    for p in placed:
        x, y, w = round(p.x, 2), p.row * ROW, round(p.width, 2)
        parts.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{ROW - 1}" fill="{p.cell.fill}" '
            f'stroke="#ffffff" stroke-width="0.5"><title>{_esc(p.cell.title)}</title></rect>'
        )
        text = _fit(p.cell.label, w)
        if text:
            parts.append(
                f'<text x="{round(x + 3, 2)}" y="{y + 14}" fill="#1f1f1f" pointer-events="none">{_esc(text)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _fit(label: str, width: float) -> str:
    """``label`` cut to the characters that fit ``width`` pixels; "" when fewer than 3 do."""
    room = int((width - 5) / _CHAR)
    if room < 3:
        return ""
    return label if len(label) <= room else label[: room - 1] + "…"


def _class_colour(name: str) -> str:
    """A light colour of its own for each class name (the same in every output)."""
    hue = (zlib.crc32(name.encode("utf-8", "replace")) % 360) / 360
    r, g, b = colorsys.hls_to_rgb(hue, 0.78, 0.55)
    return _hex(r, g, b)


def _mix(a: tuple[float, float, float], b: tuple[float, float, float], t: float) -> str:
    r, g, bl = (x + (y - x) * t for x, y in zip(a, b))
    return _hex(r, g, bl)


def _hex(r: float, g: float, b: float) -> str:
    return "#" + "".join(f"{round(c * 255):02x}" for c in (r, g, b))


# ---- HTML pieces ------------------------------------------------------------------------------


def _esc(text: str) -> str:
    """Text from a trace, safe in HTML and SVG: escaped, control characters replaced."""
    clean = "".join(c if c.isprintable() or c in "\n\t" else "\ufffd" for c in text)
    return html.escape(clean, quote=True)


def _page(
    title: str,
    cards: Iterable[tuple[str, str]],
    warnings: Sequence[str],
    tables: Sequence[str],
    cells: Sequence[Cell],
    caption: str,
) -> str:
    """The one layout of a profile's, a diff's and a job's page: title, summary cards, first
    warnings, tables, and the icicle of ``cells`` with what it shows (``caption``)."""
    return _frame(title, _cards(cards), _warnings(warnings), *tables, icicle_svg(cells), _caption(caption))


def _frame(title: str, *parts: str) -> str:
    return (
        f'<div class="traceprof-notebook" style="{_FONT};color:#1f1f1f;background:#ffffff;'
        f'padding:8px 10px;max-width:{WIDTH + 20}px;box-sizing:border-box">'
        f'<div style="font-weight:600;font-size:14px;margin-bottom:6px">{_esc(title)}</div>'
        + "".join(parts)
        + "</div>"
    )


def _cards(cards: Iterable[tuple[str, str]]) -> str:
    cells = "".join(
        '<div style="border:1px solid #dddddd;border-radius:4px;padding:4px 8px;background:#fafafa">'
        '<div style="font-size:10px;color:#666666;text-transform:uppercase;letter-spacing:0.04em">'
        f'{_esc(key)}</div><div style="font-size:13px;white-space:nowrap">{_esc(value)}</div></div>'
        for key, value in cards
    )
    return f'<div style="display:flex;flex-wrap:wrap;gap:6px;margin-bottom:8px">{cells}</div>'


def _warnings(warnings: Sequence[str], shown: int = 3) -> str:
    lines = [f"⚠ {w}" for w in warnings[:shown]]
    if len(warnings) > shown:
        lines.append(f"(+{len(warnings) - shown} more warnings: see .warnings)")
    return "".join(f'<div style="color:#a33;font-size:12px;margin:2px 0">{_esc(w)}</div>' for w in lines)


def _table(caption: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return ""
    cell = "padding:2px 8px;border-bottom:1px solid #e5e5e5;text-align:left;white-space:nowrap"
    head = "".join(f'<th style="{cell};font-weight:600">{_esc(h)}</th>' for h in header)
    body = "".join("<tr>" + "".join(_td(cell, v) for v in row) + "</tr>" for row in rows)
    return (
        f'<div style="font-size:12px;color:#555555;margin:6px 0 2px">{_esc(caption)}</div>'
        f'<table style="border-collapse:collapse;font-size:12px;margin-bottom:8px">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _td(style: str, text: str) -> str:
    """A table cell; a long text cut to :data:`CELL_CHARS`, in full on hover."""
    shown = units.label(text, CELL_CHARS)
    title = f' title="{_esc(text)}"' if shown != text else ""
    return f'<td style="{style}"{title}>{_esc(shown)}</td>'


def _caption(text: str) -> str:
    return (
        f'<div style="font-size:11px;color:#757575;margin-top:4px">{_esc(text)} Hover a cell for '
        f"its name and times; cells under {MIN_CELL:g} px and rows past {MAX_ROWS} are not drawn.</div>"
    )


def _plural(n: int, word: str) -> str:
    return units.counted(n, word)


def _base(path: str) -> str:
    return os.path.basename(path) or path or "trace"
