"""torchinfo-style table: torchinfo 1.8.0's layout and totals, plus traceprof's measured columns.

Rows are the profile's nodes (``├─Conv2d: 1-1``, ``│    └─BasicBlock: 2-1``, depth-idx counted
per depth over the whole table as torchinfo does). Columns are chosen with ``columns`` (CLI
``--columns``): :data:`COLUMNS` lists them. The totals block repeats torchinfo's formulas
(``ModelStatistics``) on the module table that ``traceprof.capture`` embeds, so that its lines
equal ``torchinfo.summary(model, input_data=...)`` for the same model and input; see
docs/output-formats.md for the formulas and the places where traceprof's own numbers differ.
"""

from __future__ import annotations

import math
import os
import re
import sys
import textwrap
from collections.abc import Callable

import msgspec

from traceprof import units
from traceprof.errors import OptionError
from traceprof.render.header import averaged, fused_time, header_lines
from traceprof.render.registry import RenderOptions
from traceprof.result.model import PASSES, ModuleNode, ModuleProfile, NodeKind, Pass
from traceprof.result.torchinfo import TorchinfoStats, torchinfo_stats
from traceprof.trace.model import ModuleInfo

# -- torchinfo's totals block -----------------------------------------------------------------


def totals_lines(stats: TorchinfoStats | None, rule: str) -> list[str]:
    """torchinfo's totals block (``ModelStatistics.__repr__``), the lines it can fill."""
    if stats is None or stats.total_params is None:
        return []
    assert stats.trainable_params is not None  # computed with total_params
    out = [
        f"Total params{units.torchinfo_count(stats.total_params, False)}",
        f"Trainable params{units.torchinfo_count(stats.trainable_params, False)}",
        f"Non-trainable params{units.torchinfo_count(stats.total_params - stats.trainable_params, False)}",
    ]
    if stats.total_mult_adds is not None:
        out.append(f"Total mult-adds{units.torchinfo_count(stats.total_mult_adds, True)}")
    sizes = []
    if stats.total_input is not None:
        sizes.append(f"Input size (MB): {units.megabytes(stats.total_input)}")
    if stats.total_output_bytes is not None:
        sizes.append(f"Forward/backward pass size (MB): {units.megabytes(stats.total_output_bytes)}")
    if stats.total_param_bytes is not None:
        sizes.append(f"Params size (MB): {units.megabytes(stats.total_param_bytes)}")
    parts = [
        p for p in (stats.total_input, stats.total_output_bytes, stats.total_param_bytes) if p is not None
    ]
    if len(parts) == 3:
        sizes.append(f"Estimated Total Size (MB): {units.megabytes(sum(parts))}")
    return out + ([rule] + sizes if sizes else [])


# -- rows and columns ---------------------------------------------------------------------------


def _layer_labels(profile: ModuleProfile) -> dict[int, str]:
    """torchinfo's ``Layer (type:depth-idx)`` cells: ``├─Conv2d: 1-1``, ``│    └─ReLU: 2-3``;
    the idx counts the rows of each depth over the whole table."""
    labels: dict[int, str] = {}
    per_depth: dict[int, int] = {}
    for node in _rows(profile):
        title = node.class_name if node.kind is NodeKind.MODULE and node.class_name else node.name
        if node.depth == 0:
            labels[node.id] = title
            continue
        guide = "├─" if node.depth == 1 else "│    " * (node.depth - 1) + "└─"
        if node.kind is not NodeKind.MODULE:  # the unattributed bucket's groups: no depth-idx
            labels[node.id] = f"{guide}{title}"
            continue
        per_depth[node.depth] = per_depth.get(node.depth, 0) + 1
        labels[node.id] = f"{guide}{title}: {node.depth}-{per_depth[node.depth]}"
    return labels


def _rows(profile: ModuleProfile) -> list[ModuleNode]:
    """The nodes the table shows: torchinfo's layers, so not the modules that never ran (the
    tree report shows those, with zero time)."""
    return [n for n in profile.walk() if not _never_ran(n)]


def _never_ran(n: ModuleNode) -> bool:
    """A module of the module table that no step called (no inputs recorded, no calls)."""
    return (
        n.kind is NodeKind.MODULE
        and n.calls == 0
        and not n.children
        and n.info is not None
        and n.info.inputs is None
    )


class Column(msgspec.Struct, frozen=True):
    name: str
    help: str
    header: Callable[[ModuleProfile], str]
    cell: Callable[[_Context, ModuleNode], str]
    available: Callable[[ModuleProfile], bool] = lambda p: True
    #: one of :data:`DEFAULT_COLUMNS`, the table's columns without ``--columns``
    by_default: bool = True


class _Context(msgspec.Struct):
    profile: ModuleProfile
    opts: RenderOptions
    stats: TorchinfoStats | None
    # module names already shown (recursive rows)
    seen: set[str] = msgspec.field(default_factory=set)
    recursive: set[int] = msgspec.field(default_factory=set)


def _has_table(p: ModuleProfile) -> bool:
    return p.metadata.module_table is not None


def _time_name(p: ModuleProfile) -> str:
    return "GPU" if p.has_gpu else "CPU"


def _time(ctx: _Context, us: float) -> str:
    return units.duration(us, ctx.opts.raw_numbers)


def _pass_column(p: Pass) -> Column:
    """The time of one pass: ``fwd``, ``bwd``, ``other``."""
    what = {
        Pass.FORWARD: "forward",
        Pass.BACKWARD: "backward",
        Pass.OTHER: "neither forward nor backward (optimizer step, copies, between ops)",
    }[p]
    return Column(
        p.short,
        f"{what}: GPU time (CPU time on CPU-only traces), per step",
        lambda prof: f"{p.short.capitalize()} {_time_name(prof)}",
        lambda ctx, n: _time(
            ctx, n.phase(p).total.gpu_busy_us if ctx.profile.has_gpu else n.phase(p).total.cpu_us
        ),
    )


def _params_cell(ctx: _Context, n: ModuleNode) -> str:
    """torchinfo's ``num_params_to_str``: a leaf or a row whose children are not shown has its
    parameters with children, in parentheses when none is trainable; a container its leftover."""
    info = n.info
    if info is None or not info.params_total:
        return "--"
    if n.id in ctx.recursive:
        return "(recursive)"
    if not n.children or (ctx.stats and info.name in ctx.stats.leaves):
        if _all_tied(info):  # every parameter is an earlier module's (tied weights)
            return "(tied)"
        text = units.grouped(info.params_total)
        text = text if info.trainable_total else f"({text})"
        return f"{text} (tied)" if info.tied else text
    left = ctx.stats.leftover.get(info.name, info.params) if ctx.stats else info.params
    return units.grouped(left) if left and left > 0 else "--"


def _params_percent_cell(ctx: _Context, n: ModuleNode) -> str:
    info, stats = n.info, ctx.stats
    total = stats.total_params if stats else None
    if info is None or stats is None or not total:
        return units.param_share(None)
    if n.id in ctx.recursive:
        return "(recursive)"
    if not n.children or info.name in stats.leaves:
        if _all_tied(info):
            return "(tied)"
        share = info.params_total
    else:
        share = stats.leftover.get(info.name, info.params)
    # a container's leftover is below 0 when its leaves share tensors (a tied embedding counted
    # by two leaves): it owns none of its own then
    return units.param_share(max(share or 0, 0) / total)


def _all_tied(info: ModuleInfo) -> bool:
    """Every own parameter of the module is an earlier module's (tied weights)."""
    return bool(info.tied and info.param_counts is not None and set(info.param_counts) <= set(info.tied))


def _mult_adds_cell(ctx: _Context, n: ModuleNode) -> str:
    """torchinfo's ``macs_to_str``: a leaf's estimate (all its calls), a row whose children are
    not shown the sum of its leaves', ``--`` otherwise."""
    if n.info is None or ctx.stats is None or not ctx.stats.layer_macs:
        return "--"
    name = n.info.name
    if name in ctx.stats.leaves:
        value = ctx.stats.layer_macs.get(name, 0)
    elif not n.children:
        prefix = name + "." if name else ""
        value = sum(m for leaf, m in ctx.stats.layer_macs.items() if leaf.startswith(prefix))
    else:
        return "--"
    if n.id in ctx.recursive:
        return "--"
    return units.grouped(value) if value > 0 else "--"


def _trainable_cell(ctx: _Context, n: ModuleNode) -> str:
    info = n.info
    if info is None or not info.params_total or info.trainable_total is None:
        return "--"
    if info.trainable_total == 0:
        return "False"
    return "True" if info.trainable_total == info.params_total else "Partial"


def _has_activations(p: ModuleProfile) -> bool:
    """Traces with [memory] events paired into lifetimes and a backward pass."""
    return p.memory_summary is not None and p.memory_summary.activation_bytes is not None


def _activations_cell(ctx: _Context, n: ModuleNode) -> str:
    use = ctx.profile.memory_of(n)
    if use is None or use.activation_bytes is None:
        return "--"
    return units.byte_count(use.activation_bytes, ctx.opts.raw_numbers)


def _info(attr: Callable[[ModuleInfo], str]) -> Callable[[_Context, ModuleNode], str]:
    return lambda ctx, n: attr(n.info) if n.info is not None else "--"


COLUMNS: dict[str, Column] = {
    c.name: c
    for c in (
        Column(
            "input",
            "Input Shape: shapes of the first call's inputs",
            lambda p: "Input Shape",
            _info(lambda i: units.shape(i.inputs)),
            _has_table,
        ),
        Column(
            "output",
            "Output Shape: shapes of the first call's outputs",
            lambda p: "Output Shape",
            _info(lambda i: units.shape(i.outputs)),
            _has_table,
        ),
        Column(
            "params",
            "Param #: torchinfo's parameter count of the row",
            lambda p: "Param #",
            _params_cell,
            _has_table,
        ),
        Column(
            "params_percent",
            "Param %: share of the total params",
            lambda p: "Param %",
            _params_percent_cell,
            _has_table,
        ),
        Column(
            "kernel",
            "Kernel Shape: the module's kernel_size",
            lambda p: "Kernel Shape",
            _info(lambda i: units.dims(i.kernel_size)),
            _has_table,
        ),
        Column(
            "weight_shape",
            "Weight Shape: shape of the module's weight",
            lambda p: "Weight Shape",
            _info(lambda i: units.dims(i.weight_shape)),
            _has_table,
            by_default=False,
        ),
        Column(
            "mult_adds",
            "Mult-Adds: torchinfo's estimate (params x output size), per step",
            lambda p: "Mult-Adds",
            _mult_adds_cell,
            _has_table,
        ),
        Column(
            "macs",
            "MACs (fwd): measured multiply-accumulates of the forward ops, per step",
            lambda p: "MACs (fwd)",
            lambda ctx, n: units.si(n.forward.total.macs, "MAC", ctx.opts.raw_numbers),
            lambda p: p.flops.has_shapes,
        ),
        Column(
            "flops",
            "FLOPs: FLOPs of all passes, per step",
            lambda p: "FLOPs",
            lambda ctx, n: units.flops(n.total.flops, ctx.opts.raw_numbers),
            lambda p: p.flops.has_shapes,
            by_default=False,
        ),
        Column(
            "flop_rate",
            "FLOP/s: achieved, all passes, over the row's time",
            lambda p: "FLOP/s",
            lambda ctx, n: (
                units.flop_rate(ctx.profile.throughput(n.total).flop_per_s) if n.total.flops else "--"
            ),
            lambda p: p.flops.has_shapes,
            by_default=False,
        ),
        Column(
            "mfu",
            "MFU: achieved FLOP/s over the device's peak for the dtype used",
            lambda p: "MFU",
            lambda ctx, n: units.fraction(ctx.profile.throughput(n.total).mfu) if n.total.flops else "--",
            lambda p: p.flops.peak is not None and bool(p.flops.peak.flop_per_s),
        ),
        *(_pass_column(p) for p in PASSES),
        Column(
            "activations",
            "Activations: bytes the forward of the row (its subtree) allocated that are still "
            "allocated when the backward begins, per step, on the memory device",
            lambda p: "Activations",
            _activations_cell,
            _has_activations,
        ),
        Column(
            "share",
            "share of the step's GPU busy time (CPU time on CPU-only traces)",
            lambda p: f"{_time_name(p)} %",
            lambda ctx, n: units.percent(ctx.profile.share_of_step(n)),
        ),
        Column(
            "kernels",
            "GPU kernels launched, per step (titled Mean kernels for a mean of several steps)",
            lambda p: "Mean kernels" if averaged(p) else "Kernels",
            lambda ctx, n: units.count(n.total.kernels),
            lambda p: p.has_gpu,
        ),
        Column(
            "calls",
            "calls per step (titled Mean calls for a mean of several steps)",
            lambda p: "Mean calls" if averaged(p) else "Calls",
            lambda ctx, n: units.count(n.calls) if n.kind is NodeKind.MODULE else "",
            by_default=False,
        ),
        Column(
            "trainable",
            "Trainable: True, False or Partial",
            lambda p: "Trainable",
            _trainable_cell,
            _has_table,
            by_default=False,
        ),
        Column(
            "name",
            "qualified module name",
            lambda p: "Name",
            lambda ctx, n: n.qualified_name or n.name,
            by_default=False,
        ),
    )
}

#: shown only for profiles with compiled work joined to the compiled-kernel table (after the
#: pass columns by default; ``--columns`` takes it by name), so tables of other traces keep their
#: columns
FUSED_COLUMN = Column(
    "fused",
    "time of compiled kernels fused across modules, on their common ancestor (all passes, part "
    "of the pass columns)",
    lambda p: f"Fused {_time_name(p)}",
    lambda ctx, n: _time(ctx, fused_time(ctx.profile, n)) if n.fused is not None else "",
    lambda p: p.compiled is not None,
)

DEFAULT_COLUMNS = tuple(name for name, column in COLUMNS.items() if column.by_default)


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns`` value (comma list) -> column names; OptionError names the valid ones."""
    names = tuple(c.strip().lower().replace("-", "_") for c in text.split(",") if c.strip())
    bad = [c for c in names if c not in COLUMNS and c != FUSED_COLUMN.name]
    if bad or not names:
        raise OptionError(
            f"unknown column{'s' if len(bad) > 1 else ''} "
            f"{', '.join(repr(b) for b in bad) or repr(text)} for --columns "
            f"(known: {', '.join(COLUMNS)})"
        )
    return names


#: the width the table fits when COLUMNS is unset and standard output is no terminal (a file,
#: a pipe)
DEFAULT_WIDTH = 120

#: the columns left out first when the table is wider than the terminal (the measured times last)
DROP_ORDER = (
    "weight_shape",
    "trainable",
    "kernel",
    "flop_rate",
    "flops",
    "params_percent",
    "calls",
    "mult_adds",
    "input",
    "macs",
    "mfu",
    "name",
    "activations",
    "kernels",
    "output",
    "params",
    FUSED_COLUMN.name,
    "other",
    "bwd",
    "share",
    "fwd",
)

#: columns whose cells are cut with an ellipsis before any column is left out: shapes keep
#: their start, qualified names their end; never narrower than this (or their title)
_CUT_SHAPES = frozenset({"input", "output", "kernel", "weight_shape"})
_CUT_NAMES = frozenset({"name"})
_NARROWEST_CUT = 16
#: the narrowest the label column gets by cutting group names in their middle (module labels,
#: the tree's guides and depth-idx, are never cut)
_NARROWEST_LABEL = 32

#: a cell that shows nothing: ``--``, empty, or a zero in any unit (``0``, ``0%``, ``0 MAC``)
_NOTHING = re.compile(r"|--|0(?:\.0+)?(?: ?[^\d\s.,]\S*)?")


def table_width() -> int:
    """The width the table fits: ``COLUMNS`` when set, else the terminal's when standard output
    is one, else :data:`DEFAULT_WIDTH`."""
    # shutil.get_terminal_size's rule, without importing shutil for it (start-up)
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or DEFAULT_WIDTH  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return DEFAULT_WIDTH


def _default_columns(profile: ModuleProfile) -> list[Column]:
    cols = [COLUMNS[c] for c in DEFAULT_COLUMNS if COLUMNS[c].available(profile)]
    if FUSED_COLUMN.available(profile):
        after = max((i for i, c in enumerate(cols) if c.name in ("fwd", "bwd", "other")), default=-1)
        cols.insert(after + 1, FUSED_COLUMN)
    return cols


def _cut(column: Column, text: str, width: int) -> str:
    """A cell cut to ``width`` characters (a column narrowed to fit the terminal)."""
    if column.name in _CUT_NAMES:
        return units.label_tail(text, width)
    return units.label(text, width) if column.name in _CUT_SHAPES else text


class _Fit(msgspec.Struct, frozen=True):
    """How the table fits a width: the label column's width, the columns kept (indexes of the
    candidates) with their widths (padding included), and those left out."""

    label_width: int
    kept: list[int]
    widths: list[int]
    left_out: list[int]


def _fit(
    labels: tuple[int, int], cols: list[Column], headers: list[str], full: list[int], width: int
) -> _Fit:
    """Fit rows of a label column (``labels``: its full width, and its least: the module labels',
    with group names cut) and ``cols`` (widths ``full``) into ``width``: the label column loses
    torchinfo's spare room (40 wide, in fives) first, then the widest of the label, shape and
    name columns is cut, one character at a time, then the least important columns
    (:data:`DROP_ORDER`) are left out, one at a time, down to one. No row is wider than the
    table's rule."""

    def total(label_width: int, widths: list[int]) -> int:
        return label_width + sum(w + 1 for w in widths)

    label_len, label_least = labels
    least = [
        min(f, max(_NARROWEST_CUT, len(h)) + 1) if c.name in _CUT_SHAPES | _CUT_NAMES else f
        for c, h, f in zip(cols, headers, full)
    ]
    rank = {name: i for i, name in enumerate(DROP_ORDER)}
    kept = list(range(len(cols)))
    while len(kept) > 1 and total(label_least, [least[i] for i in kept]) > width:
        kept.remove(min(kept, key=lambda i: (rank.get(cols[i].name, len(rank)), -i)))
    widths = [full[i] for i in kept]
    roomy = max(40, math.ceil(label_len / 5) * 5)  # torchinfo's label column
    label_width = max(label_len, min(roomy, width - total(0, widths)))
    over = total(label_width, widths) - width
    while over > 0:
        spare = [(widths[k] - least[i], k) for k, i in enumerate(kept) if widths[k] > least[i]]
        if label_width > label_least:
            spare.append((label_width - label_least, -1))
        if not spare:
            break
        at = max(spare)[1]
        if at < 0:
            label_width -= 1
        else:
            widths[at] -= 1
        over -= 1
    return _Fit(label_width, kept, widths, [i for i in range(len(cols)) if i not in kept])


def _columns_note(empty: list[str], left_out: list[str], width: int, wrap: int) -> list[str]:
    """The note naming the columns not shown, and why, wrapped to ``wrap`` characters (the
    table's width) under its label as the header's lines; a column name is never cut (its
    spaces do not break a line; a name longer than the line overflows it)."""

    def names(titles: list[str]) -> str:
        return ", ".join(t.replace(" ", "\N{NO-BREAK SPACE}") for t in titles)

    parts = []
    if empty:
        parts.append(f"{names(empty)} not shown: nothing in them for this trace (--columns shows them)")
    if left_out:
        parts.append(f"{names(left_out)} left out to fit {width} characters (COLUMNS sets the width)")
    if not parts:
        return []
    label = "columns:   "
    lines = textwrap.wrap(
        "; ".join(parts),
        width=max(wrap, len(label) + 1),
        initial_indent=label,
        subsequent_indent=" " * len(label),
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace("\N{NO-BREAK SPACE}", " ") for line in lines]


def render_table(profile: ModuleProfile, opts: RenderOptions, width: int | None = None) -> str:
    """The table, fitted to ``width`` characters [default: :func:`table_width`]. The default
    columns leave out those with nothing in them for this profile (all zero or ``--``); columns
    named in ``opts.columns`` are shown even then."""
    width = table_width() if width is None else width
    chosen = opts.columns
    if chosen is None:
        cols = _default_columns(profile)
    else:
        cols = [FUSED_COLUMN if c == FUSED_COLUMN.name else COLUMNS[c] for c in chosen]
    stats = torchinfo_stats(profile)
    ctx = _Context(profile, opts, stats)
    nodes = _rows(profile)
    for n in nodes:  # torchinfo: a module met again is a recursive layer
        if n.kind is NodeKind.MODULE and n.info is not None:
            if n.info.name in ctx.seen:
                ctx.recursive.add(n.id)
            ctx.seen.add(n.info.name)
    labels = _layer_labels(profile)
    headers = [c.header(profile) for c in cols]
    cells = [[c.cell(ctx, n) for c in cols] for n in nodes]
    empty: list[str] = []
    if chosen is None:
        shown = [i for i in range(len(cols)) if not all(_NOTHING.fullmatch(r[i]) for r in cells)]
        empty = [headers[i] for i in range(len(cols)) if i not in shown]
        cols, headers = [cols[i] for i in shown], [headers[i] for i in shown]
        cells = [[r[i] for i in shown] for r in cells]
    label_len = max(len("Layer (type:depth-idx)"), *(len(labels[n.id]) for n in nodes)) + 1
    # group names (the unattributed bucket's) may be cut to fit; module labels never are
    label_least = max(
        len("Layer (type:depth-idx)"),
        *(len(labels[n.id]) for n in nodes if n.kind is NodeKind.MODULE),
        _NARROWEST_LABEL,
    )
    full = [max([len(h)] + [len(r[i]) for r in cells]) + 1 for i, h in enumerate(headers)]
    fit = _fit((label_len, min(label_len, label_least + 1)), cols, headers, full, width)
    shown_cols = [cols[i] for i in fit.kept]

    def row(label: str, values: list[str]) -> str:
        picked = [values[i] for i in fit.kept]
        line = f"{units.label_middle(label, fit.label_width - 1):<{fit.label_width}} " + "".join(
            f"{_cut(c, v, w - 1):<{w}} " for c, v, w in zip(shown_cols, picked, fit.widths)
        )
        return line.rstrip()

    rule = "=" * (fit.label_width + sum(w + 1 for w in fit.widths))
    left_out = [headers[i] for i in fit.left_out]
    out = header_lines(profile, opts) + _columns_note(empty, left_out, width, len(rule))
    out += [rule, row("Layer (type:depth-idx)", headers), rule]
    for node, values in zip(nodes, cells):
        if node.kind is NodeKind.UNATTRIBUTED:
            out.append(rule)
        out.append(row(labels[node.id], values))
    out.append(rule)
    block = totals_lines(stats, rule)
    if block:
        out += block + [rule]
    out += _measured_lines(profile, opts, stats)
    out.append(rule)
    return "\n".join(out) + "\n"


def _measured_lines(profile: ModuleProfile, opts: RenderOptions, stats: TorchinfoStats | None) -> list[str]:
    """traceprof's own totals, labelled apart from torchinfo's."""
    sel = profile.selection
    out = []
    if stats is not None and stats.unique_params is not None and stats.unique_params != stats.total_params:
        out.append(f"Unique params (shared tensors once): {units.grouped(stats.unique_params)}")
    out.append(f"Steps analysed: {sel.count} ({'mean per step' if sel.numbers else 'whole trace'})")
    if profile.has_gpu:
        by_pass = ", ".join(
            f"{p.value} {units.duration(sum(profile.nodes[r].phase(p).total.gpu_busy_us for r in profile.roots))}"
            for p in PASSES
        )
        out.append(f"GPU busy time per step: {units.duration(sel.gpu_busy_us)} ({by_pass})")
        out.append(f"Kernels per step{' (mean)' if averaged(profile) else ''}: {units.count(sel.kernels)}")
    out.append(
        f"CPU time per step: {units.duration(sel.cpu_in_ops_us)} in ops, "
        f"{units.duration(sel.cpu_between_ops_us)} between ops"
    )
    if profile.flops.has_shapes:
        fwd_macs = sum(profile.nodes[r].forward.total.macs for r in profile.roots)
        out.append(
            f"Measured MACs per step (traceprof.flops): {units.si(sel.macs, 'MAC')} "
            f"(forward {units.si(fwd_macs, 'MAC')})"
        )
        out.append(f"FLOPs per step: {units.flops(sel.flops, opts.raw_numbers)}")
    return out
