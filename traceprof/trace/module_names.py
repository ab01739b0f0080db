"""Qualified module names (``"blocks.0.attn"``, ``""`` for the model's root) as traces and the
embedded tables spell them: one name under another, and the deepest module holding several."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["common_module", "joined_name"]


def joined_name(base: str, relative: str) -> str:
    """The qualified name of ``relative`` under ``base`` (either may be ``""``: the root)."""
    return f"{base}.{relative}" if base and relative else base or relative


def common_module(modules: Iterable[str]) -> str:
    """The deepest module containing all of ``modules`` (``""``: the root)."""
    split = [m.split(".") if m else [] for m in modules]
    common: list[str] = []
    for parts in zip(*split):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return ".".join(common)
