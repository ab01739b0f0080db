"""A profile as flat records: one dict per node with typed, unit-named fields, and the same
rows as a typed DataFrame or Parquet table; the JSON document of a profile.

Shared by the JSON, CSV and Parquet renderers and by ModuleProfile.to_dataframe/to_parquet, so
that all of them agree. Depends on the profile only: the profile never imports the renderers.
"""

from __future__ import annotations

import json
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from msgspec.structs import asdict, astuple

from traceprof.result.memory import MemoryUse
from traceprof.result.params import CountedOnce, params_counted_once
from traceprof.result.parquet import rows_parquet
from traceprof.result.times import FUSED_FIELDS, PASSES, OpKind, OpStat, PhaseTimes, Times, bounded

if TYPE_CHECKING:
    import pandas as pd

    from traceprof.result.model import ModuleNode, ModuleProfile

#: version of the JSON document written by ``--format json`` (docs/output-formats.md)
JSON_SCHEMA = "traceprof.profile/3"
#: derived per-node rates (ModuleProfile.throughput), per pass, after the additive fields
RATE_FIELDS = ("flop_per_s", "mfu", "bytes_per_s", "bandwidth_use")
#: memory per pass on ModuleProfile.memory_device (None: no [memory] events there)
MEMORY_FIELDS = ("allocated_bytes", "freed_bytes", "peak_bytes")
#: activations on ModuleProfile.memory_device, after the memory fields (None: not known)
ACTIVATION_FIELDS = ("activation_bytes", "own_activation_bytes")


#: the columns of :func:`profile_rows` whose type is not the one their values give (pandas'
#: names: to_dataframe's and the Parquet file's)
PROFILE_TYPES = {
    "calls": "float64",
    "depth": "int64",
    **{f"{phase.value}_{key}": "float64" for phase in PASSES for key in RATE_FIELDS},
    **{f"{phase.value}_{key}": "float64" for phase in PASSES for key in MEMORY_FIELDS},
    **dict.fromkeys(ACTIVATION_FIELDS, "float64"),
}


class _PassKeys(NamedTuple):
    """The keys of a node's record in one pass, spelled once (an enum's value and an f-string
    per field and node took most of the time of the records of a large tree)."""

    attr: str  # the pass's attribute: forward, backward, other
    total: tuple[str, ...]
    own: tuple[str, ...]
    rates: tuple[str, ...]
    memory: tuple[str, ...]
    fused_total: tuple[str, ...]
    fused_own: tuple[str, ...]


_PASS_KEYS = tuple(
    _PassKeys(
        p.value,
        tuple(f"{p.value}_total_{key}" for key in Times.__struct_fields__),
        tuple(f"{p.value}_own_{key}" for key in Times.__struct_fields__),
        tuple(f"{p.value}_{key}" for key in RATE_FIELDS),
        tuple(f"{p.value}_{key}" for key in MEMORY_FIELDS),
        tuple(f"{p.value}_total_fused_{key}" for key in FUSED_FIELDS),
        tuple(f"{p.value}_own_fused_{key}" for key in FUSED_FIELDS),
    )
    for p in PASSES
)
#: a record's keys of the times (each pass's totals and own), then of the rates (each pass's)
_TIME_KEYS = tuple(key for k in _PASS_KEYS for key in (*k.total, *k.own)) + tuple(
    key for k in _PASS_KEYS for key in k.rates
)
#: a record's keys of the memory of each pass, and those keys' values where there is none
_MEMORY_KEYS = tuple(key for k in _PASS_KEYS for key in k.memory)
_NO_MEMORY_RECORD = dict.fromkeys((*_MEMORY_KEYS, *ACTIVATION_FIELDS))
_RATES = attrgetter(*RATE_FIELDS)
_MEMORY = attrgetter(*MEMORY_FIELDS)
_FUSED = attrgetter(*FUSED_FIELDS)


def has_fused(profile: ModuleProfile) -> bool:
    """Whether the profile's modules carry fused records (kernels fused across modules, which
    the compiled-kernel table joins, or whose kernel labels name several modules): the fused
    fields of the records and the modules of the ops' rows."""
    return profile.compiled is not None or any(profile.nodes[r].fused is not None for r in profile.roots)


def node_record(
    profile: ModuleProfile, node: ModuleNode, once: dict[str, CountedOnce] | None = None
) -> dict[str, Any]:
    """The node's fields; ``once``: the profile's params_counted_once (computed when None)."""
    info = node.info
    if once is None:
        once = params_counted_once(profile)
    rec: dict[str, Any] = {
        "id": node.id,
        "parent": node.parent,
        "depth": node.depth,
        "kind": node.kind.value,
        "name": node.name,
        "class_name": node.class_name,
        "qualified_name": node.qualified_name,
        "calls": node.calls,
        "share_of_step": profile.share_of_step(node),
    }
    phases = [getattr(node, k.attr) for k in _PASS_KEYS]
    values: list[Any] = []  # in the order of _TIME_KEYS: one update of the record, not twelve
    for p in phases:
        values += astuple(p.total)
        values += astuple(p.own)
    for p in phases:
        values += _RATES(profile.throughput(p.total))
    rec.update(zip(_TIME_KEYS, values))
    rec["memory_device"] = profile.memory_device
    use = profile.memory_of(node)
    if use is None:
        rec.update(_NO_MEMORY_RECORD)
    else:
        values = []
        for k in _PASS_KEYS:
            values += _MEMORY(getattr(use, k.attr))
        rec.update(zip(_MEMORY_KEYS, values))
        rec["activation_bytes"] = use.activation_bytes
        rec["own_activation_bytes"] = use.own_activation_bytes
    if has_fused(profile):  # kernels fused across modules (traces with compiled work, or labels)
        for k in _PASS_KEYS:
            fused = getattr(node.fused, k.attr) if node.fused is not None else PhaseTimes()
            rec.update(zip(k.fused_total, _FUSED(fused.total)))
            rec.update(zip(k.fused_own, _FUSED(fused.own)))
    rec["params_total"] = info.params_total if info else None
    rec["params"] = info.params if info else None
    counted = once.get(info.name) if info else None
    # of params_total, those counted in a module outside it (tied weights; result/params.py)
    rec["params_tied"] = (info.params_total or 0) - counted.params if info and counted else None
    rec["input_shapes"] = info.inputs if info else None
    rec["output_shapes"] = info.outputs if info else None
    rec["extra_repr"] = info.extra_repr if info else None
    return rec


def profile_rows(profile: ModuleProfile) -> list[dict[str, Any]]:
    """Flat rows (nested shapes as JSON text) for CSV and pandas."""
    rows = []
    once = params_counted_once(profile)
    for node in profile.walk():
        rec = node_record(profile, node, once)
        for key in ("input_shapes", "output_shapes"):
            rec[key] = json.dumps(rec[key], separators=(",", ":")) if rec[key] is not None else ""
        rec["params_total"] = rec["params_total"] if rec["params_total"] is not None else -1
        rec["params"] = rec["params"] if rec["params"] is not None else -1
        rec["params_tied"] = rec["params_tied"] if rec["params_tied"] is not None else -1
        rec["extra_repr"] = rec["extra_repr"] or ""
        rec["memory_device"] = rec["memory_device"] or ""
        rows.append(rec)
    return rows


def profile_dataframe(profile: ModuleProfile) -> pd.DataFrame:
    """:func:`profile_rows` as a pandas DataFrame with typed columns (needs pandas)."""
    import pandas as pd

    return pd.DataFrame(profile_rows(profile)).astype(PROFILE_TYPES)


def parquet_bytes(profile: ModuleProfile) -> bytes:
    """:func:`profile_rows` as a Parquet file, typed as :func:`profile_dataframe`, with the
    trace, the schema, the hierarchy source and the warnings in its metadata (needs pyarrow)."""
    rows = profile_rows(profile)
    return rows_parquet(
        rows,
        list(rows[0]) if rows else [],
        PROFILE_TYPES,
        {
            "schema": JSON_SCHEMA,
            "trace": profile.metadata.path.encode("utf-8", "surrogateescape"),
            "hierarchy": profile.source,
            "warnings": json.dumps(list(profile.warnings)),
        },
    )


#: columns of the per-module ops table (``--ops``, the JSON ``ops`` section); profiles with
#: compiled work add OP_MODULES_FIELD: the modules a fused kernel's ops belong to
OP_FIELDS = (
    "node",
    "qualified_name",
    "pass",
    "kind",
    "name",
    "input_shapes",
    "calls",
    "kernels",
    "gpu_busy_us",
    "gpu_work_us",
    "cpu_us",
    "flops",
    "share_of_node",
    "flop_per_s",
)
OP_MODULES_FIELD = "modules"


def op_records(profile: ModuleProfile, node: ModuleNode | None = None) -> list[dict[str, Any]]:
    """Rows of the ops table. Without ``node``: every node's own ops and kernels per pass (one row
    per node x op or kernel x pass; they add up to the node's own work). With ``node``: the ops
    and kernels of its whole subtree, merged by name, shapes and pass. ``share_of_node``: the
    row's time (GPU busy time; CPU time on CPU-only traces) over the node's total, all passes;
    ``flop_per_s``: its FLOPs over that time."""
    field = "gpu_busy_us" if profile.has_gpu else "cpu_us"
    groups: list[tuple[ModuleNode, tuple[OpStat, ...]]]
    if node is None:
        groups = [(n, n.ops) for n in profile.walk()]
    else:
        rows = [o for n in profile.walk(node.id) for o in n.ops]
        groups = [(node, bounded(rows, limit=len(rows) or 1))]
    fused = has_fused(profile)
    kinds = {k: k.value for k in OpKind}  # an enum's .value is a descriptor call: once per kind
    shown = attrgetter(field)
    out = []
    for n, ops in groups:
        whole = shown(n.total)
        node_id, qualified_name = n.id, n.qualified_name
        for o in ops:
            time = shown(o)
            row = {
                "node": node_id,
                "qualified_name": qualified_name,
                "pass": o.phase,
                "kind": kinds[o.kind],
                "name": o.name,
                "input_shapes": o.input_shapes,
                "calls": o.calls,
                "kernels": o.kernels,
                "gpu_busy_us": o.gpu_busy_us,
                "gpu_work_us": o.gpu_work_us,
                "cpu_us": o.cpu_us,
                "flops": o.flops,
                "share_of_node": time / whole if whole > 0 else 0.0,
                "flop_per_s": o.flops / (time * 1e-6) if o.flops and time > 0 else None,
            }
            if fused:
                row[OP_MODULES_FIELD] = o.modules
            out.append(row)
    return out


def _memory_record(m: MemoryUse) -> dict[str, Any]:
    """One device's memory use as a dict of its passes (built here, field by field: the structs
    are stored as arrays in the cache)."""
    return {
        "device": m.device,
        **{p.value: asdict(m.phase(p)) for p in PASSES},
        "activation_bytes": m.activation_bytes,
        "own_activation_bytes": m.own_activation_bytes,
    }


def profile_document(profile: ModuleProfile, timeline: bool = False) -> dict[str, Any]:
    """The JSON document; ``timeline``: with the profile's timeline of a step (``timeline``,
    schema ``traceprof.timeline/1``), as the TensorBoard tab reads it."""
    md = profile.metadata
    once = params_counted_once(profile)
    doc: dict[str, Any] = {
        "schema": JSON_SCHEMA,
        "trace": {
            "path": md.path,
            "size_bytes": md.size_bytes,
            "schema_version": md.schema_version,
            "devices": [asdict(d) for d in md.devices],
            "rank": md.rank,
            "world_size": md.world_size,
            "flags": md.flags,
        },
        "hierarchy": {
            "source": profile.source,
            "description": profile.source_description,
            "module_nodes": profile.module_nodes,
        },
        "steps": {**asdict(profile.selection), "cpu_in_ops_us": profile.selection.cpu_in_ops_us},
        "stats": asdict(profile.stats),
        "flops": flops_section(profile),
        "warnings": list(profile.warnings),
        "roots": list(profile.roots),
        "nodes": [  # memory: its passes as dicts too
            {
                **node_record(profile, n, once),
                "children": list(n.children),
                "path": list(n.path),
                "memory": [_memory_record(m) for m in n.memory],
            }
            for n in profile.walk()
        ],
        "ops": op_records(profile),
    }
    doc["memory"] = memory_section(profile)
    if profile.compiled is not None:
        doc["compiled"] = asdict(profile.compiled)
    if timeline:
        doc["timeline"] = profile.timeline.document() if profile.timeline else None
    return doc


def memory_section(profile: ModuleProfile) -> dict[str, Any] | None:
    """What holds the memory device's memory (``ModuleProfile.memory_summary``); None for a
    trace without [memory] events."""
    summary = profile.memory_summary
    if summary is None:
        return None
    doc = asdict(summary)
    for key in ("peak", "forward_end"):
        moment = getattr(summary, key)
        if moment is not None:
            doc[key] = {
                **asdict(moment),
                "module_path": list(moment.module_path),
                "activations_by_module": [
                    {"qualified_name": h.qualified_name, "path": list(h.path), "bytes": h.bytes}
                    for h in moment.activations_by_module
                ],
            }
    doc["recomputed_modules"] = list(summary.recomputed_modules)
    return doc


def flops_section(profile: ModuleProfile) -> dict[str, Any]:
    summary = profile.flops
    return {
        "has_shapes": summary.has_shapes,
        "flops_by_precision": dict(summary.flops_by_precision),
        "peak": asdict(summary.peak) if summary.peak else None,
        "achieved": asdict(profile.throughput(profile.selection)),
        "unsupported": [asdict(u) for u in summary.unsupported],
    }
