"""Parameters counted once: a tied parameter (a weight two modules share, an output layer tied
to the embedding) counts in the module where the model met it first, so that the parameters of
a module's children add up to its own. The text report, the JSON, CSV and the HTML report read
it here (``params_tied``: how many of a module's parameters are counted outside it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from traceprof.result.model import ModuleProfile


class CountedOnce(msgspec.Struct, frozen=True):
    """A module's parameters with its children's, a tied parameter counted once: where the
    model met it first (``ModuleInfo.tied``)."""

    params: int
    tied: bool  # some of its parameters are counted in a module outside it


def params_counted_once(profile: ModuleProfile) -> dict[str, CountedOnce]:
    """Qualified name -> the module's parameters without those tied to a parameter of a module
    outside it (``params_total`` already counts a tensor shared inside the module once), so
    that the parameters of a module's children add up to its own."""
    table = profile.metadata.module_table
    if table is None:
        return {}
    outside: dict[str, dict[str, int]] = {}  # module -> its tied parameters' owners outside it
    for name, info in table.modules.items():
        for pname, owner in (info.tied or {}).items():
            numel = (info.param_counts or {}).get(pname, 0)
            owner_module = owner.rsplit(".", 1)[0] if "." in owner else ""
            holder: str | None = name
            while holder is not None and not _inside(owner_module, holder):
                outside.setdefault(holder, {})[owner] = numel
                holder = (holder.rsplit(".", 1)[0] if "." in holder else "") if holder else None
    out = {}
    for name, info in table.modules.items():
        if info.params_total is not None:
            tied = outside.get(name, {})
            out[name] = CountedOnce(info.params_total - sum(tied.values()), bool(tied))
    return out


def _inside(module: str, ancestor: str) -> bool:
    return not ancestor or module == ancestor or module.startswith(ancestor + ".")
