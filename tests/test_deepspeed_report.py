"""The DeepSpeed-style report (``--format tree``): its summary adds up to the tree plus the
"(not in any module)" bucket, the layout follows DeepSpeed's ``print_model_profile``, and
``--ignore`` / ``--batch-size`` / ``--top`` reach it. Goldens of the default report are in
tests/test_render.py; one raw-number golden with options is here."""

from __future__ import annotations

import math
import re

import pytest
from click.testing import CliRunner

import traceprof
from traceprof import units
from traceprof.cli import main
from traceprof.render import RenderOptions, render
from traceprof.render.tree import summarize
from traceprof.result.model import NodeKind, is_optimizer_group
from traceprof.result.transforms import ignore_modules, limit_depth

from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .test_render import GOLDEN, _stable

RESNET_CPU = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
MI300 = SHARED_TRACES / "module_tree/mi300_resnet_activation_checkpoint_training.json.gz"
TRACES = {"resnet18_cpu": RESNET_CPU, "bert_small": BERT, "mi300": MI300}


@pytest.fixture(scope="module")
def profiles():
    return {name: traceprof.analyze(path, depth=2) for name, path in TRACES.items()}


def _time(profile, times):
    return times.gpu_busy_us if profile.has_gpu else times.cpu_us


def _raw_value(text: str, label: str) -> float:
    m = re.search(r"^" + re.escape(label) + r"\s+([0-9.]+)\s*$", text, re.M)
    assert m, f"no {label!r} line"
    return float(m.group(1))


@pytest.mark.parametrize("name", sorted(TRACES))
def test_summary_latencies_equal_the_tree_plus_the_bucket(profiles, name):
    profile = profiles[name]
    profile.self_check()
    # computed here from the tree, independently of the renderer
    modules = [profile.nodes[r] for r in profile.roots if profile.nodes[r].kind is NodeKind.MODULE]
    bucket = profile.unattributed
    groups = [profile.nodes[c] for c in bucket.children]
    optimizer = [g for g in groups if is_optimizer_group(g)]
    tree_fwd = sum(_time(profile, n.forward.total) for n in modules)
    tree_bwd = sum(_time(profile, n.backward.total) for n in modules)
    assert all(_time(profile, n.other.total) == 0 for n in modules)  # modules: fwd or bwd only
    step = sum(_time(profile, g.other.total) for g in optimizer)
    other = _time(profile, bucket.other.total) - step
    bucket_fwd = _time(profile, bucket.forward.total)
    bucket_bwd = _time(profile, bucket.backward.total)
    step_time = profile.selection.gpu_busy_us if profile.has_gpu else profile.selection.cpu_us

    s = summarize(profile)
    assert s.fwd_us == pytest.approx(tree_fwd + bucket_fwd)
    assert s.bwd_us == pytest.approx(tree_bwd + bucket_bwd)
    assert s.step_us == pytest.approx(step)
    assert s.other_us == pytest.approx(other, abs=1e-6)
    assert s.iter_us == pytest.approx(tree_fwd + tree_bwd + _time(profile, bucket.total))
    assert s.iter_us == pytest.approx(step_time)

    # and the rendered numbers (--raw: microseconds, 3 decimals) say the same
    text = render(profile, "tree", RenderOptions(raw_numbers=True))
    fwd, bwd = _raw_value(text, "fwd latency:"), _raw_value(text, "bwd latency:")
    opt, it = _raw_value(text, "step latency:"), _raw_value(text, "iter latency:")
    rest = _raw_value(text, "other latency (neither fwd, bwd nor step):")
    assert fwd == pytest.approx(tree_fwd + bucket_fwd, abs=1e-3)
    assert bwd == pytest.approx(tree_bwd + bucket_bwd, abs=1e-3)
    assert opt == pytest.approx(step, abs=1e-3)
    assert rest == pytest.approx(other, abs=1e-3)
    assert fwd + bwd + opt + rest == pytest.approx(it, abs=4e-3)
    assert it == pytest.approx(step_time, abs=1e-3)


def test_optimizer_step_and_batch_come_from_the_trace(profiles):
    p = profiles["resnet18_cpu"]
    names = [p.nodes[c].name for c in p.unattributed.children if is_optimizer_group(p.nodes[c])]
    assert names == ["Optimizer.step#AdamW.step"]  # zero_grad is not the weight update
    root = p.nodes[p.roots[0]]
    s = summarize(p)
    assert s.params == root.info.params_total > 0
    assert s.batch_size == root.info.inputs[0]["shape"][0]
    assert (s.world_size, s.dp_size, s.mp_size) == (1, 1, 1)
    assert summarize(p, batch_size=8).batch_size == 8
    text = render(p, "tree", RenderOptions(raw_numbers=True, batch_size=8))
    assert _raw_value(text, "samples/second:") == pytest.approx(8 / (s.iter_us * 1e-6), rel=1e-5)

    mi300 = profiles["mi300"]
    mi = summarize(mi300)
    assert (mi.world_size, mi.dp_size, mi.mp_size) == (8, 8, 1)  # DDP root over 8 ranks: no model parallelism
    assert mi.batch_size is None  # no module table
    foreach = next(
        mi300.nodes[c] for c in mi300.unattributed.children if mi300.nodes[c].name == "aten::_foreach_add_"
    )
    assert mi.step_us == pytest.approx(_time(mi300, foreach.total))
    bert = render(profiles["bert_small"], "tree")
    assert re.search(r"^world size:\s+unknown$", bert, re.M)
    assert re.search(r"^samples/second:\s+unknown$", bert, re.M)


def test_layout_follows_deepspeed(profiles):
    p = profiles["resnet18_cpu"]
    text = render(p, "tree")
    root = p.nodes[p.roots[0]]
    order = [
        "traceprof module profile",
        "-------------------------- DeepSpeed Flops Profiler --------------------------",
        "Profile Summary at step ",
        "Notations:",
        "params per GPU:",
        "fwd MACs per GPU:",
        "fwd flops per GPU:",
        "fwd latency:",
        "fwd FLOPS per GPU = fwd flops per GPU / fwd latency:",
        "bwd latency:",
        "bwd FLOPS per GPU",
        "fwd+bwd FLOPS per GPU",
        "step latency:",
        "iter latency:",
        "samples/second:",
        "----------------------------- Aggregated Profile per GPU -----------------------------",
        "Top 3 modules in terms of params, MACs or fwd latency at different model depths:",
        "depth 0:",
        f"    params      - {{'ResNet18': '{units.params(root.info.params_total)}'}}",
        "    MACs        - ",
        "    fwd latency - ",
        "------------------------------ Detailed Profile per GPU ------------------------------",
        "Each module profile is listed after its name in the following order:",
        f"ResNet18(\n  {units.params(root.info.params_total)} = 100% Params, ",
        "  (conv1): Conv2d(",
        " = 0.08% Params, ",
        "kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)",
        "(not in any module)(",
        "(Optimizer.step#AdamW.step)(fwd ",
        "iter latency",
        "optimizer step)",
    ]
    at = 0
    for piece in order:
        found = text.find(piece, at)
        assert found >= 0, f"{piece!r} missing or out of order"
        at = found + len(piece)
    assert text.rstrip().endswith("-" * 78)


def test_aggregated_profile_top_k_per_depth(profiles):
    p = profiles["resnet18_cpu"]
    per_class: dict[str, float] = {}
    for n in p.nodes:
        if n.kind is NodeKind.MODULE and n.depth == 1:
            per_class[n.class_name] = per_class.get(n.class_name, 0.0) + _time(p, n.forward.total)
    ranked = sorted(per_class.items(), key=lambda kv: -kv[1])
    one = render(p, "tree", RenderOptions(top_modules=1))
    assert "Top 1 modules in terms of" in one
    c, t = ranked[0]  # summed over the modules of one class at one depth
    assert "depth 1:\n" in one
    assert f"    fwd latency - {{{c!r}: {units.duration(t)!r}}}" in one
    three = render(p, "tree")
    expect = ", ".join(f"{c!r}: {units.duration(t)!r}" for c, t in ranked[:3])
    assert f"    fwd latency - {{{expect}}}" in three


def test_ignore_hides_modules_and_keeps_their_time_in_the_parent():
    full = traceprof.analyze(RESNET_CPU)
    hidden = ignore_modules(full, ["BasicBlock", "fc"])
    hidden.self_check()
    assert "BasicBlock" not in {n.class_name for n in hidden.nodes}
    assert "fc" not in {n.qualified_name for n in hidden.nodes}
    for q in ("", "layer1"):  # the root's qualified name is ""
        a, b = full.find(q), hidden.find(q)
        assert b.total == a.total
        assert not b.children or q == ""
    assert summarize(hidden).iter_us == pytest.approx(summarize(full).iter_us)
    # qualified-name patterns, and the same result whatever the order with --depth
    a = limit_depth(ignore_modules(full, ["layer?.*"]), 2)
    b = ignore_modules(limit_depth(full, 2), ["layer?.*"])
    assert [n.qualified_name for n in a.nodes] == [n.qualified_name for n in b.nodes]
    assert ignore_modules(full, []) is full


def test_cli_options_reach_the_report():
    r = CliRunner().invoke(
        main, ["analyze", str(RESNET_CPU), "--depth", "1", "--ignore", "Conv2d", "--batch-size", "4"]
    )
    assert r.exit_code == 0, r.output
    assert "(conv1)" not in r.output and "(layer1): Sequential(" in r.output
    assert re.search(r"^batch size per GPU:\s+4 \(--batch-size\)$", r.output, re.M)
    r = CliRunner().invoke(main, ["analyze", str(RESNET_CPU), "--depth", "1", "--top", "2"])
    assert r.exit_code == 0, r.output
    assert "Top 2 modules in terms of" in r.output and re.search(r"\(\d+ more\)", r.output)
    r = CliRunner().invoke(main, ["analyze", str(RESNET_CPU), "--batch-size", "0"])
    assert r.exit_code != 0


def test_depth_and_top_do_not_hide_the_optimizer_step():
    full = summarize(traceprof.analyze(RESNET_CPU))
    assert full.step_us > 0
    for kw in ({"depth": 0}, {"top": 1}, {"depth": 1, "top": 1}):
        s = summarize(traceprof.analyze(RESNET_CPU, **kw))
        assert s.step_us == pytest.approx(full.step_us), kw
        assert s.fwd_us == pytest.approx(full.fwd_us) and s.bwd_us == pytest.approx(full.bwd_us)
        assert s.iter_us == pytest.approx(traceprof.analyze(RESNET_CPU).selection.cpu_us)


def test_golden_raw_report_with_options(update_golden):
    profile = ignore_modules(traceprof.analyze(RESNET_CPU, depth=1), ["MaxPool2d", "relu"])
    out = _stable(render(profile, "tree", RenderOptions(raw_numbers=True, batch_size=4, top_modules=2)))
    golden = GOLDEN / "resnet18_cpu.report_raw.txt"
    if update_golden or not golden.exists():
        golden.write_text(out)
        if not update_golden:
            pytest.fail(f"{golden.name} was missing and has been written; rerun")
    assert out == golden.read_text()
    assert math.isfinite(float(re.search(r"^iter latency:\s+(\S+)$", out, re.M).group(1)))
