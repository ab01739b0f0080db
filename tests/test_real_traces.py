"""Every real trace under ../shared/traces: it analyzes, its invariants hold, and the facts that
SOURCES.md states about it come out of the analysis."""

from __future__ import annotations

import gzip
import json
from functools import cache

import numpy as np
import pytest

import traceprof
from traceprof.analysis.link import link
from traceprof.trace.schema import Kind

from .conftest import SHARED_TRACES

ALL_TRACES = sorted(SHARED_TRACES.glob("*/*.json.gz"))
KERNEL_CATEGORIES = {"kernel", "Kernel"}


def test_the_shared_traces_are_there():
    assert len(ALL_TRACES) >= 18, f"expected the shared traces under {SHARED_TRACES}"


@cache
def raw_events(path) -> list:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


@cache
def profile_of(path):
    return traceprof.analyze(path)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_every_trace_analyzes_with_its_invariants(path):
    p = profile_of(path)
    p.self_check()
    events = raw_events(path)
    kernels = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in KERNEL_CATEGORIES)
    assert p.stats.kernels == kernels
    assert p.stats.events == len(events)
    # roots + the bucket add up to the GPU busy time (self_check), and the bucket is explicit
    assert p.unattributed is not None
    total = sum(p.nodes[r].total.gpu_busy_us for r in p.roots)
    assert total == pytest.approx(p.selection.gpu_busy_us, rel=1e-9, abs=1e-6)
    for fmt in ("tree", "table", "json", "csv"):
        assert traceprof.render.render(p, fmt)


MODULE_TRACES = {
    # file: (nn.Module events, root class)
    "module_tree/h100_bert_small_inference.json.gz": (84, "BertLMHeadModel"),
    "module_tree/h100_qwen1.5_0.5b_inference.json.gz": (316, "Qwen2Model"),
    "module_tree/h100_vit_image_classification_inference.json.gz": (214, "ViTModel"),
    "module_tree/mi300_resnet_activation_checkpoint_training.json.gz": (450, "DistributedDataParallel"),
}


@pytest.mark.parametrize("name", sorted(MODULE_TRACES))
def test_module_events_form_one_tree_rooted_at_the_model(name):
    path = SHARED_TRACES / name
    events, root_class = MODULE_TRACES[name]
    names = [
        e["name"]
        for e in raw_events(path)
        if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ")
    ]
    assert len(names) == events
    p = profile_of(path)
    assert p.source == "nn.Module"
    # one node per module instance: every instance is called from one place
    assert p.module_nodes == len(set(names))
    module_roots = [p.nodes[r] for r in p.roots if p.nodes[r].kind.value == "module"]
    assert [r.class_name for r in module_roots] == [root_class]


def test_inference_bert_has_no_backward_and_most_time_in_modules():
    p = profile_of(SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz")
    root = p.nodes[p.roots[0]]
    assert root.backward.total.gpu_busy_us == 0
    assert root.forward.total.gpu_busy_us > 0.99 * p.selection.gpu_busy_us
    layers = [n for n in p.nodes if n.class_name == "BertLayer"]
    assert len(layers) == 4 and all(n.forward.total.kernels == 12 for n in layers)


MI300 = SHARED_TRACES / "module_tree/mi300_resnet_activation_checkpoint_training.json.gz"


def test_mi300_backward_time_reaches_every_convolution():
    p = profile_of(MI300)
    convs = [n for n in p.nodes if n.class_name == "Conv2d"]
    assert len(convs) == 20
    assert all(n.backward.total.gpu_busy_us > 0 for n in convs)
    assert all(n.forward.total.gpu_busy_us > 0 for n in convs)
    # re-run blocks (activation checkpointing) land on their forward nodes: no duplicates
    assert p.module_nodes == 73


def test_mi300_forward_backward_and_bucket_add_up_to_the_step():
    p = profile_of(MI300)
    assert p.selection.numbers == (15, 16, 17)
    modules = [p.nodes[r] for r in p.roots if p.nodes[r].kind.value == "module"]
    fwd = sum(n.forward.total.gpu_busy_us for n in modules)
    bwd = sum(n.backward.total.gpu_busy_us for n in modules)
    unattributed = p.unattributed.total.gpu_busy_us
    assert fwd > 0 and bwd > 0
    assert fwd + bwd + unattributed == pytest.approx(p.selection.gpu_busy_us, rel=1e-9)
    # the union of the GPU work intervals launched in the steps, per step, computed here
    # independently (work of one step may still run while the next step's starts: counted once)
    events = raw_events(MI300)
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and any(lo <= launches.get(e["args"]["correlation"], e["ts"]) < hi for lo, hi in steps.values())
    )
    union, end = 0.0, -np.inf
    for s, t in spans:
        if t > end:
            union += t - max(s, end)
            end = t
    assert p.selection.gpu_busy_us == pytest.approx(union / len(steps), rel=1e-9)


@pytest.mark.parametrize(
    "name",
    [
        "module_tree/mi300_resnet_activation_checkpoint_training.json.gz",
        "small/mi250_minitoy_training.json.gz",
    ],
)
def test_sequence_number_links_agree_with_fwdbwd_flows(name):
    path = SHARED_TRACES / name
    trace = traceprof.load_trace(path)
    links = link(trace)
    ev = trace.events
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    by_start = {(int(ev.thread[i]), float(ev.ts[i])): i for i in ops[np.argsort(-ev.ts[ops])]}
    flows = {}
    for e in raw_events(path):
        if e.get("cat") == "fwdbwd":
            flows.setdefault(e["id"], {})[e["ph"]] = e
    thread_of = {(t.pid, t.tid): i for i, t in enumerate(ev.threads)}
    checked = 0
    for pair in flows.values():
        if set(pair) != {"s", "f"}:
            continue
        s, f = pair["s"], pair["f"]
        bwd = by_start.get((thread_of[(str(f["pid"]), str(f["tid"]))], float(f["ts"])))
        assert bwd is not None
        fwd = links.forward_op[links.backward_node[bwd]]
        assert fwd >= 0
        assert float(ev.ts[fwd]) == float(s["ts"])
        checked += 1
    assert checked >= 4


def test_legacy_2021_trace_links_every_kernel_and_backward_node():
    p = profile_of(SHARED_TRACES / "legacy_2021/resnet50_v100_2021.pt.trace.json.gz")
    assert p.stats.gpu_work_without_launch == 0
    assert p.stats.backward_nodes == p.stats.backward_nodes_linked == 1068
    assert p.selection.numbers == (5, 6, 7, 8, 9, 10)
    bucket = p.unattributed
    assert bucket.backward.total.gpu_busy_us > bucket.forward.total.gpu_busy_us > 0


def test_cpu_only_trace_is_a_cpu_time_tree():
    p = profile_of(SHARED_TRACES / "cpu_only/cpu_only_rank34.pt.trace.json.gz")
    assert not p.has_gpu
    assert p.selection.cpu_us > 0
    assert p.metadata.rank == 34


def test_annotation_traces_show_their_annotations():
    p = profile_of(SHARED_TRACES / "gpu_attribution/a100_training_rank0_of_16.json.gz")
    assert p.source == "annotations"
    names = {p.nodes[r].name for r in p.roots}
    assert "## forward ##" in names or any("forward" in n for n in names)
    assert p.selection.count == 5


def test_qwen_gpu_work_launched_before_the_trace_is_named_and_warned():
    """The H100 Qwen trace: 29.6% of the step's GPU time ran kernels launched before the
    profiler's CPU window opened (their correlation ids are below the trace's first launch)."""
    path = SHARED_TRACES / "module_tree" / "h100_qwen1.5_0.5b_inference.json.gz"
    p = profile_of(path)
    raw = raw_events(path)
    launches = {
        e["args"]["correlation"]
        for e in raw
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    first_launch = min(launches)
    orphans = [
        e
        for e in raw
        if e.get("cat") in KERNEL_CATEGORIES | {"gpu_memcpy", "gpu_memset"}
        and e["args"].get("correlation") not in launches
    ]
    assert orphans and all(e["args"]["correlation"] < first_launch for e in orphans)

    group = {p.nodes[c].name: p.nodes[c] for c in p.unattributed.children}
    before = group["(launched before the trace)"]
    assert "(launch not in trace)" not in group
    assert before.other.total.gpu_busy_us == pytest.approx(p.selection.gpu_launched_before_trace_us)
    assert before.forward.total.gpu_busy_us == before.backward.total.gpu_busy_us == 0
    share = before.total.gpu_busy_us / p.selection.gpu_busy_us
    assert share == pytest.approx(0.296, abs=0.001)
    warning = [w for w in p.warnings if "launched before the trace began" in w]
    assert len(warning) == 1 and warning[0].startswith("29.6% of the step's GPU busy time")
    assert "(not in any module)/(launched before the trace)" in warning[0]
    # counted in the step's GPU time: the header's GPU busy time is the tree's total
    roots = sum(p.nodes[r].total.gpu_busy_us for r in p.roots)
    assert roots == pytest.approx(p.selection.gpu_busy_us)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_a_trace_that_ran_gpu_work_is_never_called_cpu_only(path):
    """The header names the GPUs; a trace whose devices have no name (ROCm's deviceProperties
    may leave it empty) still ran on a GPU, and says so."""
    from traceprof import render

    profile = profile_of(path)
    header = render.render(profile, "tree").splitlines()[1]
    assert ("CPU only" in header) == (not profile.has_gpu and not profile.metadata.devices), header
    if profile.has_gpu and not any(d.name for d in profile.metadata.devices):
        assert "GPU (not named in the trace)" in header
