"""Renderers of a diff (traceprof.compare.model.DiffProfile), in a table by name and extension like the
single-trace ones: tree (text), json, csv, parquet, html (docs/diff.md)."""

from __future__ import annotations

from traceprof import units
from traceprof.compare.records import diff_json, diff_parquet, diff_rows
from traceprof.render import diff_html
from traceprof.render.csv_format import write_csv
from traceprof.render.registry import Registry, Renderer, RenderOptions, csv_renderer, parquet_renderer
from traceprof.result.metric import TimeMetric

# --- text tree

#: the marks of a node's status and of a change within the step-to-step spread
MARKS = {"added": "[added]", "removed": "[removed]"}
NOISE = "(noise)"


def _change(base: float, new: float, delta_ratio, raw: bool) -> str:
    d = units.signed_duration(new - base, raw)
    pct = f" {units.signed_percent(delta_ratio)}" if delta_ratio is not None and new != base else ""
    return f"{units.duration(base, raw)} -> {units.duration(new, raw)} ({d}{pct})"


def _fused_change(change, raw: bool, node=None) -> str | None:
    """``277.3 us -> fused into transformer.h.0``: a module (or one pass of it, ``change``)
    whose work moved into a kernel fused across modules on an ancestor (a compiled model), where
    -100% would read as gone."""
    node = node or change
    if node.new_fused_into and change.new_us == 0 and change.base_us > 0:
        return f"{units.duration(change.base_us, raw)} -> fused into {node.new_fused_into}"
    if node.base_fused_into and change.base_us == 0 and change.new_us > 0:
        return f"fused into {node.base_fused_into} -> {units.duration(change.new_us, raw)}"
    return None


def _spread(spread, raw: bool) -> str:
    return f" ±{units.duration(spread, raw)}" if spread is not None else ""


def _source(source: str) -> str:
    """Where a side's module tree comes from, as the header says it."""
    return "no module events" if source == "none" else f"modules from {source}"


def _steps(side) -> str:
    """The steps a side's numbers are of: ``3 steps``, or ``step 3 of 3 complete steps`` when one
    step was asked for."""
    if side.step_alone:
        return f"step {side.steps[0]} of {len(side.complete_steps)} complete steps"
    return f"{len(side.steps) or 'no'} step{'' if len(side.steps) == 1 else 's'}"


def render_tree(diff, opts: RenderOptions) -> str:
    raw = opts.raw_numbers
    b, n = diff.base, diff.new
    what = "GPU busy time" if diff.metric is TimeMetric.GPU_BUSY else "CPU time"
    lines = [
        "traceprof diff",
        f"base:      {b.path} ({b.device}, {_steps(b)}, {_source(b.source)})",
        f"new:       {n.path} ({n.device}, {_steps(n)}, {_source(n.source)})",
        f"step:      wall {_change(b.wall_us, n.wall_us, diff.wall_delta_ratio, raw)}"
        f"{_spread(diff.wall_spread_us, raw)}"
        + (
            f" {NOISE}"
            if diff.wall_spread_us is not None
            and diff.wall_delta_us != 0
            and abs(diff.wall_delta_us) <= diff.wall_spread_us
            else ""
        ),
        f"           {what} {_change(b.time_us, n.time_us, _ratio(b.time_us, n.time_us), raw)}",
        "where:     " + ", ".join(f"{k} {units.signed_duration(v, raw)}" for k, v in diff.where()),
        f"matched:   by {diff.matched_by}; times are {what} per step, all passes unless named"
        + ("; ± is the step-to-step spread" if diff.wall_spread_us is not None else ""),
    ]
    lines += _memory_lines(diff, raw)
    short = diff_html.diff_short_names(diff)
    ranked = [(m, d) for m, d in diff.most_changed() if abs(d) >= 0.05][:3]
    if ranked:
        lines.append(
            "most changed (own time): "
            + ", ".join(f"{_label(m, short)} {units.signed_duration(d, raw)}" for m, d in ranked)
        )
    for w in diff.warnings:
        lines.append(f"warning: {w}")
    lines.append("")
    for node in diff.walk():
        ind = "  " * node.depth
        # a tree: the node's own part of its path (the indentation gives the rest; names.py)
        label = node.name
        cls = f" ({node.class_name})" if node.class_name and node.qualified_name else ""
        mark = f" {MARKS[node.status.value]}" if node.status.value in MARKS else ""
        noise = f" {NOISE}" if node.noise else ""
        change = _fused_change(node, raw) or _change(node.base_us, node.new_us, node.delta_ratio, raw)
        line = f"{ind}{label}{cls}{mark}: {change}{_spread(node.spread_us, raw)}{noise}"
        if diff.overview:  # one line per node; what changed inside under the shown leaves
            lines.append(line + _passes_inline(node, raw))
            if not node.children and not node.noise:
                lines += _inside_lines(node, ind, raw)
            continue
        lines.append(line)
        for p in node.passes:
            if p.base_us == 0 and p.new_us == 0:
                continue
            extra = []
            if p.base_flops or p.new_flops:
                extra.append(f"{units.flops(p.base_flops, raw)} -> {units.flops(p.new_flops, raw)}")
            if p.base_flop_per_s or p.new_flop_per_s:
                extra.append(f"{units.flop_rate(p.base_flop_per_s)} -> {units.flop_rate(p.new_flop_per_s)}")
            if p.base_kernels or p.new_kernels:
                extra.append(f"kernels {units.count(p.base_kernels)} -> {units.count(p.new_kernels)}")
            if p.base_memory_peak_bytes is not None or p.new_memory_peak_bytes is not None:
                extra.append(
                    f"peak {units.byte_count(p.base_memory_peak_bytes, raw)} -> "
                    f"{units.byte_count(p.new_memory_peak_bytes, raw)}"
                )
            if p.base_activation_bytes is not None or p.new_activation_bytes is not None:
                extra.append(f"act {_bytes_change(p.base_activation_bytes, p.new_activation_bytes, raw)}")
            pnoise = f" {NOISE}" if p.noise else ""
            change = _fused_change(p, raw, node) or _change(p.base_us, p.new_us, p.delta_ratio, raw)
            lines.append(
                f"{ind}  {p.phase.short}: {change}{_spread(p.spread_us, raw)}{pnoise}"
                + (f"; {', '.join(extra)}" if extra else "")
            )
        lines += _inside_lines(node, ind, raw)
    return "\n".join(lines) + "\n"


def _bytes_change(base: float | None, new: float | None, raw: bool) -> str:
    """``25.7 MB -> 30.1 MB (+4.40 MB)``; ``--`` for a side without the number."""
    text = f"{units.byte_count(base, raw)} -> {units.byte_count(new, raw)}"
    if base is not None and new is not None and base != new:
        delta = units.byte_count(abs(new - base), raw)
        text += f" ({'+' if new > base else '-'}{delta})"
    return text


def _memory_lines(diff, raw: bool) -> list[str]:
    """The whole forward's activations and the step's peak by category, base -> new (sides with
    [memory] events and lifetimes)."""
    b, n = diff.base, diff.new
    if (
        b.peak_bytes is None
        and n.peak_bytes is None
        and b.activation_bytes is None
        and n.activation_bytes is None
    ):
        return []
    text = f"memory:    activations {_bytes_change(b.activation_bytes, n.activation_bytes, raw)} per step"
    text += f", peak {_bytes_change(b.peak_bytes, n.peak_bytes, raw)}"
    base, new = dict(b.peak_categories), dict(n.peak_categories)
    parts = [
        f"{name} {_bytes_change(base.get(name), new.get(name), raw)}"
        for name in dict.fromkeys([*base, *new])
        if base.get(name) or new.get(name)
    ]
    return [text + (f" (at the peak: {', '.join(parts)})" if parts else "")]


def _label(node, short: dict[str, str]) -> str:
    """A module's name in the text: its short name by key (the full one is in JSON and CSV), or
    the root's class."""
    return short.get(node.key) or node.qualified_name or node.class_name


def _passes_inline(node, raw: bool) -> str:
    """The overview's passes: each pass with time, its Δ (and noise mark), on the node's line;
    nothing when one pass holds all the time (the line's Δ is its)."""
    shown = [p for p in node.passes if p.base_us or p.new_us]
    if len(shown) < 2:
        return ""
    return "; " + ", ".join(
        f"{p.phase.short} {units.signed_duration(p.delta_us, raw)}" + (f" {NOISE}" if p.noise else "")
        for p in shown
    )


def _inside_lines(node, ind: str, raw: bool) -> list[str]:
    """The kernels or ops whose time changed most inside a changed, matched node."""
    if node.delta_us == 0 or not node.inside or node.status.value != "matched":
        return []
    lines = []
    for d in node.inside:
        mark = f" [{d.status.value}]" if d.status.value in MARKS else ""
        lines.append(
            f"{ind}  > {d.kind} {units.label(d.name)} ({d.phase.short}){mark}: "
            f"{units.duration(d.base_us, raw)} -> {units.duration(d.new_us, raw)} "
            f"({units.signed_duration(d.delta_us, raw)})"
        )
    return lines


def _ratio(base: float, new: float):
    return (new - base) / base if base > 0 else None


def render_json(diff, opts: RenderOptions) -> str:
    return diff_json(diff)


def render_csv(diff, opts: RenderOptions) -> str:
    rows = diff_rows(diff)
    return write_csv(rows, list(rows[0]) if rows else ["key"])


def render_parquet(diff, opts: RenderOptions) -> bytes:
    return diff_parquet(diff)


#: diff renderers by format name
DIFF_REGISTRY = Registry(
    "format {name!r} is not written for a diff (diff formats: {known})",
    (
        Renderer(
            "tree",
            (".txt",),
            "text tree: per node base -> new, Δ, the kernels or ops that changed most inside",
            render_tree,
        ),
        Renderer("json", (".json",), "JSON document, schema traceprof.diff/1", render_json),
        csv_renderer("one row per node x pass, largest |Δ| first", render_csv),
        parquet_renderer("one row per node x pass, typed (needs pyarrow)", render_parquet),
        Renderer(
            "html",
            (".html", ".htm"),
            "self-contained HTML page: base and new icicles on one scale, a Δ-coloured icicle",
            diff_html.render_html,
        ),
    ),
)


def render_diff(diff, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    return DIFF_REGISTRY.render(diff, fmt, options)
