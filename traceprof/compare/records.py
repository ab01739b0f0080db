"""A diff as flat records: one row per node x pass, sorted by |Δ| (largest first), and the JSON
document, DataFrame and Parquet table built from them (docs/diff.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from msgspec.structs import asdict

from traceprof.result.parquet import rows_parquet

if TYPE_CHECKING:  # compare.model imports this module when asked for its rows
    from traceprof.compare.model import DiffProfile
    from traceprof.compare.nodes import InsideDelta

#: version of the JSON document written by ``traceprof diff --format json``
DIFF_JSON_SCHEMA = "traceprof.diff/1"


def diff_rows(diff: DiffProfile) -> list[dict[str, Any]]:
    """One dict per node and pass, largest |Δ| first (ties in tree order)."""
    rows: list[dict[str, Any]] = []
    for node in diff.walk():
        parent = diff.nodes[node.parent].key if node.parent >= 0 else ""
        for p in node.passes:
            inside = [d for d in node.inside if d.phase is p.phase]
            rows.append(
                {
                    "key": node.key,
                    "parent_key": parent,
                    "depth": node.depth,
                    "kind": node.kind.value,
                    "status": node.status.value,
                    "name": node.name,
                    "class_name": node.class_name,
                    "qualified_name": node.qualified_name,
                    "pass": p.phase.value,
                    "base_us": p.base_us,
                    "new_us": p.new_us,
                    "delta_us": p.delta_us,
                    "delta_ratio": p.delta_ratio,
                    "spread_us": p.spread_us,
                    "noise": p.noise,
                    "base_flops": p.base_flops,
                    "new_flops": p.new_flops,
                    "base_kernels": p.base_kernels,
                    "new_kernels": p.new_kernels,
                    "base_flop_per_s": p.base_flop_per_s,
                    "new_flop_per_s": p.new_flop_per_s,
                    "base_memory_peak_bytes": p.base_memory_peak_bytes,
                    "new_memory_peak_bytes": p.new_memory_peak_bytes,
                    "base_calls": p.base_calls,
                    "new_calls": p.new_calls,
                    "base_activation_bytes": p.base_activation_bytes,
                    "new_activation_bytes": p.new_activation_bytes,
                    "inside": json.dumps([_inside_record(d) for d in inside], separators=(",", ":")),
                    "_order": len(rows),
                }
            )
    rows.sort(key=lambda r: (-abs(r["delta_us"]), r["_order"]))
    for r in rows:
        del r["_order"]
    return rows


def _inside_record(d: InsideDelta) -> dict[str, Any]:
    return {
        "kind": d.kind,
        "name": d.name,
        "status": d.status.value,
        "base_us": d.base_us,
        "new_us": d.new_us,
        "delta_us": d.delta_us,
    }


def diff_document(diff) -> dict:
    """The JSON document: both sides' summaries, where the step's Δ went, the nodes as a tree
    (each with its passes and the kernels or ops that changed most inside it) and the rows."""

    def side(s) -> dict:
        return {**asdict(s), "idle_us": s.idle_us, "peak_categories": dict(s.peak_categories)}

    return {
        "schema": DIFF_JSON_SCHEMA,
        "metric": diff.metric.value,
        "matched_by": diff.matched_by,
        "base": side(diff.base),
        "new": side(diff.new),
        "step": {
            "wall_delta_us": diff.wall_delta_us,
            "wall_delta_ratio": diff.wall_delta_ratio,
            "wall_spread_us": diff.wall_spread_us,
            "where": dict(diff.where()),
        },
        "warnings": list(diff.warnings),
        "roots": list(diff.roots),
        "nodes": [
            {
                "id": n.id,
                "parent": n.parent,
                "children": list(n.children),
                "depth": n.depth,
                "key": n.key,
                "name": n.name,
                "class_name": n.class_name,
                "qualified_name": n.qualified_name,
                "kind": n.kind.value,
                "status": n.status.value,
                "base_us": n.base_us,
                "new_us": n.new_us,
                "delta_us": n.delta_us,
                "delta_ratio": n.delta_ratio,
                "spread_us": n.spread_us,
                "noise": n.noise,
                "base_fused_into": n.base_fused_into,
                "new_fused_into": n.new_fused_into,
                "passes": [
                    {
                        **asdict(p),
                        "pass": p.phase.value,
                        "delta_us": p.delta_us,
                        "delta_ratio": p.delta_ratio,
                        "noise": p.noise,
                    }
                    for p in n.passes
                ],
                "inside": [{**_inside_record(d), "pass": d.phase.value} for d in n.inside],
            }
            for n in diff.walk()
        ],
    }


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k != "phase"}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def diff_json(diff) -> str:
    return json.dumps(_clean(diff_document(diff)), indent=1) + "\n"


_FLOAT_COLUMNS = (
    "base_us",
    "new_us",
    "delta_us",
    "delta_ratio",
    "spread_us",
    "base_flops",
    "new_flops",
    "base_kernels",
    "new_kernels",
    "base_flop_per_s",
    "new_flop_per_s",
    "base_memory_peak_bytes",
    "new_memory_peak_bytes",
    "base_calls",
    "new_calls",
    "base_activation_bytes",
    "new_activation_bytes",
)
#: the rows' column types (pandas' names: to_dataframe's and the Parquet file's)
DIFF_TYPES = {**dict.fromkeys(_FLOAT_COLUMNS, "float64"), "depth": "int64", "noise": "bool"}


def diff_dataframe(diff):
    """:func:`diff_rows` as a pandas DataFrame with typed columns (needs pandas)."""
    import pandas as pd

    rows = diff_rows(diff)
    df = pd.DataFrame(rows, columns=list(rows[0]) if rows else None)
    return df.astype(DIFF_TYPES)


def diff_parquet(diff) -> bytes:
    rows = diff_rows(diff)
    return rows_parquet(
        rows,
        list(rows[0]) if rows else [],
        DIFF_TYPES,
        {
            "schema": DIFF_JSON_SCHEMA,
            "base": diff.base.path.encode("utf-8", "surrogateescape"),
            "new": diff.new.path.encode("utf-8", "surrogateescape"),
            "warnings": json.dumps(list(diff.warnings)),
        },
    )
