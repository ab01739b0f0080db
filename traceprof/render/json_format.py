"""JSON document with a versioned schema (docs/output-formats.md)."""

from __future__ import annotations

import msgspec

from traceprof.render.registry import RenderOptions
from traceprof.result.model import ModuleProfile
from traceprof.result.records import profile_document


def render_json(profile: ModuleProfile, opts: RenderOptions) -> str:
    return profile_json(profile)


def profile_json(profile: ModuleProfile, timeline: bool = False) -> str:
    """The JSON document as text (``timeline``: as :func:`profile_document`)."""
    doc = profile_document(profile, timeline)
    return msgspec.json.format(msgspec.json.encode(doc), indent=1).decode() + "\n"
