"""The ops table of a module (``traceprof analyze TRACE --ops MODULE``): its top ops and kernels
per pass, from :func:`records.op_records`, as text, CSV, JSON or Parquet.

``MODULE`` is a qualified name (``layer1.0.conv1``), a node's display name or its path joined
with ``.``; ``*`` gives every node's own rows (one row per node x op or kernel x pass).
"""

from __future__ import annotations

import csv
import io
import json

from traceprof import units
from traceprof.errors import OptionError
from traceprof.result.model import ModuleNode, ModuleProfile
from traceprof.result.records import OP_FIELDS, OP_MODULES_FIELD, op_records

EVERY_NODE = "*"
FORMATS = ("tree", "table", "csv", "json", "parquet")
OPS_SCHEMA = "traceprof.ops/1"


def find_node(profile: ModuleProfile, module: str) -> ModuleNode:
    """The node ``module`` names: qualified name first, then display name, then dotted path."""
    for test in (
        lambda n: n.qualified_name == module,
        lambda n: n.name == module,
        lambda n: ".".join(p for p in n.path if p) == module,
    ):
        found = [n for n in profile.nodes if test(n)]
        if found:
            return found[0]
    names = [n.qualified_name or n.name for n in profile.nodes][:8]
    raise OptionError(f"--ops: no module {module!r} in the profile (e.g. {', '.join(names)})")


def render_ops(profile: ModuleProfile, module: str, fmt: str, raw: bool = False) -> str | bytes:
    if fmt not in FORMATS:
        raise OptionError(f"--ops writes {', '.join(FORMATS)}, not {fmt}")
    node = None if module == EVERY_NODE else find_node(profile, module)
    rows = op_records(profile, node)
    if fmt == "json":
        return json.dumps({"schema": OPS_SCHEMA, "module": module, "rows": rows}, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=_fields(profile), lineterminator="\n")
        writer.writeheader()
        writer.writerows(
            {
                **r,
                "input_shapes": r["input_shapes"] or "",
                "flop_per_s": "" if r["flop_per_s"] is None else r["flop_per_s"],
                **({OP_MODULES_FIELD: r[OP_MODULES_FIELD] or ""} if OP_MODULES_FIELD in r else {}),
            }
            for r in rows
        )
        return buf.getvalue()
    if fmt == "parquet":
        return _parquet(profile, rows, module)
    return _text(profile, node, rows, raw)


def _parquet(profile: ModuleProfile, rows: list[dict], module: str) -> bytes:
    from traceprof.errors import MissingDependencyError

    try:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError(
            "Parquet output needs pyarrow: pip install 'traceprof[parquet]'"
        ) from None
    frame = pd.DataFrame(rows, columns=_fields(profile)).astype({"flop_per_s": "float64", "node": "int64"})
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata(
        {
            **(table.schema.metadata or {}),
            b"traceprof.schema": OPS_SCHEMA.encode(),
            b"traceprof.module": module.encode("utf-8", "surrogateescape"),
            b"traceprof.trace": profile.metadata.path.encode("utf-8", "surrogateescape"),
        }
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _fields(profile: ModuleProfile) -> list[str]:
    """The columns of the rows: OP_FIELDS, and the modules of fused kernels with compiled work."""
    return list(OP_FIELDS) + ([OP_MODULES_FIELD] if profile.compiled is not None else [])


def _text(profile: ModuleProfile, node: ModuleNode | None, rows: list[dict], raw: bool) -> str:
    gpu = profile.has_gpu
    time_key = "gpu_busy_us" if gpu else "cpu_us"
    header = [
        "module",
        "pass",
        "kind",
        "name",
        "calls",
        "GPU time" if gpu else "CPU time",
        "share",
        "FLOPs",
        "FLOP/s",
        "input shapes",
    ]
    fused = any(r.get(OP_MODULES_FIELD) for r in rows)
    if fused:  # compiled kernels fused across modules: the modules of their ops
        header.append("fused across modules")
    if node is not None:
        header = header[1:]
    lines = []
    for r in rows:
        cells = [
            r["qualified_name"] or profile.nodes[r["node"]].name,
            r["pass"],
            r["kind"],
            _short(r["name"], 80),
            units.count(r["calls"]),
            units.duration(r[time_key], raw),
            units.percent(r["share_of_node"]),
            units.flops(r["flops"], raw) if r["flops"] else "--",
            units.flop_rate(r["flop_per_s"]) if r["flop_per_s"] else "--",
            units.dims(json.loads(r["input_shapes"])) if r["input_shapes"] else "--",
        ]
        if fused:
            cells.append(r[OP_MODULES_FIELD] or "--")
        lines.append(cells[1:] if node is not None else cells)
    widths = [max([len(h)] + [len(c[i]) for c in lines]) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    title = (
        f"ops and kernels of {node.qualified_name or node.name} (with its submodules), per "
        "step, largest first"
        if node is not None
        else "ops and kernels of every node (its own work), per step"
    )
    return "\n".join([title, fmt(header), fmt(["-" * w for w in widths])] + [fmt(c) for c in lines]) + "\n"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
