"""Closures the optimizer runs (``optimizer.step(closure)``: PyTorch Lightning, LBFGS): the
forward, the loss and the backward inside ``Optimizer.step#...`` are what they are; only the
optimizer's own update is the step (docs/attribution.md, rule 4).

Tiny traces built in code for each shape of closure; the real ones (a Lightning Trainer,
LBFGS, an accelerate-prepared optimizer) in tests/test_integrations_lightning.py and below.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from traceprof.cli import main
from traceprof.render import render
from traceprof.render.tree import summarize

from .tracebuilder import TraceBuilder


def _closure(b: TraceBuilder, t: float, seq: int, backward_tid: int = 1) -> float:
    """One closure run from ``t``: zero_grad, the module's forward (a kernel of 10 us), the loss
    (autograd records it: 4 us), the seed of the backward, the backward (20 us); the time after."""
    b.annotation("Optimizer.zero_grad#AdamW.zero_grad", t, 10)
    b.op("aten::zero_", t + 2, 5)
    b.launch(t + 3, t + 3, 1)
    b.scope("", "Net", t + 20, 100)
    b.op("aten::addmm", t + 30, 50, seq=seq)
    b.launch(t + 40, t + 40, 10)
    b.op("aten::mse_loss", t + 130, 20, seq=seq + 1)
    b.launch(t + 135, t + 135, 4)
    b.op("aten::ones_like", t + 160, 5)
    b.launch(t + 162, t + 162, 2)
    bt = t + 170 if backward_tid == 1 else t + 166
    b.op(
        "autograd::engine::evaluate_function: MseLossBackward0",
        bt,
        30,
        tid=backward_tid,
        seq=seq + 1,
        fwd_tid=1,
    )
    b.op("MseLossBackward0", bt + 1, 25, tid=backward_tid, seq=seq + 1, fwd_tid=1)
    b.launch(bt + 2, bt + 2, 5, tid=backward_tid)
    b.op(
        "autograd::engine::evaluate_function: AddmmBackward0",
        bt + 40,
        50,
        tid=backward_tid,
        seq=seq,
        fwd_tid=1,
    )
    b.op("AddmmBackward0", bt + 41, 45, tid=backward_tid, seq=seq, fwd_tid=1)
    b.launch(bt + 42, bt + 42, 15, tid=backward_tid)
    return bt + 100


def _update(b: TraceBuilder, t: float) -> float:
    """The optimizer's own update from ``t``: two ops, kernels of 7 and 3 us."""
    b.op("aten::lerp_", t, 20)
    b.launch(t + 2, t + 2, 7)
    b.op("aten::addcdiv_", t + 30, 20)
    b.launch(t + 32, t + 32, 3)
    return t + 60


def lightning_like(backward_tid: int = 1) -> TraceBuilder:
    """A step whose optimizer runs the closure first, then its update (Lightning, accelerate)."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.annotation("Optimizer.step#AdamW.step", 100, 1000)
    t = _closure(b, 110, seq=1, backward_tid=backward_tid)
    _update(b, t + 10)
    return b


def lbfgs_like() -> TraceBuilder:
    """LBFGS: the closure three times, the optimizer's own work after each run."""
    b = TraceBuilder()
    b.step(1, 0, 3000)
    b.annotation("Optimizer.step#LBFGS.step", 10, 2500)
    t = 20.0
    for run in range(3):
        t = _closure(b, t, seq=10 * (run + 1))
        t = _update(b, t + 10) + 10
    return b


def _group(p, name):
    return next(n for n in p.nodes if n.name == name)


@pytest.mark.parametrize("backward_tid", [1, 2], ids=["backward-on-the-calling-thread", "autograd-thread"])
def test_a_closure_inside_the_optimizer_step_is_forward_loss_and_backward(analyze_built, backward_tid):
    p = analyze_built(lightning_like(backward_tid))
    s = summarize(p)
    opt = _group(p, "Optimizer.step#AdamW.step")
    # the optimizer's own work only: its two update kernels, in the step
    assert opt.forward.total.gpu_busy_us == 0 and opt.backward.total.gpu_busy_us == 0
    assert opt.other.total.gpu_busy_us == pytest.approx(10)
    assert s.step_us == pytest.approx(10)
    # forward: the module's kernel and the loss; the loss has its own group
    assert s.fwd_us == pytest.approx(14) and s.modules_fwd_us == pytest.approx(10)
    assert _group(p, "aten::mse_loss").forward.total.gpu_busy_us == pytest.approx(4)
    assert s.bwd_us == pytest.approx(20)
    # zero_grad and the backward's seed: the other pass, not the step
    assert _group(p, "Optimizer.zero_grad#AdamW.zero_grad").other.total.gpu_busy_us == pytest.approx(1)
    assert _group(p, "aten::ones_like").other.total.gpu_busy_us == pytest.approx(2)
    assert s.other_us == pytest.approx(3)
    assert s.iter_us == pytest.approx(p.selection.gpu_busy_us)


def test_each_closure_run_of_lbfgs_is_told_from_the_optimizer_work_between(analyze_built):
    p = analyze_built(lbfgs_like())
    s = summarize(p)
    assert s.step_us == pytest.approx(3 * 10)
    assert s.fwd_us == pytest.approx(3 * 14) and s.bwd_us == pytest.approx(3 * 20)
    assert s.other_us == pytest.approx(3 * 3)
    opt = _group(p, "Optimizer.step#LBFGS.step")
    assert opt.forward.total.gpu_busy_us == 0 and opt.backward.total.gpu_busy_us == 0
    assert opt.other.total.gpu_busy_us == pytest.approx(30)


def test_the_ops_of_the_optimizer_step_list_its_update_only(tmp_path):
    path = lightning_like().write(tmp_path / "closure.json")
    r = CliRunner().invoke(main, ["analyze", str(path), "--ops", "Optimizer.step#AdamW.step"])
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.stdout.splitlines() if "aten::" in line]
    assert sorted(row[2] for row in rows) == ["aten::addcdiv_", "aten::lerp_"], r.stdout
    assert {row[0] for row in rows} == {"other"}


def test_an_optimizer_step_without_a_closure_is_unchanged(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 2000)
    t = _closure(b, 10, seq=1)
    b.annotation("Optimizer.step#AdamW.step", t + 10, 100)
    _update(b, t + 20)
    p = analyze_built(b)
    s = summarize(p)
    assert s.step_us == pytest.approx(10) and s.fwd_us == pytest.approx(14)
    assert _group(p, "Optimizer.step#AdamW.step").other.total.gpu_busy_us == pytest.approx(10)


def test_a_closure_in_an_annotated_optimizer_step_keeps_its_forward_annotation(analyze_built):
    """A trace without modules (annotations only): ``## forward ##`` inside the optimizer's
    annotation is forward, the optimizer's own work the other pass."""
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.annotation("## optimizer ##", 10, 1000)
    b.annotation("## forward ##", 20, 100)
    b.op("aten::addmm", 30, 50, seq=1)
    b.launch(40, 40, 10)
    b.annotation("## backward ##", 200, 100)
    b.op("autograd::engine::evaluate_function: AddmmBackward0", 210, 50, seq=1, fwd_tid=1)
    b.op("AddmmBackward0", 211, 45, seq=1, fwd_tid=1)
    b.launch(212, 212, 15)
    b.annotation("## adam ##", 400, 100)
    b.op("aten::lerp_", 410, 20)
    b.launch(412, 412, 7)
    p = analyze_built(b)
    assert p.source == "annotations"
    s = summarize(p)
    assert s.fwd_us == pytest.approx(10) and s.bwd_us == pytest.approx(15)
    assert s.step_us == pytest.approx(7)
    assert "fwd latency" in render(p, "tree")


# -- real closures: plain PyTorch LBFGS, and an optimizer prepared by accelerate -------------------


def _real_closure_profile(tmp_path, prepare=None):
    """Two LBFGS steps of a tiny MLP traced by traceprof.capture.profile (the second one
    recorded); ``prepare``: wraps model and optimizer (accelerate). Returns the profile and the
    number of closure calls in the recorded step."""
    torch = pytest.importorskip("torch")
    import traceprof.capture as capture

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3, history_size=2)
    if prepare is not None:
        model, opt = prepare(model, opt)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    with capture.profile(model, logdir=tmp_path, wait=0, warmup=1, active=1) as prof:
        for _ in range(2):
            calls[0] = 0
            opt.step(closure)
            prof.step()
    p = prof.analyze()
    p.self_check()
    return p, calls[0]


def _check_real_closure(p, closure_calls: int, optimizer: str) -> None:
    s = summarize(p)
    root = p.find("")
    assert root.calls == closure_calls >= 2  # one forward per closure call
    opt = _group(p, optimizer)
    # the optimizer step holds no forward or backward work any more: only its own update
    assert opt.forward.total.cpu_us == 0 and opt.backward.total.cpu_us == 0
    assert opt.other.total.cpu_us > 0 and s.step_us == pytest.approx(opt.other.total.cpu_us)
    # forward: the modules' forward and the loss, which has its own group
    loss = _group(p, "aten::mse_loss")
    assert loss.forward.total.cpu_us > 0
    assert s.fwd_us == pytest.approx(s.modules_fwd_us + s.outside_fwd_us)
    outside_forward = sum(n.forward.total.cpu_us for n in p.nodes if n.kind.value == "group")
    assert s.outside_fwd_us == pytest.approx(outside_forward)
    assert {n.name for n in p.nodes if n.kind.value == "group" and n.forward.total.cpu_us > 0} <= {
        "aten::mse_loss"
    }


def test_real_lbfgs_closure(tmp_path):
    p, calls = _real_closure_profile(tmp_path)
    _check_real_closure(p, calls, "Optimizer.step#LBFGS.step")


def test_real_closure_through_an_accelerate_optimizer(tmp_path):
    accelerate = pytest.importorskip("accelerate")

    def prepare(model, opt):
        return accelerate.Accelerator(cpu=True).prepare(model, opt)

    p, calls = _real_closure_profile(tmp_path, prepare)
    _check_real_closure(p, calls, "Optimizer.step#LBFGS.step")
