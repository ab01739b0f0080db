"""A distributed job: the traces of its ranks, analyzed one by one (in parallel, by an engine) and
reduced into one result, per module x rank x pass.

The single-trace pipeline is used as it is: each rank's trace becomes a
:class:`~traceprof.profile.ModuleProfile` plus its GPU timeline per step
(:mod:`traceprof.analysis.job_timeline`) in :func:`analyze_rank`, which is what an engine runs and sends back
(a few hundred kB at most; never events). :func:`reduce_job` then matches the ranks (by
``distributedInfo`` or the file names), checks they make one job with the same steps, and builds
the :class:`Job`: per module the time of every rank, with min / median / max / spread, the
slowest rank and the imbalance (max / median), and the stragglers. Ranks are sorted by number
before anything is computed, so the result does not depend on which engine ran the analyses or
in which order they finished.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec.structs import replace

from traceprof import units
from traceprof.analysis.job_timeline import StepTimeline, step_timelines
from traceprof.errors import JobError, MemoryLimitError
from traceprof.read.discovery import find_traces
from traceprof.read.limits import job_memory_share, shared_limit_error
from traceprof.result import shaping
from traceprof.result.model import (
    BETWEEN_OPS,
    ModuleNode,
    ModuleProfile,
    NodeKind,
    OpKind,
    Pass,
    find_named,
    module_node_count,
)
from traceprof.result.shaping import Measure, SortKey
from traceprof.trace import schema

if TYPE_CHECKING:
    from collections.abc import Sequence

    from traceprof.engine import Engine
    from traceprof.progress import Progress
    from traceprof.read.cache import Store
    from traceprof.result.sources import Source

#: a rank is a straggler when its step time is above the median by more than this fraction
DEFAULT_STRAGGLER_THRESHOLD = 0.05
#: modules named per straggler
STRAGGLER_MODULES = 5
#: in the warning of a directory of several runs, of which the newest was analyzed
RUNS_NOTE = "runs in the directory: analyzed the newest"


# ---- one rank: what a worker computes and sends back --------------------------------------------


class RankOptions(msgspec.Struct, frozen=True):
    """How each rank's trace is analyzed (the same for every rank)."""

    step: int | None = None
    hierarchy: str | None = None
    peak_tflops: float | None = None
    max_memory: int | str | None = None
    #: use the cache where the trace is read (None: unless $TRACEPROF_CACHE is off there)
    cache: bool | None = None
    #: traces loaded at once on this machine, ``max_memory`` being their share of the job's
    sharing: int = 1


class RankResult(msgspec.Struct, frozen=True):
    """One trace's analysis: its profile (module tree with numbers, metadata) and its GPU
    timeline per step. Small: this is what travels from a worker."""

    path: str
    profile: ModuleProfile
    timeline: tuple[StepTimeline, ...]


def analyze_rank(task: tuple[str, RankOptions]) -> RankResult:
    """Load and analyze one trace (run by an engine's worker), through the cache of the machine
    it runs on: a second look at a rank reads its result from there."""
    from traceprof.read import cache as trace_cache
    from traceprof.read.cache import cache_store

    path, options = task
    store = cache_store(options.cache)
    content = trace_cache.content_hash(path) if store is not None else None
    if store is None or content is None:
        return _analyzed_rank(path, options, content)[0]
    return trace_cache.cached(
        store,
        content,
        lambda read: _rank_entry(read, options),
        "rank",
        RankResult,
        lambda: _analyzed_rank(path, options, content),
        lambda hit: _rank_named(hit, path),
        _checked_rank,
    )[0]


def cached_ranks(paths: list[str], options: RankOptions) -> list[RankResult | None]:
    """The result of each path in this machine's cache, or None: a job whose ranks are all
    there starts no worker."""
    from traceprof.read import cache as trace_cache
    from traceprof.read.cache import cache_store

    store = cache_store(options.cache)
    if store is None:
        return [None] * len(paths)
    return [
        _cached_rank(store, path, options, content)
        for path, content in zip(paths, trace_cache.content_hashes(paths))
    ]


def _cached_rank(store: Store, path: str, options: RankOptions, content: str | None) -> RankResult | None:
    if content is None:
        return None
    hit = store.get(_rank_entry(content, options), "rank", RankResult, _checked_rank)
    return _rank_named(hit, path) if hit is not None else None


def _checked_rank(result: RankResult) -> None:
    """A rank's result read from the cache, checked as untrusted input (Store.get)."""
    result.profile.check_links()


def _rank_entry(content: str, options: RankOptions) -> str:
    from traceprof.read import cache as trace_cache

    return trace_cache.entry_name(content, "rank", (options.step, options.hierarchy, options.peak_tflops))


def _analyzed_rank(path: str, options: RankOptions, content: str | None) -> tuple[RankResult, str | None]:
    """The rank's result, and the content hash of the bytes it was computed from (the cache's
    key: :func:`traceprof.read.build.load_keyed`)."""
    from traceprof.api import analyze
    from traceprof.read.build import load_keyed

    # one process per trace: the engine's workers are the parallelism (--jobs), so the trace is
    # decoded by this process alone, also with --jobs 1 (in the command's own process)
    try:
        trace, read = load_keyed(
            path, max_memory=options.max_memory, jobs=1, cache=options.cache, content=content
        )
    except MemoryLimitError as e:
        raise shared_limit_error(e, options.sharing) from None
    profile = analyze(trace, step=options.step, hierarchy=options.hierarchy, peak_tflops=options.peak_tflops)
    return RankResult(path, profile, step_timelines(trace)), read


def _rank_named(result: RankResult, path: str) -> RankResult:
    """A cached rank's result with its trace's path as this job spells it."""
    if result.path == path and result.profile.metadata.path == path:
        return result
    return RankResult(path, result.profile.with_path(path), result.timeline)


# ---- the job ------------------------------------------------------------------------------------


class Spread(msgspec.Struct, frozen=True):
    """One quantity across the ranks that have it."""

    min: float
    median: float
    max: float
    spread: float  # max - min
    slowest_rank: int  # the rank with the max (the lowest such rank on ties)
    imbalance: float | None  # max / median; None when the median is 0


def spread_of(values: dict[int, float]) -> Spread | None:
    """The spread of ``values`` (rank -> value); None for no ranks."""
    if not values:
        return None
    ranks = sorted(values)
    v = sorted(values[r] for r in ranks)
    n = len(v)
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    hi = v[-1]
    slowest = next(r for r in ranks if values[r] == hi)
    return Spread(v[0], median, hi, hi - v[0], slowest, hi / median if median > 0 else None)


class JobRank(msgspec.Struct, frozen=True):
    rank: int
    path: str
    profile: ModuleProfile
    timeline: tuple[StepTimeline, ...]  # every step of the trace
    #: the mean of the timeline over the profile's selected steps
    selected: StepTimeline

    @property
    def cpu_compute_us(self) -> float:
        """CPU time per step in ops outside the collectives (:func:`cpu_compute_us`)."""
        return cpu_compute_us(self.profile)

    def step_time(self, metric: str) -> float:
        """The rank's step time by ``metric``: a :class:`StepTimeline` field or ``cpu_compute_us``."""
        return self.cpu_compute_us if metric == "cpu_compute_us" else float(getattr(self.selected, metric))

    @property
    def memory_peak_bytes(self) -> float | None:
        """The allocator's highest total in the rank's selected steps on its memory device
        (``ModuleProfile.memory_summary``); None without [memory] events or totals."""
        summary = self.profile.memory_summary
        return summary.peak.total_bytes if summary is not None and summary.peak is not None else None


def is_collective_group(node: ModuleNode | JobModule) -> bool:
    """A "not in any module" group of a CPU-side collective (``gloo:all_reduce``)."""
    return node.kind is NodeKind.GROUP and schema.COLLECTIVE_CPU_RE.match(node.name) is not None


def cpu_compute_us(profile: ModuleProfile) -> float:
    """CPU time per step in ops outside the collectives: the step's time in ops, annotations and
    Python frames (per thread, the union of its top-level slices) less the collective groups
    outside every module, where a fast rank waits for the slow one (its time between ops, where
    it waits for the backend's threads, is not in ops either)."""
    waiting = sum(n.total.cpu_us for n in profile.nodes if is_collective_group(n))
    return max(profile.selection.cpu_in_ops_us - waiting, 0.0)


class JobModule(msgspec.Struct, frozen=True):
    """One module node matched across the ranks (by qualified name, or by tree position)."""

    key: tuple[str, ...]  # the node's path in the tree (qualified names for traceprof scopes)
    parent: tuple[str, ...] | None
    depth: int
    kind: NodeKind
    name: str
    class_name: str
    qualified_name: str
    #: per rank (ranks without the node are absent): the node's total in each pass
    nodes: dict[int, ModuleNode]

    def time(self, rank: int, metric: str, p: Pass | None = None, own: bool = False) -> float:
        node = self.nodes[rank]
        part = "own" if own else "total"
        if p is not None:
            return sum((getattr(getattr(node.phase(p), part), metric),))
        # the passes in PASSES order, read as attributes (a report asks this thousands of times)
        return sum(
            (
                getattr(getattr(node.forward, part), metric),
                getattr(getattr(node.backward, part), metric),
                getattr(getattr(node.other, part), metric),
            )
        )

    def times(self, metric: str, p: Pass | None = None, own: bool = False) -> dict[int, float]:
        # as time() for each rank, the lookups hoisted: a job report asks this for every module,
        # metric and pass
        part, nodes = ("own" if own else "total"), self.nodes
        if p is not None:
            phase = Pass(p).value
            return {r: 0.0 + getattr(getattr(getattr(nodes[r], phase), part), metric) for r in sorted(nodes)}
        return {
            r: getattr(getattr(n.forward, part), metric)
            + getattr(getattr(n.backward, part), metric)
            + getattr(getattr(n.other, part), metric)
            for r, n in sorted(nodes.items())
        }

    def spread(self, metric: str, p: Pass | None = None) -> Spread:
        s = spread_of(self.times(metric, p))
        assert s is not None  # the node is on one rank at least
        return s


#: what a straggler is compared with (``Straggler.reference``; docs/jobs.md): with two ranks the
#: faster one (their median, the mean of both, would hide half of the gap: a 17x slower rank read
#: +89.1%); with more, the median rank, or for an even number of ranks the two middle ones'
#: mean
FASTER_RANK, MEDIAN_RANK, MEDIAN_RANKS = "faster rank", "median rank", "median ranks"


class Straggler(msgspec.Struct, frozen=True):
    rank: int
    step_us: float  # the rank's step time (GPU compute time per step; CPU-only: CPU compute time)
    reference_us: float  # the step time it is compared with (``reference``)
    excess_us: float
    excess_fraction: float  # excess_us / reference_us
    #: the modules that make up the difference: own compute time over the reference ranks', largest
    #: first (GPU work time outside collective kernels, the plain sum of the module's kernel
    #: durations, which concurrent work on other streams does not dilute; CPU time outside
    #: collectives on CPU-only traces)
    modules: tuple[tuple[JobModule, float], ...]
    #: the ranks it is compared with: the faster of two, the median rank, or the two middle ones
    #: (their mean) for an even number of ranks, so that the modules' differences add up
    reference_ranks: tuple[int, ...] = ()
    #: the other modules' differences together (those not listed in ``modules``)
    other_modules_us: float = 0.0
    #: excess_us less every module's difference: kernels of the rank that ran at the same time
    #: (summed per module, counted once in the step time), or work outside the modules' own time
    unexplained_us: float = 0.0
    #: what ``reference_ranks`` are: FASTER_RANK, MEDIAN_RANK or MEDIAN_RANKS
    reference: str = MEDIAN_RANK


class Job(msgspec.Struct, frozen=True):
    """The reduced result of a job: ranks sorted by number, modules in tree order."""

    ranks: tuple[JobRank, ...]
    world_size: int | None
    missing_ranks: tuple[int, ...]
    steps: tuple[int, ...]  # the step numbers every rank's numbers are the mean of
    modules: tuple[JobModule, ...]
    stragglers: tuple[Straggler, ...]
    straggler_threshold: float
    #: the time modules are compared by: gpu_busy_us, or cpu_us when no rank has GPU work
    metric: str
    #: what step times compare: "compute_us" (GPU work outside collectives) or, when no rank has
    #: GPU work, "cpu_compute_us" (CPU time in ops outside collectives)
    step_metric: str
    warnings: tuple[str, ...] = ()
    engine: str = "local"
    #: modules without time on any rank left out by :meth:`shaped` (``all_rows=False``)
    hidden_modules: int = 0
    #: the module nodes matched across the ranks (module_node_count: group nodes and the bucket
    #: are no modules), however :meth:`shaped` shows them
    matched_modules: int = 0

    def shaped(
        self,
        *,
        depth: int | None = None,
        top: int | None = None,
        sort: SortKey | str = SortKey.ORDER,
        ignore: tuple[str, ...] | list[str] = (),
        all_rows: bool = True,
    ) -> Job:
        """The job with its modules shaped as ``traceprof analyze`` shapes a profile: siblings
        ordered by ``sort`` (by the median across the ranks, largest first), the ``top``
        largest children of each module kept and the rest folded into one ``(k more)`` module,
        modules down to ``depth``, modules matching an ``ignore`` pattern hidden; with
        ``all_rows=False`` also the modules without time on any rank, counted in
        :attr:`hidden_modules`. The ranks, step times and stragglers stay as they are."""
        return shape_job(self, depth=depth, top=top, sort=sort, ignore=ignore, all_rows=all_rows)

    @property
    def rank_numbers(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks)

    def rank(self, number: int) -> JobRank:
        for r in self.ranks:
            if r.rank == number:
                return r
        raise KeyError(number)

    def module(self, qualified_name: str) -> JobModule:
        for m in self.modules:
            if m.qualified_name == qualified_name:
                return m
        raise KeyError(qualified_name)

    def find(self, name: str) -> JobModule:
        """A module by qualified name, else as :meth:`ModuleProfile.find
        <traceprof.result.model.ModuleProfile.find>` looks: a class or short name, then a part
        of one. Raises ``ModuleLookupError`` (a KeyError) with close matches."""
        return find_named(self.modules, name, "the job")

    def __repr__(self) -> str:
        from traceprof.render.notebook import job_repr  # presentation lives in render/

        return job_repr(self)

    def _repr_html_(self) -> str:
        """The ranks' step times, the stragglers and an icicle, for Jupyter (docs/notebooks.md)."""
        from traceprof.render.notebook import job_html

        return job_html(self)

    def step_times(self) -> dict[int, float]:
        return {r.rank: r.step_time(self.step_metric) for r in self.ranks}

    def rows(self) -> list[dict]:
        """The tidy table: one row per module x rank x pass (docs/jobs.md)."""
        from traceprof.job.records import job_rows

        return job_rows(self)

    def to_dataframe(self):
        """:meth:`rows` as a pandas DataFrame with typed columns (needs pandas)."""
        from traceprof.job.records import job_dataframe

        return job_dataframe(self)


def _rank_of(result: RankResult) -> int | None:
    md = result.profile.metadata
    rank = md.rank if md.rank is not None else (md.module_table.rank if md.module_table else None)
    if rank is None:
        m = schema.RANK_IN_FILE_NAME_RE.search(os.path.basename(result.path))
        rank = int(m.group(1)) if m else None
    return rank


def _world_size_of(result: RankResult) -> int | None:
    md = result.profile.metadata
    if md.world_size is not None:
        return md.world_size
    return md.module_table.world_size if md.module_table else None


def _job_name(path: str) -> str:
    return schema.JOB_FILE_NAME_VARYING_RE.sub("", os.path.basename(path))


def _names(paths, limit: int = 3) -> str:
    paths = list(paths)
    shown = ", ".join(os.path.basename(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _numbers(values) -> str:
    return ", ".join(map(str, values)) or "none"


#: the largest world size a trace may claim: above any job run so far (about 10**5 GPUs), and
#: what keeps a corrupt ``world_size`` from sizing anything the job builds
MAX_WORLD_SIZE = 2**20


def _checked_world_size(result: RankResult) -> int | None:
    """The world size of a rank's trace, refused when it is not one a job can have."""
    size = _world_size_of(result)
    if size is not None and not 1 <= size <= MAX_WORLD_SIZE:
        raise JobError(
            f"{result.path}: world size {size} in the trace is not that of a job "
            f"(1 to {MAX_WORLD_SIZE}); the trace's distributedInfo is damaged"
        )
    return size


def _missing(given: list[int], world_size: int) -> tuple[int, ...]:
    """The ranks below ``world_size`` not in ``given`` (checked sizes only: see
    :data:`MAX_WORLD_SIZE`)."""
    have = set(given)
    return tuple(r for r in range(world_size) if r not in have)


def _root_classes(result: RankResult) -> tuple[str, ...]:
    """The classes of the module tree's roots (the model a rank ran)."""
    profile = result.profile
    return tuple(
        profile.nodes[i].class_name or profile.nodes[i].name
        for i in profile.roots
        if profile.nodes[i].kind is NodeKind.MODULE
    )


def _written_at(result: RankResult) -> float:
    """When the trace was written (its file's time), to tell capture windows apart."""
    try:
        return os.stat(result.path).st_mtime
    except OSError:
        return 0.0


class _Run(msgspec.Struct):
    """The traces of one job's capture window: same world size (or none) and model, each rank
    once."""

    world_size: int | None
    roots: tuple[str, ...]
    results: list[RankResult]

    @property
    def newest(self) -> float:
        return max(_written_at(r) for r in self.results)

    def describe(self) -> str:
        ranks = sorted(r for r in map(_rank_of, self.results) if r is not None)
        what = f"rank{'s' if len(ranks) != 1 else ''} {_numbers(ranks)}" if ranks else "no rank"
        size = f"world size {self.world_size}" if self.world_size is not None else "no world size"
        model = "/".join(self.roots) or "no module tree"
        return f"{_names(r.path for r in self.results)} ({what}, {size}, model {model})"


def _runs(results: list[RankResult]) -> list[_Run]:
    """``results`` in runs: by world size and model (the classes of the module tree's roots),
    then by capture window: a rank met a second time starts the next window (oldest file
    first). In the order of their first trace."""
    sizes = {r.path: _checked_world_size(r) for r in results}
    known = set(sizes.values()) - {None}
    only = next(iter(known)) if len(known) == 1 else None  # that of traces without one, too
    groups: dict[tuple[int | None, tuple[str, ...]], list[RankResult]] = {}
    for r in results:
        size = sizes[r.path]
        groups.setdefault((only if size is None else size, _root_classes(r)), []).append(r)
    runs = []
    for (size, roots), members in groups.items():
        by_rank: dict[int | None, list[RankResult]] = {}
        for r in sorted(members, key=lambda r: (_written_at(r), r.path)):
            by_rank.setdefault(_rank_of(r) if len(members) > 1 else 0, []).append(r)
        windows = max(len(v) for v in by_rank.values())
        for i in range(windows):
            window = [items[i] for items in by_rank.values() if i < len(items)]
            order = {id(r): n for n, r in enumerate(members)}
            runs.append(_Run(size, roots, sorted(window, key=lambda r: order[id(r)])))
    return runs


def _runs_text(runs: list[_Run], limit: int = 3) -> str:
    shown = "; ".join(run.describe() for run in runs[:limit])
    return shown + (f"; and {units.counted(len(runs) - limit, 'more run')}" if len(runs) > limit else "")


def _one_run(results: list[RankResult], newest: bool) -> tuple[list[RankResult], list[str]]:
    """The traces of one run of ``results``, and a note when others were left out (``newest``:
    the newest run of a directory), else a JobError naming the runs and what differs."""
    runs = _runs(results)
    if len(runs) == 1 or (not newest and any(_rank_of(r) is None for r in results)):
        return results, []  # one run, or traces without ranks: _check_one_job names one
    if newest:
        chosen = max(runs, key=lambda run: run.newest)
        others = _runs_text([run for run in runs if run is not chosen])
        return chosen.results, [
            f"{len(runs)} {RUNS_NOTE}, {chosen.describe()}; "
            f"left out: {others} (give a run's files, or its own directory, to analyze it)"
        ]
    differs = [
        what
        for what, values in (
            ("world sizes", {run.world_size for run in runs}),
            ("models", {run.roots for run in runs}),
            ("file names", {frozenset(_job_name(r.path) for r in run.results) for run in runs}),
        )
        if len(values) > 1
    ]
    parts = _runs_text(runs)
    pick = "(one run's files, or its own directory)"
    if not differs:  # one job, captured in several windows
        ranks = [rank for r in runs[1].results if (rank := _rank_of(r)) is not None]
        raise JobError(
            f"rank {_numbers(ranks[:1])} given twice (several capture windows): {parts}; "
            f"give the traces of one window {pick}"
        )
    raise JobError(
        f"ranks of different jobs mixed ({' and '.join(differs)} differ): {parts}; "
        f"give the traces of one job {pick}"
    )


def _check_one_job(results: list[RankResult]) -> tuple[list[tuple[int, RankResult]], int | None]:
    """The ranks of ``results``, sorted; a JobError when they are not the ranks of one job."""
    if len(results) == 1:
        rank = _rank_of(results[0])
        return [(rank if rank is not None else 0, results[0])], _world_size_of(results[0])
    ranked = []
    for r in results:
        rank = _rank_of(r)
        if rank is None:
            raise JobError(
                f"{r.path}: no rank: the trace has no distributedInfo and its file "
                "name no rank number (rank3, worker_3)"
            )
        ranked.append((rank, r))
    # one run (_one_run): one world size, each rank once
    world_size = next((s for r in results if (s := _checked_world_size(r)) is not None), None)
    for rank, r in ranked:
        if world_size is not None and not 0 <= rank < world_size:
            raise JobError(f"{r.path}: rank {rank} is outside the world size {world_size}")
    ranked.sort(key=lambda t: t[0])
    return ranked, world_size


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
    results, warnings = _one_run(list(results), newest_run)
    ranked, world_size = _check_one_job(results)
    selections = {rank: tuple(r.profile.selection.numbers) for rank, r in ranked}
    distinct = sorted(set(selections.values()))
    if len(distinct) > 1:
        common = sorted(set.intersection(*(set(r.profile.selection.in_trace) for _, r in ranked)))
        parts = "; ".join(
            f"rank{'s' if len(rs) > 1 else ''} {_numbers(rs)}: step{'s' if len(s) != 1 else ''} {_numbers(s)}"
            for s in distinct
            for rs in [[rank for rank, sel in selections.items() if sel == s]]
        )
        hint = (
            f"give --step N with a step every rank has ({_numbers(common)})"
            if common
            else "no step is in every trace"
        )
        raise JobError(f"mismatched steps: the ranks' traces hold different steps ({parts}); {hint}")
    steps = distinct[0] if distinct else ()
    missing: tuple[int, ...] = ()
    if world_size is not None and len(ranked) > 1:
        missing = _missing([rank for rank, _ in ranked], world_size)
        if missing:
            warnings.append(
                f"partial job: {len(missing)} of {world_size} ranks have no trace "
                f"(rank{'s' if len(missing) > 1 else ''} {_numbers(missing)}); "
                "statistics are over the ranks given"
            )
    ranks = [
        JobRank(rank, r.path, r.profile, r.timeline, _mean_timeline(r.timeline, steps)) for rank, r in ranked
    ]
    for jr in ranks:
        for w in jr.profile.warnings:
            warnings.append(f"rank {jr.rank}: {w}")
    has_gpu = any(jr.profile.has_gpu for jr in ranks)
    metric = "gpu_busy_us" if has_gpu else "cpu_us"
    step_metric = "compute_us" if has_gpu else "cpu_compute_us"
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
        metric=metric,
        step_metric=step_metric,
        warnings=(),
        engine=engine,
    )
    stragglers = _stragglers(job)
    counted: dict[str, list[str]] = {}
    for w in warnings:  # one line per distinct warning, with the ranks' count
        text = w.split(": ", 1)[1] if w.startswith("rank ") else w
        counted.setdefault(text, []).append(w)
    merged = []
    for text, items in counted.items():
        if len(items) > 1 and all(i.startswith("rank ") for i in items):
            merged.append(f"{len(items)} ranks: {text}")
        else:
            merged.extend(items)

    return replace(job, stragglers=stragglers, warnings=tuple(merged))


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
                    rank,
                    t,
                    reference_us,
                    t - reference_us,
                    (t - reference_us) / reference_us,
                    listed,
                    ranks,
                    modules_us - listed_us,
                    (t - reference_us) - modules_us,
                    reference,
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
    gpu = job.metric == "gpu_busy_us"
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


def _ranks(engine: Any, paths: list[str], options: RankOptions, progress: Any) -> list[RankResult]:
    """Every path's result: from this machine's cache where it is there, the others from the
    engine's workers (none started when every rank is cached)."""
    found: dict[int, RankResult] = {}
    for i, (p, hit) in enumerate(zip(paths, cached_ranks(paths, options))):
        if hit is not None:
            found[i] = hit
            if progress:
                progress(len(found), len(paths), p)
    todo = [i for i in range(len(paths)) if i not in found]
    if todo:

        def counted(done: int, total: int, item: object) -> None:
            progress(len(found) + done, len(paths), item)

        got = engine.map(analyze_rank, [(paths[i], options) for i in todo], counted if progress else None)
        found.update(zip(todo, got))
    return [found[i] for i in range(len(paths))]


def own_compute_us(node: ModuleNode, gpu: bool) -> float:
    """A node's own part of its rank's step time (``gpu``: GPU compute, else CPU compute): the
    summed durations of its own kernels less its collective kernels', or its own CPU time (none
    for a collective group or the time between ops, which the step time leaves out)."""
    if gpu:
        collective = sum(
            op.gpu_work_us
            for op in node.ops
            if op.kind is OpKind.KERNEL and schema.COLLECTIVE_KERNEL_RE.match(op.name)
        )
        return max(node.own.gpu_work_us - collective, 0.0)
    if is_collective_group(node) or (node.kind is NodeKind.GROUP and node.name == BETWEEN_OPS):
        return 0.0
    return node.own.cpu_us


def analyze_job(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    step: int | None = None,
    hierarchy: Source | str | None = None,
    peak_tflops: float | None = None,
    max_memory: int | str | None = None,
    engine: str | Engine | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    scheduler_timeout: float | None = None,
    straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD,
    progress: Progress | None = None,
    cache: bool | None = None,
    newest_run: bool | None = None,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = SortKey.ORDER,
    ignore: tuple[str, ...] | list[str] = (),
) -> Job:
    """Analyze the traces of a distributed job (files, directories, glob patterns) and reduce
    them into a :class:`Job`. ``engine``: ``"local"`` (a process pool of ``jobs`` workers,
    default: all CPUs), ``"dask"`` (``scheduler`` ``tcp://HOST:PORT``, else a LocalCluster;
    ``scheduler_timeout``: seconds to wait for it and a first worker, default 30), or
    an object with the :class:`~traceprof.engine.Engine` interface. ``progress``: called as each
    trace is done (:data:`traceprof.progress.Progress`; a callback of three parameters is called
    as before, ``progress(done, total, path)``). ``cache``: each worker reads and writes its
    ranks' results in the cache of its machine (default: unless ``$TRACEPROF_CACHE`` is ``off``).
    ``newest_run``: traces of several runs give the newest run's report, with a warning naming
    the others, instead of an error (default: when ``paths`` is one directory). ``max_memory``
    (default: ``$TRACEPROF_MAX_MEMORY``, else 80% of the available memory) is the job's: divided
    among the traces loaded at once on this machine (docs/jobs.md). ``depth``, ``top``,
    ``sort``, ``ignore``: the modules shaped as ``traceprof analyze`` shapes them
    (:meth:`Job.shaped`).

    >>> job = analyze_job("runs/exp1/")  # doctest: +SKIP
    >>> df = job.to_dataframe()  # doctest: +SKIP
    >>> df.pivot_table(index="module", columns="rank", values="gpu_busy_us")  # doctest: +SKIP
    """
    from traceprof import options as checked
    from traceprof.engine import make_engine
    from traceprof.progress import per_item

    # checked and made plain int and float once, as the command line does (numpy.int64(2) is 2)
    step = checked.argument("step", step, int, min=0)
    depth = checked.argument("depth", depth, int, min=0)
    top = checked.argument("top", top, int, min=1)
    jobs = checked.argument("jobs", jobs, int, min=1)
    peak_tflops = checked.argument("peak_tflops", peak_tflops, float, min=0, min_open=True)
    scheduler_timeout = checked.argument("scheduler_timeout", scheduler_timeout, float, min=0, min_open=True)
    straggler_threshold = checked.argument("straggler_threshold", straggler_threshold, float, min=0) or 0.0
    if newest_run is None:
        newest_run = isinstance(paths, (str, os.PathLike)) and os.path.isdir(paths)
    paths = find_traces(paths)
    if engine is None or isinstance(engine, str):
        engine = make_engine(
            engine or "local", jobs=jobs, scheduler=scheduler, scheduler_timeout=scheduler_timeout
        )
    at_once = _traces_at_once(engine, len(paths))
    options = RankOptions(
        step=step,
        hierarchy=hierarchy,
        peak_tflops=peak_tflops,
        max_memory=max_memory if at_once is None else job_memory_share(max_memory, at_once),
        cache=cache,
        sharing=at_once or 1,
    )
    if depth is not None or top is not None or sort != SortKey.ORDER or ignore:
        shaping.check_shape(depth, top, sort)  # before any trace is read
    results = _ranks(engine, paths, options, per_item(progress))
    job = reduce_job(
        results,
        straggler_threshold=straggler_threshold,
        engine=getattr(engine, "name", "local"),
        newest_run=newest_run,
    )
    if depth is None and top is None and sort == SortKey.ORDER and not ignore:
        return job
    return job.shaped(depth=depth, top=top, sort=sort, ignore=ignore)


def _traces_at_once(engine: Any, traces: int) -> int | None:
    """How many traces ``engine`` loads at once on this machine: its workers (``jobs``), at
    most one per trace; None when they run elsewhere (a Dask scheduler's machines), where each
    worker's limit is that machine's own."""
    if getattr(engine, "scheduler", None) is not None:
        return None
    from traceprof.engine import default_jobs

    return max(min(getattr(engine, "jobs", None) or default_jobs(), traces), 1)


# ---- shaping: the modules shown, in the order shown --------------------------------------------


def _median(values: dict[int, float]) -> float:
    s = spread_of(values)
    return s.median if s is not None else 0.0


def _job_size(job: Job) -> Callable[[JobModule, Measure], float]:
    """A module's size by a sort key's measure: its median across the ranks."""

    def size(m: JobModule, measure: Measure) -> float:
        if measure.field == "calls":
            return _median({r: float(n.calls) for r, n in m.nodes.items()})
        return m.spread(measure.field or job.metric, measure.phase).median

    return size


def job_sort_value(job: Job, key: SortKey) -> Any:
    """The sort key of a module for ``key``: its median across the ranks, negated (largest
    first), or its name (None for ``order``: the order the modules are in)."""
    return shaping.sort_value(key, _job_size(job))


def _folded(job: Job, parent: JobModule | None, group: list[JobModule], depth: int) -> JobModule:
    """One ``(k more)`` module holding ``group``'s time on every rank."""
    parent_name = parent.qualified_name if parent is not None else None
    nodes = {}
    for rank in sorted({r for m in group for r in m.nodes}):
        members = [m.nodes[rank] for m in group if rank in m.nodes]
        nodes[rank] = shaping.more_node(
            members,
            id=-1,
            parent=-1,
            depth=depth,
            parent_name=parent_name,
            parent_path=members[0].path[:-1],
        )
    parent_key = parent.key if parent is not None else None
    return JobModule(
        key=(parent_key or ()) + (shaping.MORE,),
        parent=parent_key,
        depth=depth,
        kind=NodeKind.OTHERS,
        name=shaping.more_name(len(group)),
        class_name="",
        qualified_name=shaping.more_qualified_name(parent_name),
        nodes=nodes,
    )


def shape_job(
    job: Job,
    *,
    depth: int | None = None,
    top: int | None = None,
    sort: SortKey | str = SortKey.ORDER,
    ignore: tuple[str, ...] | list[str] = (),
    all_rows: bool = True,
) -> Job:
    """:meth:`Job.shaped`."""
    key = shaping.check_shape(depth, top, sort)
    hidden_by = shaping.ignore_matcher(ignore)
    order_fn = job_sort_value(job, key)
    top_fn = job_sort_value(job, shaping.size_key(key))
    known = {m.key for m in job.modules}
    children: dict[tuple[str, ...] | None, list[JobModule]] = {}
    for m in job.modules:
        children.setdefault(m.parent if m.parent in known else None, []).append(m)

    def subtree(m: JobModule, limit: int | None = None) -> int:
        """The modules of ``m``'s subtree (down to depth ``limit``), counted without recursion."""
        count, stack = 0, [m]
        while stack:
            x = stack.pop()
            count += limit is None or x.depth <= limit
            stack.extend(children.get(x.key, ()))
        return count

    hidden = 0

    def shown(parent: JobModule | None, level: int) -> list[JobModule]:
        """The children of ``parent`` (None: the roots) as shown at ``level``; those hidden for
        having no time are counted."""
        nonlocal hidden
        kids = children.get(parent.key if parent is not None else None, [])
        if parent is not None:
            kids = [c for c in kids if not hidden_by(c)]
        if not all_rows:  # a module without time on any rank: hidden, and counted
            timed = {c.key: any(t > 0 for t in c.times(job.metric).values()) for c in kids}
            hidden += sum(subtree(c, depth) for c in kids if not timed[c.key])
            kids = [c for c in kids if timed[c.key]]
        kept, folded = shaping.arrange(kids, order=order_fn, top=top, size=top_fn)
        more = [_folded(job, parent, folded, level)] if folded else []
        modules = [c for c in kept if c.kind is not NodeKind.UNATTRIBUTED]
        return modules + more + [c for c in kept if c.kind is NodeKind.UNATTRIBUTED]

    def below(m: JobModule, level: int) -> list[JobModule]:
        return shown(m, level + 1) if depth is None or level < depth else []

    # depth first without recursion: a tree is as deep as its traces make it
    out = [m for m, _, entering in shaping.depth_first(shown(None, 0), below) if entering]
    return replace(job, modules=tuple(out), hidden_modules=job.hidden_modules + hidden)
