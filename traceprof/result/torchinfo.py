"""torchinfo's statistics of a profiled model, from the module table that ``traceprof.capture``
embeds: torchinfo 1.8.0's totals (``ModelStatistics``: parameters, trainable parameters,
mult-adds, input, forward/backward pass and parameter sizes) and what the table's rows read of
them (a module's leftover parameters, a leaf's mult-adds). Numbers only: the torchinfo-style
table (traceprof.render.table) formats them; docs/output-formats.md gives the formulas.
"""

from __future__ import annotations

import math

import msgspec

from traceprof.result.model import ModuleProfile, NodeKind
from traceprof.trace.model import ModuleInfo
from traceprof.trace.tensors import element_size, is_tensor


def _nested_size(spec: object) -> tuple[list[int], int]:
    """torchinfo's ``nested_list_size``: the first tensor, depth first through ``[0]``."""
    if is_tensor(spec):
        return list(spec["shape"]), element_size(spec["dtype"])
    if isinstance(spec, dict):
        return _nested_size(list(spec.values())) if spec else ([], 0)
    if isinstance(spec, list) and spec:
        return _nested_size(spec[0])
    return [], 0


def _output_size(spec: object) -> tuple[list[int], int]:
    """torchinfo's ``LayerInfo.calculate_size`` (batch_dim None) on a module-table spec."""
    if spec is None:
        return [], 0
    if isinstance(spec, list) and spec and is_tensor(spec[0]):
        return list(spec[0]["shape"]), element_size(spec[0]["dtype"])
    if isinstance(spec, dict) and not is_tensor(spec):
        return _nested_size(list(spec.values())[-1]) if spec else ([], 0)
    return _nested_size(spec)


def _tensor_bytes(spec: object) -> int:
    """Bytes of every tensor in a spec (``numel * element_size``)."""
    if is_tensor(spec):
        return math.prod(spec["shape"]) * element_size(spec["dtype"])
    if isinstance(spec, dict):
        return sum(_tensor_bytes(v) for v in spec.values())
    if isinstance(spec, list):
        return sum(_tensor_bytes(v) for v in spec)
    return 0


def _macs(info: ModuleInfo, out: list[int]) -> int:
    """torchinfo's ``LayerInfo.calculate_macs`` for one call with output size ``out``."""
    macs = 0
    for name, count in (info.param_counts or {}).items():
        if name in ("weight", "bias"):
            if "Conv" in info.class_name:
                macs += int(count * math.prod(out[:1] + out[2:]))
            elif out:
                macs += out[0] * count
        elif "weight" in name or "bias" in name:
            macs += math.prod(out[:2]) * count
    return macs


class TorchinfoStats(msgspec.Struct):
    """torchinfo's ``ModelStatistics`` fields computed from a module table; None: not in it."""

    total_params: int | None = None
    trainable_params: int | None = None
    total_mult_adds: int | None = None
    total_input: int | None = None
    total_output_bytes: int | None = None
    total_param_bytes: int | None = None
    unique_params: int | None = None  # the model's parameters, shared tensors once
    # by module: torchinfo's leftover
    leftover: dict[str, int] = msgspec.field(default_factory=dict)
    # by leaf module: all its calls
    layer_macs: dict[str, int] = msgspec.field(default_factory=dict)
    leaves: set[str] = msgspec.field(default_factory=set)


def torchinfo_stats(profile: ModuleProfile) -> TorchinfoStats | None:
    """torchinfo 1.8.0's totals (``ModelStatistics.__init__``) for the profiled model and input.

    The layers are the modules that ran (their module-table row has inputs) and their ancestors;
    a module that ran ``k`` times per step (calls from the profile, 1 where the tree was cut
    deeper) is one layer plus ``k - 1`` recursive ones, which add mult-adds and pass size but no
    parameters. Every call is taken to have the first call's output shape.
    """
    table = profile.metadata.module_table
    if table is None or "" not in table.modules:
        return None
    mods = table.modules
    names = list(mods)
    calls: dict[str, float] = {}
    for node in profile.nodes:
        if node.kind is NodeKind.MODULE and node.info is not None:
            calls[node.info.name] = calls.get(node.info.name, 0.0) + node.calls

    def ancestors(name: str) -> list[str]:
        parts = name.split(".") if name else []
        return [""] + [".".join(parts[:i]) for i in range(1, len(parts))] if parts else []

    # a module inside compiled code has no inputs recorded, its output from the compiled graph
    ran = [n for n in names if mods[n].inputs is not None or mods[n].outputs is not None]
    layers = set(ran)
    for n in ran:
        layers.update(a for a in ancestors(n) if a in mods)
    order = [n for n in names if n in layers]

    def is_leaf(n: str) -> bool:
        leaf = mods[n].leaf
        if leaf is not None:
            return leaf
        prefix = n + "." if n else ""
        return not any(o != n and o.startswith(prefix) for o in names)

    stats = TorchinfoStats(unique_params=mods[""].params_total)
    stats.leaves = {n for n in order if is_leaf(n)}
    if all(mods[n].params_total is not None and mods[n].trainable_total is not None for n in order):
        _count_params(stats, mods, order)
    leaves = [n for n in order if n in stats.leaves]
    if all(mods[n].param_counts is not None for n in leaves):
        mult_adds = out_bytes = 0
        for n in leaves:
            k = max(1, round(calls.get(n, 1)))
            size, elem = _output_size(mods[n].outputs)
            stats.layer_macs[n] = _macs(mods[n], size) * k
            mult_adds += stats.layer_macs[n]
            if (mods[n].params_total or 0) > 0:
                out_bytes += elem * math.prod(size) * 2 * k  # x2 for gradients
        stats.total_mult_adds, stats.total_output_bytes = mult_adds, out_bytes
    param_bytes = [b for n in leaves if (b := mods[n].param_bytes_total) is not None]
    if len(param_bytes) == len(leaves):
        stats.total_param_bytes = sum(param_bytes)
    if mods[""].inputs is not None:
        stats.total_input = _tensor_bytes(mods[""].inputs)
    return stats


def _count_params(stats: TorchinfoStats, mods: dict[str, ModuleInfo], order: list[str]) -> None:
    """torchinfo's parameter totals into ``stats``: a leaf's parameters, and each other layer's
    leftover (its parameters less its descendants'); every layer's counts are known."""

    def descendants(n: str) -> list[str]:
        prefix = n + "." if n else ""
        return [o for o in order if o != n and o.startswith(prefix)]

    # a module's parameters less its descendants' (a leaf's: its own), the deepest first so
    # that every descendant's is known when its ancestors' are computed (no recursion)
    memo: dict[tuple[str, str], int] = {}
    for n in sorted((n for n in order if n not in stats.leaves), key=lambda n: -n.count(".") if n else 1):
        for attr in ("params_total", "trainable_total"):
            memo[(n, attr)] = getattr(mods[n], attr) - sum(
                getattr(mods[d], attr) if d in stats.leaves else memo[(d, attr)] for d in descendants(n)
            )
    total = trainable = 0
    for n in order:
        if n in stats.leaves:
            params_total, trainable_total = mods[n].params_total, mods[n].trainable_total
            assert params_total is not None and trainable_total is not None  # every count known
            total += max(params_total, 0)
            trainable += max(trainable_total, 0)
        else:
            stats.leftover[n] = memo[(n, "params_total")]
            total += max(stats.leftover[n], 0)
            trainable += max(memo[(n, "trainable_total")], 0)
    stats.total_params, stats.trainable_params = total, trainable
