"""A job reduced from its ranks' results (:func:`reduce_job`): the ranks checked and sorted,
their steps' timelines averaged, their modules matched, the stragglers found."""

from __future__ import annotations

import math
from typing import Any

from msgspec.structs import replace

from traceprof.errors import JobError
from traceprof.job.model import (
    FASTER_RANK,
    MEDIAN_RANK,
    MEDIAN_RANKS,
    Job,
    JobRank,
    StepMetric,
    Straggler,
)
from traceprof.job.modules import JobModule, own_compute_us
from traceprof.job.rank import RankResult
from traceprof.job.runs import check_one_job, missing_ranks, numbers_text, one_run
from traceprof.result.metric import TimeMetric
from traceprof.result.model import ModuleNode, NodeKind, module_node_count
from traceprof.result.step_times import StepTimeline

#: a rank is a straggler when its step time is above the median by more than this fraction
DEFAULT_STRAGGLER_THRESHOLD = 0.05
#: modules named per straggler
STRAGGLER_MODULES = 5


def _mean_timeline(timeline: tuple[StepTimeline, ...], steps: tuple[int, ...]) -> StepTimeline:
    chosen = [t for t in timeline if t.step in steps] if steps else list(timeline)
    if not chosen:
        chosen = list(timeline)
    if not chosen:
        return StepTimeline(-1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0)
    n = len(chosen)

    def mean(name):
        return math.fsum(getattr(t, name) for t in chosen) / n

    return StepTimeline(
        step=chosen[0].step if n == 1 else -1,
        wall_us=mean("wall_us"),
        window_us=mean("window_us"),
        gpu_busy_us=mean("gpu_busy_us"),
        compute_us=mean("compute_us"),
        collective_us=mean("collective_us"),
        collective_exposed_us=mean("collective_exposed_us"),
        idle_us=mean("idle_us"),
        kernels=round(mean("kernels")),
        collective_kernels=round(mean("collective_kernels")),
    )


def _modules(ranks: list[JobRank]) -> tuple[JobModule, ...]:
    """Module nodes matched across ranks by their path, in the tree order of the first rank
    that has each (new ones of later ranks after their parent's last known child)."""
    order: list[tuple[str, ...]] = []
    seen: dict[tuple[str, ...], dict] = {}
    for jr in ranks:
        profile = jr.profile
        for node in profile.walk():
            key = tuple(node.path) if node.path else (node.qualified_name or node.name,)
            if node.kind is NodeKind.UNATTRIBUTED or (
                node.parent >= 0 and profile.nodes[node.parent].kind is NodeKind.UNATTRIBUTED
            ):
                key = ("\0bucket",) + key  # the bucket's groups never match a module
            entry = seen.get(key)
            if entry is None:
                parent = None
                if node.parent >= 0:
                    pn = profile.nodes[node.parent]
                    pk = tuple(pn.path) if pn.path else (pn.qualified_name or pn.name,)
                    parent = ("\0bucket",) + pk if pn.kind is NodeKind.UNATTRIBUTED else pk
                entry = seen[key] = {"node": node, "parent": parent, "nodes": {}}
                order.append(key)
            entry["nodes"][jr.rank] = node
    out = []
    for key in _tree_order(order, seen):
        e = seen[key]
        n: ModuleNode = e["node"]
        out.append(
            JobModule(
                key=key,
                parent=e["parent"],
                depth=n.depth,
                kind=n.kind,
                name=n.name,
                class_name=n.class_name,
                qualified_name=n.qualified_name,
                nodes=e["nodes"],
            )
        )
    return tuple(out)


def _tree_order(
    order: list[tuple[str, ...]], seen: dict[tuple[str, ...], dict[str, Any]]
) -> list[tuple[str, ...]]:
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    roots = []
    for key in order:
        parent = seen[key]["parent"]
        if parent is None or parent not in seen:
            roots.append(key)
        else:
            children.setdefault(parent, []).append(key)
    # the bucket last, as in every profile
    roots.sort(key=lambda k: k[0] == "\0bucket")
    out = []
    stack = list(reversed(roots))
    while stack:
        key = stack.pop()
        out.append(key)
        stack.extend(reversed(children.get(key, [])))
    return out


def reduce_job(
    results: list[RankResult],
    *,
    straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD,
    engine: str = "local",
    newest_run: bool = False,
) -> Job:
    """The job of the per-rank results (any order): ranks sorted and checked, modules matched,
    statistics and stragglers computed. Results of several runs (world sizes, models or capture
    windows) are an error, or with ``newest_run`` (a directory's traces) the newest run, with a
    warning naming the others."""
    if not results:
        raise JobError("no traces")
    results, warnings = one_run(list(results), newest_run)
    ranked, world_size = check_one_job(results)
    steps = _common_steps(ranked)
    missing: tuple[int, ...] = ()
    if world_size is not None and len(ranked) > 1:
        missing = missing_ranks([rank for rank, _ in ranked], world_size)
        if missing:
            warnings.append(
                f"partial job: {len(missing)} of {world_size} ranks have no trace "
                f"(rank{'s' if len(missing) > 1 else ''} {numbers_text(missing)}); "
                "statistics are over the ranks given"
            )
    ranks = [
        JobRank(rank, r.path, r.profile, r.timeline, _mean_timeline(r.timeline, steps)) for rank, r in ranked
    ]
    for jr in ranks:
        for w in jr.profile.warnings:
            warnings.append(f"rank {jr.rank}: {w}")
    has_gpu = any(jr.profile.has_gpu for jr in ranks)
    modules = _modules(ranks)
    job = Job(
        ranks=tuple(ranks),
        world_size=world_size,
        missing_ranks=missing,
        steps=steps,
        modules=modules,
        matched_modules=module_node_count(modules),
        stragglers=(),
        straggler_threshold=straggler_threshold,
        metric=TimeMetric.of(has_gpu),
        step_metric=StepMetric.of(has_gpu),
        warnings=(),
        engine=engine,
    )
    return replace(job, stragglers=_stragglers(job), warnings=_merged(warnings))


def _common_steps(ranked: list[tuple[int, RankResult]]) -> tuple[int, ...]:
    """The steps every rank's numbers are the mean of; a JobError when the ranks' differ."""
    selections = {rank: tuple(r.profile.selection.numbers) for rank, r in ranked}
    distinct = sorted(set(selections.values()))
    if len(distinct) > 1:
        common = sorted(set.intersection(*(set(r.profile.selection.in_trace) for _, r in ranked)))
        parts = "; ".join(
            f"rank{'s' if len(rs) > 1 else ''} {numbers_text(rs)}: step{'s' if len(s) != 1 else ''} {numbers_text(s)}"
            for s in distinct
            for rs in [[rank for rank, sel in selections.items() if sel == s]]
        )
        hint = (
            f"give --step N with a step every rank has ({numbers_text(common)})"
            if common
            else "no step is in every trace"
        )
        raise JobError(f"mismatched steps: the ranks' traces hold different steps ({parts}); {hint}")
    return distinct[0] if distinct else ()


def _merged(warnings: list[str]) -> tuple[str, ...]:
    """One line per distinct warning, with the ranks' count."""
    counted: dict[str, list[str]] = {}
    for w in warnings:
        text = w.split(": ", 1)[1] if w.startswith("rank ") else w
        counted.setdefault(text, []).append(w)
    merged = []
    for text, items in counted.items():
        if len(items) > 1 and all(i.startswith("rank ") for i in items):
            merged.append(f"{len(items)} ranks: {text}")
        else:
            merged.extend(items)
    return tuple(merged)


def _stragglers(job: Job) -> tuple[Straggler, ...]:
    times = job.step_times()
    if len(times) < 2:
        return ()
    reference, ranks, reference_us = straggler_reference(times)
    out = []
    for rank in sorted(times):
        t = times[rank]
        if reference_us > 0 and t > reference_us * (1 + job.straggler_threshold):
            excess = _excess_modules(job, rank, ranks)
            listed = tuple(x for x in excess if x[1] > 0)[:STRAGGLER_MODULES]
            listed_us = sum(e for _, e in listed)
            modules_us = sum(e for _, e in excess)
            out.append(
                Straggler(
                    rank=rank,
                    step_us=t,
                    reference_us=reference_us,
                    excess_us=t - reference_us,
                    excess_fraction=(t - reference_us) / reference_us,
                    modules=listed,
                    reference_ranks=ranks,
                    other_modules_us=modules_us - listed_us,
                    unexplained_us=(t - reference_us) - modules_us,
                    reference=reference,
                )
            )
    out.sort(key=lambda s: (-s.excess_us, s.rank))
    return tuple(out)


def straggler_reference(times: dict[int, float]) -> tuple[str, tuple[int, ...], float]:
    """What the ranks' step ``times`` are compared with to find stragglers: its kind (FASTER_RANK,
    MEDIAN_RANK or MEDIAN_RANKS), its ranks and its time. Two ranks: the faster one (lower rank
    on a tie); more: the rank whose time is the median, or the two middle ones for an even
    number of ranks (the median is their mean)."""
    ordered = sorted(times, key=lambda r: (times[r], r))
    n = len(ordered)
    if n == 2:
        return FASTER_RANK, (ordered[0],), times[ordered[0]]
    if n % 2:
        return MEDIAN_RANK, (ordered[n // 2],), times[ordered[n // 2]]
    pair = tuple(sorted(ordered[n // 2 - 1 : n // 2 + 1]))
    return MEDIAN_RANKS, pair, sum(times[r] for r in pair) / 2


def _excess_modules(job: Job, rank: int, reference: tuple[int, ...]) -> tuple[tuple[JobModule, float], ...]:
    """Every module's own compute time (:func:`own_compute_us`) on ``rank`` less its mean over
    the ``reference`` ranks (0 where a rank lacks the module), the positive and negative ones,
    largest first: the differences add up to the difference of the ranks' module sums."""
    gpu = job.metric is TimeMetric.GPU_BUSY
    found = []
    for m in job.modules:
        if m.kind is NodeKind.UNATTRIBUTED:
            continue  # the bucket's own row: its groups are rows of their own
        mine = own_compute_us(m.nodes[rank], gpu) if rank in m.nodes else 0.0
        theirs = sum(own_compute_us(m.nodes[r], gpu) for r in reference if r in m.nodes) / len(reference)
        if mine != theirs:
            found.append((m, mine - theirs))
    found.sort(key=lambda t: -t[1])
    return tuple(found)
