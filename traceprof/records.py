"""A profile as flat records: one dict per node with typed, unit-named fields.

Shared by the JSON and CSV renderers and the pandas view, so that all three agree.
"""

from __future__ import annotations

from dataclasses import fields

from ..profile import PASSES, ModuleNode, ModuleProfile, Times

#: version of the JSON document written by ``--format json`` (docs/output-formats.md)
JSON_SCHEMA = "traceprof.profile/3"
#: derived per-node rates (ModuleProfile.throughput), per pass, after the additive fields
RATE_FIELDS = ("flop_per_s", "mfu", "bytes_per_s", "bandwidth_use")
#: memory per pass on ModuleProfile.memory_device (None: no [memory] events there)
MEMORY_FIELDS = ("allocated_bytes", "freed_bytes", "peak_bytes")


def times_record(t: Times) -> dict[str, float]:
    return {f.name: getattr(t, f.name) for f in fields(Times)}


def node_record(profile: ModuleProfile, node: ModuleNode) -> dict:
    info = node.info
    rec = {
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
    for phase in PASSES:
        p = node.phase(phase)
        for scope, t in (("total", p.total), ("own", p.own)):
            for key, value in times_record(t).items():
                rec[f"{phase.value}_{scope}_{key}"] = value
    for phase in PASSES:
        rates = profile.throughput(node.phase(phase).total)
        for key in RATE_FIELDS:
            rec[f"{phase.value}_{key}"] = getattr(rates, key)
    rec["memory_device"] = profile.memory_device
    use = profile.memory_of(node)
    for phase in PASSES:
        for key in MEMORY_FIELDS:
            rec[f"{phase.value}_{key}"] = getattr(use.phase(phase), key) if use else None
    rec["params_total"] = info.params_total if info else None
    rec["params"] = info.params if info else None
    rec["input_shapes"] = info.inputs if info else None
    rec["output_shapes"] = info.outputs if info else None
    rec["extra_repr"] = info.extra_repr if info else None
    return rec


def profile_rows(profile: ModuleProfile) -> list[dict]:
    """Flat rows (nested shapes as JSON text) for CSV and pandas."""
    import json

    rows = []
    for node in profile.walk():
        rec = node_record(profile, node)
        for key in ("input_shapes", "output_shapes"):
            rec[key] = json.dumps(rec[key], separators=(",", ":")) if rec[key] is not None else ""
        rec["params_total"] = rec["params_total"] if rec["params_total"] is not None else -1
        rec["params"] = rec["params"] if rec["params"] is not None else -1
        rec["extra_repr"] = rec["extra_repr"] or ""
        rec["memory_device"] = rec["memory_device"] or ""
        rows.append(rec)
    return rows
