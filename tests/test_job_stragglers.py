"""Stragglers and what explains them, on jobs built in code. CPU-only ranks (gloo): the straggler
is the rank with the most CPU time in ops outside the collectives, not the longest step. On CPU
and GPU alike, only the modules' own compute (not their collectives, not the time between ops)
explains a straggler."""

from __future__ import annotations

import pytest

from traceprof import analyze_job
from traceprof.result.model import NodeKind
from traceprof.trace.schema import COLLECTIVE_CPU_RE

from .tracebuilder import TraceBuilder

STEP_US = 10_000.0
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def cpu_rank(rank: int, block_us: float, wait_us: float) -> TraceBuilder:
    """Two steps of equal wall time: the model (its ``block`` doing ``block_us`` of work) on the
    main thread, then the wait for the other rank, between ops there and in a ``gloo:all_reduce``
    on the backend's thread."""
    b = TraceBuilder(pid=100 + rank).cpu_rank(rank)
    for n in (1, 2):
        t = n * 20_000.0
        b.step(n, t, STEP_US)
        b.scope("", "Net", t + 100, block_us + 200)
        b.scope("block", "Block", t + 150, block_us + 100)
        b.op("aten::mm", t + 200, block_us)
        b.annotation("gloo:all_reduce", t + block_us + 400, wait_us, tid=2)
    return b


@pytest.fixture
def cpu_job(tmp_path):
    cpu_rank(0, block_us=1_000, wait_us=8_000).write(tmp_path / "rank0.json")
    cpu_rank(1, block_us=7_000, wait_us=2_000).write(tmp_path / "rank1.json")
    return analyze_job(tmp_path, jobs=1)


def test_cpu_straggler_is_the_rank_with_more_cpu_compute_not_a_longer_step(cpu_job):
    job = cpu_job
    assert job.metric == "cpu_us" and job.step_metric == "cpu_compute_us"
    assert {r.rank: r.selected.wall_us for r in job.ranks} == {0: STEP_US, 1: STEP_US}
    # in ops: the model's scopes (block + 200 us); the all-reduce on the other thread is waiting
    assert job.step_times() == {0: 1_200.0, 1: 7_200.0}
    [straggler] = job.stragglers
    # two ranks: compared with the faster one (their median, the mean, would halve the gap)
    assert (straggler.rank, straggler.step_us, straggler.reference_us, straggler.excess_us) == (
        1,
        7_200.0,
        1_200.0,
        6_000.0,
    )
    assert (straggler.reference, straggler.reference_ranks) == ("faster rank", (0,))


def test_cpu_straggler_is_explained_by_its_modules_not_by_collectives_or_waiting(cpu_job):
    [straggler] = cpu_job.stragglers
    assert [(m.qualified_name, excess) for m, excess in straggler.modules] == [("block", 6_000.0)]
    groups = {m.name for m in cpu_job.modules if m.kind is NodeKind.GROUP}
    assert {"gloo:all_reduce", "(step, between ops)"} <= groups  # in the tree, not in the answer


@pytest.mark.parametrize(
    ("name", "collective"),
    [
        ("gloo:all_reduce", True),
        ("nccl:all_reduce", True),
        ("c10d::allreduce_", True),
        ("_c10d_functional::all_reduce", True),
        ("record_param_comms", True),
        ("aten::mm", False),
        ("Optimizer.step#SGD.step", False),
    ],
)
def test_cpu_collective_names(name, collective):
    assert (COLLECTIVE_CPU_RE.match(name) is not None) is collective


def gpu_rank(rank: int, block_kernel_us: float, nccl_kernel_us: float) -> TraceBuilder:
    """Two steps: ``block`` launches a GEMM, ``comm`` (a module that all-reduces) an NCCL kernel."""
    b = TraceBuilder(pid=100 + rank)
    b.top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    for n in (1, 2):
        t = n * 20_000.0
        b.step(n, t, STEP_US)
        b.scope("", "Net", t + 100, 2_000)
        b.scope("block", "Block", t + 150, 500)
        b.op("aten::mm", t + 200, 100)
        b.launch(t + 210, t + 1_000, block_kernel_us, name="gemm")
        b.scope("comm", "Comm", t + 1_000, 500)
        b.op("c10d::allreduce_", t + 1_010, 100)
        b.launch(t + 1_020, t + 5_000, nccl_kernel_us, name=NCCL_KERNEL)
    return b


def test_gpu_straggler_is_explained_by_compute_kernels_not_by_collective_ones(tmp_path):
    gpu_rank(0, block_kernel_us=1_000, nccl_kernel_us=4_000).write(tmp_path / "rank0.json")
    gpu_rank(1, block_kernel_us=3_000, nccl_kernel_us=4_500).write(tmp_path / "rank1.json")
    job = analyze_job(tmp_path, jobs=1)
    assert job.step_metric == "compute_us" and job.step_times() == {0: 1_000.0, 1: 3_000.0}
    [straggler] = job.stragglers
    assert straggler.rank == 1 and straggler.excess_us == 2_000.0  # over the faster rank
    # comm's NCCL kernel is longer on rank 1 too, but collective time is not compute
    assert job.module("comm").times("gpu_work_us", own=True) == {0: 4_000.0, 1: 4_500.0}
    assert [(m.qualified_name, excess) for m, excess in straggler.modules] == [("block", 2_000.0)]


def test_a_stragglers_explanation_adds_up_to_its_excess():
    """The real 8-rank DLRM job: each straggler's modules (against the median ranks), the other
    modules and the rest add up to its excess; before, the modules were each compared with their
    own median and explained 185 us of excess with 63 us."""
    from .conftest import SHARED_TRACES

    job = analyze_job(SHARED_TRACES / "multi_rank", jobs=1)
    assert job.stragglers
    for s in job.stragglers:
        listed = sum(e for _, e in s.modules)
        assert listed + s.other_modules_us + s.unexplained_us == pytest.approx(s.excess_us, abs=1e-6)
        assert abs(s.unexplained_us) <= 0.05 * s.excess_us  # the modules hold the excess
        assert s.reference_ranks and s.rank not in s.reference_ranks
