"""What holds memory at the step's peak and at the end of the forward, against PyTorch's own
memory profiler (``torch.profiler._memory_profiler``) on the same CPU training step.

Each model trains under ``traceprof.capture.profile(..., profile_memory=True, with_stack=True)``
(the memory profiler needs the stacks): a warmup step without the optimizer, then a recorded
step whose optimizer step is its first (so that the optimizer's state is allocated inside the
trace, where the CPU allocator's events show it). The same profiler's ``_memory_profile()`` sorts
every tensor into its categories from the autograd graph and the optimizer's state; traceprof
sorts the trace's blocks by where they were allocated and freed. At each one's peak, and at the
end of the forward, the categories must agree within 5%:

- gradients, optimizer state, activations: the same category there;
- temporaries: the memory profiler's TEMPORARY, AUTOGRAD_DETAIL and the tensors it leaves
  without a category (the optimizer's intermediate results);
- parameters: the module table's bytes against its PARAMETER;
- the total of the blocks allocated in the trace: its total less the tensors that existed before
  the profiler started (the parameters and the inputs: the CPU allocator counts only what is
  allocated while a profiler runs, so neither is in the trace's numbers).
"""

from __future__ import annotations

import bisect

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from traceprof.capture import profile  # noqa: E402

from .test_activation_memory import Block  # noqa: E402

TOLERANCE = 0.05
SLACK = 64  # bytes: 0-d tensors (a loss, the backward's seed) that the two sort differently


def _mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10)
    )


CASES = {
    "mlp_adam": (_mlp, lambda: torch.randn(128, 256), torch.optim.Adam),
    "transformer_block_adamw": (Block, lambda: torch.randn(4, 64, 128), torch.optim.AdamW),
}


def _categories(memory_profile, moment: float | None = None) -> tuple[float, dict[str, float]]:
    """(time, bytes by category name) of the memory profiler's timeline on the CPU: at its
    highest total, or at the last point at or before ``moment`` (µs since the epoch)."""
    from torch.profiler import _memory_profiler as mp

    times, sizes = mp.MemoryProfileTimeline(memory_profile)._coalesce_timeline("cpu")
    totals = [sum(s) for s in sizes]
    k = totals.index(max(totals)) if moment is None else bisect.bisect_right(times, moment) - 1
    names = {index + 1: (c.name if c is not None else "NONE") for c, index in mp._CATEGORY_TO_INDEX.items()}
    return times[k], {name: float(sizes[k][i]) for i, name in names.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_the_peak_and_the_end_of_the_forward_by_category_match_the_memory_profiler(case, tmp_path):
    make, make_input, optimizer = CASES[case]
    torch.manual_seed(0)
    model = make().train()
    opt = optimizer(model.parameters())
    x = make_input()
    with profile(
        model, logdir=str(tmp_path), wait=0, warmup=1, active=1, profile_memory=True, with_stack=True
    ) as prof:
        for i in range(2):
            opt.zero_grad(set_to_none=True)
            model(x).float().sum().backward()
            if i:  # the recorded step runs the optimizer's first step: its state is in the trace
                opt.step()
            prof.step()
    try:
        memory_profile = prof.profiler._memory_profile()
    except (AttributeError, ValueError, NotImplementedError) as e:  # a private API
        pytest.skip(f"torch's memory profiler is not available: {e}")
    result = prof.analyze()
    result.self_check()
    summary = result.memory_summary
    assert summary.device == "cpu"

    def approx(want):
        return pytest.approx(want, rel=TOLERANCE, abs=SLACK)

    # the peak: each at its own (the same moment: both totals change at the trace's events)
    peak = summary.peak
    at, want = _categories(memory_profile)
    start = result.metadata.base_time_ns / 1000 + result.timeline.start_us
    assert peak.step == result.timeline.step
    assert start + peak.time_us == pytest.approx(at, abs=1.0)
    assert peak.gradients_bytes == approx(want["GRADIENT"])
    assert peak.optimizer_state_bytes == approx(want["OPTIMIZER_STATE"])
    assert peak.optimizer_state_bytes > 0
    assert peak.activations_bytes == approx(want["ACTIVATION"])
    assert peak.temporaries_bytes == approx(want["TEMPORARY"] + want["AUTOGRAD_DETAIL"] + want["NONE"])
    assert peak.parameters_bytes == approx(want["PARAMETER"]) and not peak.parameters_in_total
    # what both saw allocated in the trace (the CPU allocator's total also counts what an
    # earlier profiler saw allocated and is still alive: before the trace)
    before_trace = want["PARAMETER"] + want["INPUT"]
    assert peak.total_bytes - peak.before_trace_bytes == approx(sum(want.values()) - before_trace)

    # the end of the forward: what the forward keeps for the backward
    end = summary.forward_end
    _, want = _categories(memory_profile, start + end.time_us)
    assert end.activations_bytes == approx(want["ACTIVATION"]) and end.activations_bytes > 0
    assert end.gradients_bytes == approx(want["GRADIENT"])
    assert end.activations_bytes == approx(summary.activation_bytes)
