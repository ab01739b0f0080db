"""The reduced result of a job (:class:`Job`): its ranks (:class:`JobRank`), its modules matched
across them, its stragglers (:class:`Straggler`), and what its step times measure
(:class:`StepMetric`)."""

from __future__ import annotations

import enum

import msgspec

from traceprof.job.modules import JobModule, is_collective_group
from traceprof.job.shaping import shape_job
from traceprof.result.metric import TimeMetric
from traceprof.result.model import ModuleProfile, find_named
from traceprof.result.step_times import StepTimeline


class StepMetric(str, enum.Enum):
    """What a job's step times (and stragglers) compare: a :class:`StepTimeline` field, or
    :func:`cpu_compute_us` when no rank has GPU work. Prints as its field name."""

    COMPUTE = "compute_us"  # GPU work outside collectives
    CPU_COMPUTE = "cpu_compute_us"  # CPU time in ops outside collectives

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, has_gpu: bool) -> StepMetric:
        return cls.COMPUTE if has_gpu else cls.CPU_COMPUTE


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
        return (
            self.cpu_compute_us if metric == StepMetric.CPU_COMPUTE else float(getattr(self.selected, metric))
        )

    @property
    def memory_peak_bytes(self) -> float | None:
        """The allocator's highest total in the rank's selected steps on its memory device
        (``ModuleProfile.memory_summary``); None without [memory] events or totals."""
        summary = self.profile.memory_summary
        return summary.peak.total_bytes if summary is not None and summary.peak is not None else None


def cpu_compute_us(profile: ModuleProfile) -> float:
    """CPU time per step in ops outside the collectives: the step's time in ops, annotations and
    Python frames (per thread, the union of its top-level slices) less the collective groups
    outside every module, where a fast rank waits for the slow one (its time between ops, where
    it waits for the backend's threads, is not in ops either)."""
    waiting = sum(n.total.cpu_us for n in profile.nodes if is_collective_group(n))
    return max(profile.selection.cpu_in_ops_us - waiting, 0.0)


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
    metric: TimeMetric
    #: what step times compare: "compute_us" (GPU work outside collectives) or, when no rank has
    #: GPU work, "cpu_compute_us" (CPU time in ops outside collectives)
    step_metric: StepMetric
    warnings: tuple[str, ...] = ()
    engine: str = "local"
    #: modules without time on any rank left out by :meth:`shaped` (``all_rows=False``)
    hidden_modules: int = 0
    #: the module nodes matched across the ranks (module_node_count: group nodes and the bucket
    #: are no modules), however :meth:`shaped` shows them
    matched_modules: int = 0

    #: the job with its modules shaped as ``traceprof analyze`` shapes a profile
    #: (:func:`~traceprof.job.shaping.shape_job`, which is this method)
    shaped = shape_job

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
