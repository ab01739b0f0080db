"""Renderers of a diff (traceprof.compare.diff.DiffProfile), in a table by name and extension like the
single-trace ones: tree (text), json, csv, parquet, html (docs/diff.md)."""

from __future__ import annotations

from traceprof import units
from traceprof.compare.records import diff_json, diff_parquet, diff_rows
from traceprof.render import diff_html
from traceprof.render.csv_format import write_csv
from traceprof.render.registry import Registry, Renderer, RenderOptions

# --- text tree

#: the marks of a node's status and of a change within the step-to-step spread
MARKS = {"added": "[added]", "removed": "[removed]"}
NOISE = "(noise)"


def _change(base: float, new: float, delta_ratio, raw: bool) -> str:
    d = units.signed_duration(new - base, raw)
    pct = f" {units.signed_percent(delta_ratio)}" if delta_ratio is not None and new != base else ""
    return f"{units.duration(base, raw)} -> {units.duration(new, raw)} ({d}{pct})"


def _spread(spread, raw: bool) -> str:
    return f" ±{units.duration(spread, raw)}" if spread is not None else ""


def render_tree(diff, opts: RenderOptions) -> str:
    raw = opts.raw_numbers
    b, n = diff.base, diff.new
    what = "GPU busy time" if diff.metric == "gpu_busy_us" else "CPU time"
    lines = [
        "traceprof diff",
        f"base:      {b.path} ({b.device}, {len(b.steps) or 'no'} steps, modules from {b.source})",
        f"new:       {n.path} ({n.device}, {len(n.steps) or 'no'} steps, modules from {n.source})",
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
    ranked = [m for m in diff.ranked() if abs(diff.own_delta_us(m)) >= 0.05][:3]
    if ranked:
        lines.append(
            "most changed (own time): "
            + ", ".join(
                f"{m.qualified_name or m.class_name} {units.signed_duration(diff.own_delta_us(m), raw)}"
                for m in ranked
            )
        )
    for w in diff.warnings:
        lines.append(f"warning: {w}")
    lines.append("")
    for node in diff.walk():
        ind = "  " * node.depth
        label = (node.qualified_name or node.class_name) if node.kind.value == "module" else node.name
        cls = f" ({node.class_name})" if node.class_name and node.qualified_name else ""
        mark = f" {MARKS[node.status.value]}" if node.status.value in MARKS else ""
        noise = f" {NOISE}" if node.noise else ""
        change = _change(node.base_us, node.new_us, node.delta_ratio, raw)
        lines.append(f"{ind}{label}{cls}{mark}: {change}{_spread(node.spread_us, raw)}{noise}")
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
            pnoise = f" {NOISE}" if p.noise else ""
            change = _change(p.base_us, p.new_us, p.delta_ratio, raw)
            lines.append(
                f"{ind}  {p.phase.short}: {change}{_spread(p.spread_us, raw)}{pnoise}"
                + (f"; {', '.join(extra)}" if extra else "")
            )
        if node.delta_us != 0 and node.inside and node.status.value == "matched":
            for d in node.inside:
                mark = f" [{d.status.value}]" if d.status.value in MARKS else ""
                lines.append(
                    f"{ind}  > {d.kind} {units.label(d.name)} ({d.phase.short}){mark}: "
                    f"{units.duration(d.base_us, raw)} -> {units.duration(d.new_us, raw)} "
                    f"({units.signed_duration(d.delta_us, raw)})"
                )
    return "\n".join(lines) + "\n"


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
        Renderer(
            "csv", (".csv",), "one row per node x pass, largest |Δ| first", render_csv, shows_warnings=False
        ),
        Renderer(
            "parquet",
            (".parquet", ".pq"),
            "one row per node x pass, typed (needs pyarrow)",
            render_parquet,
            binary=True,
            shows_warnings=False,
        ),
        Renderer(
            "html",
            (".html", ".htm"),
            "self-contained HTML page: base and new icicles on one scale, a Δ-coloured icicle",
            diff_html.render_html,
        ),
    ),
)
get_diff = DIFF_REGISTRY.renderer


def render_diff(diff, fmt: str, options: RenderOptions | None = None) -> str | bytes:
    return DIFF_REGISTRY.render(diff, fmt, options)
