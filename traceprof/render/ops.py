"""The ops table of a module (``traceprof analyze TRACE --ops MODULE``): its top ops and kernels
per pass, from :func:`records.op_records`, as text, CSV, JSON or Parquet.

``MODULE`` is found as :meth:`ModuleProfile.find` finds a node: a qualified name
(``layer1.0.conv1``), a class or short name, the end of a qualified name, or a part of one that
only one node has (``encoder``); ``*`` gives every node's own rows (one row per node x op or
kernel x pass). The text shows ops and kernels in two sections and leaves out rows without time
(the Python frames of a ``with_stack`` trace) unless asked for all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from traceprof import units
from traceprof.errors import ModuleLookupError, OptionError
from traceprof.render.csv_format import write_csv
from traceprof.result import shaping
from traceprof.result.model import ModuleNode, ModuleProfile, OpKind, did_you_mean
from traceprof.result.names import path_parts, short_name_map
from traceprof.result.parquet import rows_parquet
from traceprof.result.records import OP_FIELDS, OP_MODULES_FIELD, has_fused, op_records
from traceprof.result.shaping import SortKey

EVERY_NODE = "*"
FORMATS = ("tree", "table", "csv", "json", "parquet")
OPS_SCHEMA = "traceprof.ops/1"
#: the sections of the text view, in order: the CPU ops, each with the GPU time of the kernels it
#: launched, then those kernels by name. The two hold the same GPU time twice, so each section's
#: shares add up to the module's whole time, and one list of both to 200%.
SECTIONS = (OpKind.OP, OpKind.KERNEL)


def find_node(profile: ModuleProfile, module: str) -> ModuleNode:
    """The node ``module`` names, found as :meth:`ModuleProfile.find` finds it (a qualified
    name, a class or short name, a unique part of one); a miss names close modules."""
    try:
        return profile.find(module)
    except ModuleLookupError as e:
        message = (
            e.message if e.matches else f"no module {module!r} in the profile{did_you_mean(e.suggestions)}"
        )
        raise ModuleLookupError(f"--ops: {message}", e.matches, e.suggestions) from None


#: ``--sort`` keys of the ops rows and the field each orders by (largest first; name: A-Z);
#: ``order`` and ``gpu``: the view's time, the rows' own order. The pass keys do not apply: the
#: rows are per pass already.
OPS_SORT_FIELDS = {
    SortKey.ORDER: None,
    SortKey.GPU: None,
    SortKey.CPU: "cpu_us",
    SortKey.KERNELS: "kernels",
    SortKey.CALLS: "calls",
    SortKey.FLOPS: "flops",
    SortKey.NAME: "name",
}


def _ops_sort(sort: SortKey | str) -> str | None:
    """The row field ``--sort`` orders the ops rows by (None: their own order, largest time
    first); a one-line OptionError for a key that does not apply."""
    try:
        key = SortKey(sort)
    except ValueError:
        key = None
    if key not in OPS_SORT_FIELDS:
        raise OptionError(
            f"--sort {sort} does not apply to --ops (its rows are per op, kernel and pass; "
            f"sort keys there: {', '.join(k.value for k in OPS_SORT_FIELDS)})"
        )
    return OPS_SORT_FIELDS[key]


def _row_value(field: str | None) -> Callable[[dict], Any]:
    """The ascending sort key of a row by ``field`` (None: the rows' own order)."""
    if field is None:
        return lambda r: 0
    if field == "name":
        return lambda r: r["name"]
    return lambda r: -(r[field] or 0)


def shaped_rows(rows: list[dict], sort: SortKey | str = SortKey.ORDER, top: int | None = None) -> list[dict]:
    """``rows`` shaped as a tree's siblings: with ``top``, the ``top`` largest of each kind
    (ops, kernels) kept, by ``sort``'s size (the rows' own order, largest time first, for
    ``name`` and ``order``); then ordered by ``sort``."""
    shaping.check_top(top)
    field = _ops_sort(sort)
    if top is not None:
        size = _row_value(_ops_sort(shaping.size_key(SortKey(sort))))
        kept: set[int] = set()
        for kind in dict.fromkeys(r["kind"] for r in rows):
            largest, _ = shaping.keep_largest([r for r in rows if r["kind"] == kind], top, size)
            kept.update(id(r) for r in largest)
        rows = [r for r in rows if id(r) in kept]
    return rows if field is None else sorted(rows, key=_row_value(field))


def render_ops(
    profile: ModuleProfile,
    module: str,
    fmt: str,
    raw: bool = False,
    all_rows: bool = False,
    *,
    top: int | None = None,
    sort: SortKey | str = SortKey.ORDER,
) -> str | bytes:
    """The ops table of ``module`` in ``fmt``. Text (tree, table): ops and kernels in two
    sections, rows without time left out unless ``all_rows``; CSV, JSON and Parquet: every row,
    ops and kernels told apart by ``kind``. ``sort``: the rows' order (default: largest time
    first); ``top``: the first N rows of each section (every format), how many were left out
    said in the text."""
    if fmt not in FORMATS:
        raise OptionError(f"--ops writes {', '.join(FORMATS)}, not {fmt}")
    node = None if module == EVERY_NODE else find_node(profile, module)
    every = op_records(profile, node)
    rows = shaped_rows(every, sort, top)
    if fmt == "json":
        return json.dumps({"schema": OPS_SCHEMA, "module": module, "rows": rows}, indent=1) + "\n"
    if fmt == "csv":
        return write_csv(
            (
                {
                    **r,
                    "input_shapes": r["input_shapes"] or "",
                    "flop_per_s": "" if r["flop_per_s"] is None else r["flop_per_s"],
                    **({OP_MODULES_FIELD: r[OP_MODULES_FIELD] or ""} if OP_MODULES_FIELD in r else {}),
                }
                for r in rows
            ),
            _fields(profile),
        )
    if fmt == "parquet":
        return _parquet(profile, rows, module)
    order = "largest first" if _ops_sort(sort) is None else f"by {SortKey(sort).value}"
    return units.printable(_text(profile, node, rows, raw, all_rows, len(every) - len(rows), order))


def _parquet(profile: ModuleProfile, rows: list[dict], module: str) -> bytes:
    return rows_parquet(
        rows,
        _fields(profile),
        {"flop_per_s": "float64", "node": "int64"},
        {
            "schema": OPS_SCHEMA,
            "module": module.encode("utf-8", "surrogateescape"),
            "trace": profile.metadata.path.encode("utf-8", "surrogateescape"),
        },
    )


def _fields(profile: ModuleProfile) -> list[str]:
    """The columns of the rows: OP_FIELDS, and the modules of fused kernels (compiled work,
    kernel labels)."""
    return list(OP_FIELDS) + ([OP_MODULES_FIELD] if has_fused(profile) else [])


def _text(
    profile: ModuleProfile,
    node: ModuleNode | None,
    rows: list[dict],
    raw: bool,
    all_rows: bool,
    beyond_top: int = 0,
    order: str = "largest first",
) -> str:
    """The title, a table per section (SECTIONS) and, when rows were left out, how many."""
    time_key, time_name = ("gpu_busy_us", "GPU time") if profile.has_gpu else ("cpu_us", "CPU time")
    shown = rows if all_rows else [r for r in rows if r[time_key] > 0]
    title = (
        f"ops and kernels of {_heading_name(profile, node)} (with its submodules), per "
        f"step, {order}; shares of its {time_name}"
        if node is not None
        else f"ops and kernels of every node (its own work), per step; shares of the node's {time_name}"
    )
    tables = [
        _table(profile, node is None, part, time_key, time_name, raw)
        for kind in SECTIONS
        if (part := [r for r in shown if r["kind"] == kind.value])
    ]
    hidden = len(rows) - len(shown)
    rows_word = "row" if hidden == 1 else "rows"
    notes = [f"{hidden} {rows_word} without {time_name} not shown (--all shows them)"] if hidden else []
    if beyond_top:
        notes.append(f"{beyond_top} more row{'s' if beyond_top != 1 else ''} past --top not shown")
    return title + "\n" + "\n\n".join(tables + notes) + "\n"


def _table(
    profile: ModuleProfile, every_node: bool, rows: list[dict], time_key: str, time_name: str, raw: bool
) -> str:
    """One section: its header, a rule and its rows (already in order), columns padded."""
    kernels = rows[0]["kind"] == OpKind.KERNEL.value
    header = ["module"] * every_node + ["pass", "kind", "name", "calls", time_name, "share"]
    if not kernels:  # FLOPs and shapes belong to ops; a kernel row has neither
        header += ["FLOPs", "FLOP/s", "input shapes"]
    fused = any(r.get(OP_MODULES_FIELD) for r in rows)
    if fused:  # compiled kernels fused across modules: the modules of their ops
        header.append("fused across modules")
    lines = []
    short = _short_names(profile) if every_node else {}
    for r in rows:
        cells = [
            short.get(r["node"]) or r["qualified_name"] or profile.nodes[r["node"]].name
        ] * every_node + [
            r["pass"],
            r["kind"],
            _short(r["name"], 80),
            units.count(r["calls"]),
            units.duration(r[time_key], raw),
            units.percent(r["share_of_node"]),
        ]
        if not kernels:
            cells += [
                units.flops(r["flops"], raw) if r["flops"] else "--",
                units.flop_rate(r["flop_per_s"]) if r["flop_per_s"] else "--",
                units.dims(json.loads(r["input_shapes"])) if r["input_shapes"] else "--",
            ]
        if fused:
            cells.append(r[OP_MODULES_FIELD] or "--")
        lines.append([units.printable(c) for c in cells])  # escaped before the columns are measured
    widths = [max([len(h)] + [len(c[i]) for c in lines]) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(c) for c in lines])


def _heading_name(profile: ModuleProfile, node: ModuleNode) -> str:
    """The module in the heading: its short name among the profile's modules, with its class
    (the qualified name is in every row of the data formats)."""
    if not node.qualified_name:
        return node.class_name or node.name
    short = _short_names(profile)[node.id] or node.qualified_name
    return f"{short} ({node.class_name})" if node.class_name else short


def _short_names(profile: ModuleProfile) -> dict[int, str]:
    """Short display names of the profile's nodes by node id: tails of their paths, told apart
    among all the profile's nodes (traceprof.result.names)."""
    return short_name_map({n.id: path_parts(n.path, n.name) for n in profile.nodes})


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
