"""JSON document with a versioned schema (docs/output-formats.md)."""

from __future__ import annotations

import msgspec
from msgspec.structs import asdict

from ..profile import ModuleProfile
from . import RenderOptions, register
from ..records import JSON_SCHEMA, node_record, op_records


def profile_document(profile: ModuleProfile, timeline: bool = False) -> dict:
    """The JSON document; ``timeline``: with the profile's timeline of a step (``timeline``,
    schema ``traceprof.timeline/1``), as the TensorBoard tab reads it."""
    md = profile.metadata
    doc = {
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
        "hierarchy": {"source": profile.source, "description": profile.source_description},
        "steps": {**asdict(profile.selection),
                  "cpu_in_ops_us": profile.selection.cpu_in_ops_us},
        "stats": asdict(profile.stats),
        "flops": flops_section(profile),
        "warnings": list(profile.warnings),
        "roots": list(profile.roots),
        "nodes": [  # memory: its passes as dicts too
            {**node_record(profile, n), "children": list(n.children), "path": list(n.path),
             "memory": [msgspec.to_builtins(m) for m in n.memory]}
            for n in profile.walk()
        ],
        "ops": op_records(profile),
    }
    if timeline:
        doc["timeline"] = profile.timeline.document() if profile.timeline else None
    return doc


def flops_section(profile: ModuleProfile) -> dict:
    summary = profile.flops
    return {
        "has_shapes": summary.has_shapes,
        "flops_by_precision": dict(summary.flops_by_precision),
        "peak": asdict(summary.peak) if summary.peak else None,
        "achieved": asdict(profile.throughput(profile.selection)),
        "unsupported": [asdict(u) for u in summary.unsupported],
    }


@register("json", (".json",), f"JSON document, schema {JSON_SCHEMA}")
def render_json(profile: ModuleProfile, opts: RenderOptions) -> str:
    return profile_json(profile)


def profile_json(profile: ModuleProfile, timeline: bool = False) -> str:
    """The JSON document as text (``timeline``: as :func:`profile_document`)."""
    doc = profile_document(profile, timeline)
    return msgspec.json.format(msgspec.json.encode(doc), indent=1).decode() + "\n"
