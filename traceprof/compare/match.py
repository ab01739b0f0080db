"""The diff of two analyzed sides (:func:`compare`): nodes matched by key (docs/diff.md), each
node's passes base -> new with their spread, the kernels or ops that changed inside it, the
nodes in display order, and the warnings about what could not be compared."""

from __future__ import annotations

from typing import NamedTuple

from msgspec.structs import replace

from traceprof.compare.model import DiffProfile, SideSummary
from traceprof.compare.nodes import DiffNode, InsideDelta, PassDelta, Status
from traceprof.compare.sides import BUCKET_PATH, Side
from traceprof.compare.summary import cpu_summary, side_summary, stdev
from traceprof.result.metric import TimeMetric
from traceprof.result.model import PASSES, ModuleNode, ModuleProfile, NodeKind, Pass
from traceprof.result.sources import Source

#: kernels or ops listed under each changed node
TOP_INSIDE = 5
#: below this share of matched module nodes the two traces are said to be of different models
SAME_MODEL_SHARE = 0.5


def _keys(profile: ModuleProfile, by_name: bool) -> dict[int, str]:
    """The matching key of each node of ``profile``."""
    keys: dict[int, str] = {}
    for node in profile.walk():
        if node.kind is not NodeKind.MODULE:
            keys[node.id] = node.qualified_name
        elif by_name:
            keys[node.id] = (
                f"{node.qualified_name} ({node.class_name})"
                if node.qualified_name
                else f"({node.class_name})"
            )
        else:
            parent = keys[node.parent] + "/" if node.parent >= 0 else ""
            siblings = profile.nodes[node.parent].children if node.parent >= 0 else profile.roots
            same = [
                s
                for s in siblings
                if profile.nodes[s].kind is NodeKind.MODULE and profile.nodes[s].class_name == node.class_name
            ]
            keys[node.id] = f"{parent}{node.class_name or node.name}#{same.index(node.id)}"
    return keys


class _Matched(NamedTuple):
    """One key's node on each side (None: not on that side) and what the diff computed for it,
    before its place in the diff's tree is known."""

    base: ModuleNode | None
    new: ModuleNode | None
    status: Status
    passes: tuple[PassDelta, ...]  # in PASSES order
    inside: tuple[InsideDelta, ...]
    parent: str | None  # the parent's key (None: a root)
    spread_us: float | None

    @property
    def magnitude(self) -> float:
        """|Δ| of the node's time over all passes: how siblings are ordered."""
        return abs(sum(p.delta_us for p in self.passes))


def compare(base: Side, new: Side) -> DiffProfile:
    """The diff of two analyzed sides."""
    by_name, metric, warnings = _how_compared(base, new)
    bkeys, nkeys = _keys(base.profile, by_name), _keys(new.profile, by_name)
    order = list(dict.fromkeys(list(bkeys.values()) + list(nkeys.values())))
    matched = _matched(base, new, bkeys, nkeys, metric)
    warnings += _model_warnings(matched)
    roots, flat, children = _tree_order(order, matched)
    ids = {key: i for i, key in enumerate(flat)}
    position = {key: i for i, key in enumerate(order)}
    depth: dict[str, int] = {}
    nodes = []
    for key in flat:
        m = matched[key]
        depth[key] = depth[m.parent] + 1 if m.parent is not None else 0
        ref = m.new or m.base
        assert ref is not None  # on one side at least
        nodes.append(
            DiffNode(
                id=ids[key],
                parent=ids[m.parent] if m.parent is not None else -1,
                children=tuple(ids[c] for c in children.get(key, [])),
                depth=depth[key],
                key=key,
                name=ref.name,
                class_name=ref.class_name,
                qualified_name=ref.qualified_name,
                kind=ref.kind,
                status=m.status,
                passes=m.passes,
                inside=m.inside,
                spread_us=m.spread_us,
                order=position[key],
            )
        )
    bs, ns = side_summary(base), side_summary(new)
    if metric is TimeMetric.CPU and (bs.has_gpu or ns.has_gpu):
        bs, ns = (cpu_summary(s, side) for s, side in ((bs, base), (ns, new)))
    return DiffProfile(
        base=bs,
        new=ns,
        metric=metric,
        matched_by="qualified name" if by_name else "class path",
        nodes=tuple(_with_fused(nodes, base.profile, new.profile)),
        roots=tuple(ids[r] for r in roots),
        warnings=tuple(dict.fromkeys(warnings + _step_warnings(base, new, bs, ns))),
    )


def _how_compared(base: Side, new: Side) -> tuple[bool, TimeMetric, list[str]]:
    """Whether the modules match by qualified name (else by class path), the time compared (CPU
    time when a side has no GPU work), and the warnings that say so."""
    warnings: list[str] = []
    bp, np_ = base.profile, new.profile
    by_name = Source(bp.source).named and Source(np_.source).named
    if bp.source != np_.source and not by_name:
        warnings.append(
            f"the module trees come from different sources ({bp.source} in the base, "
            f"{np_.source} in the new trace): modules matched by class path"
        )
    metric = base.metric
    if base.metric != new.metric:
        metric = TimeMetric.CPU
        cpu_side = "base" if base.metric is TimeMetric.CPU else "new"
        warnings.append(
            f"the {cpu_side} trace has no GPU work: comparing CPU time only "
            "(GPU time, kernels and collectives cannot be compared)"
        )
    return by_name, metric, warnings


def _matched(
    base: Side, new: Side, bkeys: dict[int, str], nkeys: dict[int, str], metric: TimeMetric
) -> dict[str, _Matched]:
    """Every key of either side (base first) with its nodes, passes, inside and spread."""
    bp, np_ = base.profile, new.profile
    bnode = {k: bp.nodes[i] for i, k in bkeys.items()}
    nnode = {k: np_.nodes[i] for i, k in nkeys.items()}
    parents_b = {k: bkeys[bp.nodes[i].parent] if bp.nodes[i].parent >= 0 else None for i, k in bkeys.items()}
    parents_n = {
        k: nkeys[np_.nodes[i].parent] if np_.nodes[i].parent >= 0 else None for i, k in nkeys.items()
    }
    kinds = base.label_kind if base.label_kind == new.label_kind else "op"
    out: dict[str, _Matched] = {}
    for key in dict.fromkeys(list(bkeys.values()) + list(nkeys.values())):
        b, n = bnode.get(key), nnode.get(key)
        status = Status.MATCHED if b and n else (Status.REMOVED if b else Status.ADDED)
        passes = tuple(_pass_delta(p, b, n, base, new, metric) for p in PASSES)
        inside = _inside(b, n, base, new, kinds) if base.metric == new.metric else ()
        parent = parents_n.get(key) if n is not None else parents_b.get(key)
        spread = _node_spread(b, base, metric) if b is not None else None
        if n is not None:
            other = _node_spread(n, new, metric)
            spread = other if spread is None else (spread if other is None else max(spread, other))
        out[key] = _Matched(b, n, status, passes, inside, parent, spread)
    return out


def _model_warnings(matched: dict[str, _Matched]) -> list[str]:
    """A warning when too few modules match for the traces to be of one model."""
    bmods = {k for k, m in matched.items() if m.base is not None and m.base.kind is NodeKind.MODULE}
    nmods = {k for k, m in matched.items() if m.new is not None and m.new.kind is NodeKind.MODULE}
    if not bmods or not nmods or len(bmods & nmods) / len(bmods | nmods) >= SAME_MODEL_SHARE:
        return []
    return [
        f"the traces look like different models: {len(bmods & nmods)} of "
        f"{len(bmods | nmods)} modules match; unmatched ones are listed as "
        "added or removed, the step and outside-module times still compare"
    ]


def _tree_order(
    order: list[str], matched: dict[str, _Matched]
) -> tuple[list[str], list[str], dict[str | None, list[str]]]:
    """The roots, every key in display order, and each key's children: roots as in the traces
    (modules first, the bucket last), siblings by |Δ|, largest first."""
    children: dict[str | None, list[str]] = {}
    for key in order:
        children.setdefault(matched[key].parent, []).append(key)
    roots = children.get(None, [])
    roots = sorted((r for r in roots if r != BUCKET_PATH[0]), key=lambda k: -matched[k].magnitude) + [
        r for r in roots if r == BUCKET_PATH[0]
    ]
    flat: list[str] = []
    stack = list(reversed(roots))
    while stack:
        key = stack.pop()
        flat.append(key)
        kids = sorted(children.get(key, []), key=lambda k: -matched[k].magnitude)
        children[key] = kids
        stack.extend(reversed(kids))
    return roots, flat, children


def _with_fused(nodes: list[DiffNode], bp: ModuleProfile, np_: ModuleProfile) -> list[DiffNode]:
    """The module nodes whose work sits in kernels fused into an ancestor, marked on each side
    (:func:`fused_into`)."""
    fused_b, fused_n = fused_into(bp), fused_into(np_)
    return [
        replace(
            node,
            base_fused_into=fused_b.get(node.qualified_name) if node.status is not Status.ADDED else None,
            new_fused_into=fused_n.get(node.qualified_name) if node.status is not Status.REMOVED else None,
        )
        if node.kind is NodeKind.MODULE and (node.qualified_name in fused_b or node.qualified_name in fused_n)
        else node
        for node in nodes
    ]


def _step_warnings(base: Side, new: Side, bs: SideSummary, ns: SideSummary) -> list[str]:
    """Warnings when a side's changes cannot be told from noise: one step asked for, or fewer
    than two complete steps."""
    warnings = []
    alone = [(label, s) for label, s in (("base", bs), ("new", ns)) if s.step_alone]
    if alone:  # the trace has more steps, but one was asked for
        traces = "both traces" if len(alone) == 2 else f"the {alone[0][0]} trace"
        warnings.append(
            f"step {alone[0][1].steps[0]} of {traces} is compared alone, not the mean of the "
            "complete steps: no step-to-step spread, changes cannot be told from noise"
        )
    for label, side in (("base", base), ("new", new)):
        if len(side.step_numbers) < 2 and label not in dict(alone):
            warnings.append(
                f"the {label} trace has {len(side.step_numbers) or 'no'} complete "
                "step"
                + ("s" if len(side.step_numbers) != 1 else "")
                + ": no step-to-step spread, changes cannot be told from noise"
            )
    return warnings


def fused_into(profile: ModuleProfile) -> dict[str, str]:
    """Module -> the ancestor that holds its work in kernels fused across modules, for the
    modules whose own work in ``profile`` is nothing but that (a compiled LayerNorm whose ops
    Inductor fused into its block's kernels): the qualified name of the node whose own ops
    list the module among a fused kernel's modules (:attr:`OpStat.modules`), the deepest such
    node where kernels of several passes sit on different ancestors; the model's root by its
    class."""
    own = {n.qualified_name: n for n in profile.nodes if n.kind is NodeKind.MODULE}
    holders: dict[str, ModuleNode] = {}
    for node in own.values():
        for op in node.ops:
            for module in (op.modules or "").split(", "):
                above = node.qualified_name == "" or module.startswith(node.qualified_name + ".")
                if module and module != node.qualified_name and module in own and above:
                    # kernels of several passes may sit on different ancestors: the deepest
                    if module not in holders or node.depth > holders[module].depth:
                        holders[module] = node
    field = TimeMetric.of(profile.has_gpu)
    return {m: holder.label for m, holder in holders.items() if getattr(own[m].own, field) == 0}


def _node_spread(node: ModuleNode, side: Side, metric: str) -> float | None:
    """Step-to-step standard deviation of the node's time summed over the passes."""
    if side.metric != metric:
        return None
    per_pass = [side.node_steps.get((node.path, code)) for code in range(len(PASSES))]
    per_pass = [p for p in per_pass if p is not None]
    if not per_pass:
        return None
    return stdev([sum(values) for values in zip(*per_pass)])


class _PassSide(NamedTuple):
    """One pass of a node on one side of the diff (a side without the node: zeros and None)."""

    us: float = 0.0
    flops: float = 0.0
    kernels: float = 0.0
    flop_per_s: float | None = None
    memory_peak_bytes: float | None = None
    calls: float = 0.0
    spread_us: float | None = None
    activation_bytes: float | None = None


def _pass_side(phase: Pass, node: ModuleNode | None, side: Side, metric: TimeMetric) -> _PassSide:
    if node is None:
        return _PassSide()
    profile = side.profile
    t = node.phase(phase).total
    mem = profile.memory_of(node)
    steps = side.node_steps.get((node.path, PASSES.index(phase))) if side.metric == metric else None
    return _PassSide(
        us=getattr(t, metric),
        flops=t.flops,
        kernels=t.kernels,
        flop_per_s=profile.throughput(t).flop_per_s if t.flops else None,
        memory_peak_bytes=mem.phase(phase).peak_bytes if mem is not None else None,
        calls=node.calls if phase is not Pass.OTHER else 0.0,
        spread_us=stdev(steps or ()),
        activation_bytes=mem.activation_bytes if mem is not None and phase is Pass.FORWARD else None,
    )


def _pass_delta(
    phase: Pass, b: ModuleNode | None, n: ModuleNode | None, base: Side, new: Side, metric: TimeMetric
) -> PassDelta:
    bs, ns = _pass_side(phase, b, base, metric), _pass_side(phase, n, new, metric)
    spreads = [x for x in (bs.spread_us, ns.spread_us) if x is not None]
    return PassDelta(
        phase=phase,
        base_us=bs.us,
        new_us=ns.us,
        spread_us=max(spreads) if spreads else None,
        base_flops=bs.flops,
        new_flops=ns.flops,
        base_kernels=bs.kernels,
        new_kernels=ns.kernels,
        base_flop_per_s=bs.flop_per_s,
        new_flop_per_s=ns.flop_per_s,
        base_memory_peak_bytes=bs.memory_peak_bytes,
        new_memory_peak_bytes=ns.memory_peak_bytes,
        base_calls=bs.calls,
        new_calls=ns.calls,
        base_activation_bytes=bs.activation_bytes,
        new_activation_bytes=ns.activation_bytes,
    )


def _inside(
    b: ModuleNode | None, n: ModuleNode | None, base: Side, new: Side, kind: str
) -> tuple[InsideDelta, ...]:
    out = []
    for code, phase in enumerate(PASSES):
        bi = base.inside.get((b.path, code), {}) if b is not None else {}
        ni = new.inside.get((n.path, code), {}) if n is not None else {}
        for name in dict.fromkeys(list(bi) + list(ni)):
            bv, nv = bi.get(name), ni.get(name)
            if bv is not None and nv is not None:
                status = Status.MATCHED
            else:
                status = Status.ADDED if bv is None else Status.REMOVED
            if status is Status.MATCHED and nv == bv:
                continue
            out.append(InsideDelta(kind, name, phase, bv or 0.0, nv or 0.0, status))
    out.sort(key=lambda d: (-abs(d.delta_us), d.name, PASSES.index(d.phase)))
    return tuple(out[:TOP_INSIDE])
