"""Inside a module: the ops and kernels table per module x op/kernel x pass (ModuleNode.ops, the
JSON ``ops`` section, ``traceprof analyze --ops MODULE``), checked against the kernels of each
module counted straight from the trace's events."""

from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys

import pytest

import traceprof
from traceprof.result.records import op_records
from traceprof.testing import generate

from .conftest import SAMPLE_TRACES, SHARED_TRACES

BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
MI300 = SHARED_TRACES / "module_tree/mi300_resnet_activation_checkpoint_training.json.gz"
SAMPLE = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"


def kernel_rows(profile, node, phase=None):
    """The kernel rows (kernels only, not memcpy or memset) of ``node`` and its subtree."""
    return [
        r
        for r in op_records(profile, node)
        if r["kind"] == "kernel" and r["kernels"] > 0 and phase in (None, r["pass"])
    ]


def test_a_modules_kernel_rows_are_the_kernels_launched_in_its_scope_on_a_real_trace():
    """BERT inference on an H100 (nn.Module events): for each of a few modules, the kernels
    launched inside its python_function event (launch -> kernel by correlation id), read from
    the raw JSON (runtime and driver launches), are the module's kernel rows: same names,
    counts and summed durations."""
    doc = json.loads(gzip.decompress(BERT.read_bytes()))
    events = doc["traceEvents"]
    kernels = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "kernel" and "correlation" in e.get("args", {})
    }
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    profile = traceprof.analyze(BERT)
    checked = 0
    for qualified in (
        "BertLMHeadModel_0.BertOnlyMLMHead_0",
        "BertLMHeadModel_0.BertModel_0.BertEmbeddings_0",
        "BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_1",
    ):
        node = profile.find(qualified)
        scope = [
            e for e in events if e.get("cat") == "python_function" and e["name"] == f"nn.Module: {node.name}"
        ]
        assert len(scope) == 1
        s = scope[0]
        inside = [
            kernels[e["args"]["correlation"]]
            for e in launches
            if e["tid"] == s["tid"]
            and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
            and e["args"].get("correlation") in kernels
        ]
        expected: dict[str, list[float]] = {}
        for k in inside:
            expected.setdefault(k["name"], []).append(k["dur"])
        rows = kernel_rows(profile, node, "forward")
        assert {r["name"]: r["calls"] for r in rows} == {k: len(v) for k, v in expected.items()}
        for r in rows:
            assert r["gpu_work_us"] == pytest.approx(sum(expected[r["name"]]), abs=1e-6)
        total = sum(r["gpu_work_us"] for r in rows)
        assert total == pytest.approx(sum(k["dur"] for k in inside))
        assert total == pytest.approx(node.forward.total.gpu_work_us)
        checked += 1
    assert checked == 3


def test_kernel_rows_match_the_generators_kernel_time_per_module(tmp_path):
    """A generated GPT training trace: per module and pass, the own kernel rows add up to the
    kernel time the generator put in that module (forward and backward)."""
    out = tmp_path / "gpt.json"
    expect = generate(str(out), steps=3, layers=2, seed=3)
    profile = traceprof.analyze(out)
    profile.self_check()
    n = profile.selection.count
    assert n == expect["steps"]
    for qualified, want in expect["module_kernel_us"].items():
        node = profile.find(qualified)
        for phase, key in (("forward", "fwd"), ("backward", "bwd")):
            own = sum(
                r.gpu_work_us
                for r in node.ops
                if r.kind.value == "kernel" and r.kernels > 0 and r.phase == phase
            )
            assert own * n == pytest.approx(want[key], rel=1e-6, abs=1e-3), (qualified, phase)


@pytest.mark.parametrize("trace", [BERT, MI300, SAMPLE], ids=lambda p: p.name.split(".")[0])
def test_rows_add_up_to_every_nodes_own_work_also_after_depth_and_top(trace):
    for profile in (
        traceprof.analyze(trace),
        traceprof.analyze(trace, depth=1),
        traceprof.analyze(trace, top=2, depth=3),
    ):
        profile.self_check()  # checks each node's rows against its own work, per pass
        for node in profile.nodes:
            for phase in ("forward", "backward", "other"):
                own = node.phase(phase).own
                ops = [r for r in node.ops if r.phase == phase and r.kind.value == "op"]
                assert sum(r.gpu_busy_us for r in ops) == pytest.approx(own.gpu_busy_us, abs=1e-6)
                assert sum(r.cpu_us for r in ops) == pytest.approx(own.cpu_us, abs=1e-6)
                assert sum(r.flops for r in ops) == pytest.approx(own.flops, rel=1e-9, abs=1e-3)


def test_json_has_one_ops_row_per_node_op_and_pass():
    doc = json.loads(traceprof.render.render(traceprof.analyze(SAMPLE), "json"))
    rows = doc["ops"]
    keys = [(r["node"], r["pass"], r["kind"], r["name"], r["input_shapes"]) for r in rows]
    assert len(keys) == len(set(keys)) and rows
    conv = next(r for r in rows if r["qualified_name"] == "conv1" and r["name"] == "aten::conv2d")
    assert conv["pass"] == "forward" and conv["calls"] == 1 and conv["flops"] > 0
    assert conv["input_shapes"] == "[[2, 3, 64, 64], [64, 3, 7, 7], [], [], [], [], []]"
    assert 0 < conv["share_of_node"] <= 1 and conv["flop_per_s"] > 0


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_ops_of_a_module_as_text_csv_and_json(tmp_path):
    proc = _cli(SAMPLE, "--ops", "layer1.0.conv1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ops and kernels of layer1.0.conv1")
    assert lines[1].split()[:4] == ["pass", "kind", "name", "calls"]
    assert "aten::conv2d" in proc.stdout and "ConvolutionBackward0" in proc.stdout

    proc = _cli(BERT, "--ops", "*", "-f", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    profile = traceprof.analyze(BERT)
    root = profile.nodes[0]
    kernels = [float(r["gpu_busy_us"]) for r in rows if r["kind"] == "kernel"]
    # each written to the nanosecond (docs/output-formats.md)
    assert sum(kernels) == pytest.approx(profile.selection.gpu_busy_us, abs=5e-4 * len(kernels))
    assert {r["qualified_name"] for r in rows} >= {root.qualified_name}

    proc = _cli(BERT, "--ops", "BertLMHeadModel_0.BertOnlyMLMHead_0", "-f", "json")
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "traceprof.ops/1" and doc["rows"][0]["gpu_busy_us"] > 0

    proc = _cli(SAMPLE, "--ops", "nope")
    assert proc.returncode == 3 and "no module 'nope'" in proc.stderr
    proc = _cli(SAMPLE, "--ops", "conv1", "-f", "html")
    assert proc.returncode == 3 and "--ops writes" in proc.stderr
