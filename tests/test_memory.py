"""Memory per module from [memory] events: one rule per test, then the real traces."""

from __future__ import annotations

import gzip
import json

import pytest

import traceprof

from .conftest import SHARED_TRACES
from .test_rules import forward_model
from .tracebuilder import TraceBuilder


def use(node, device="cuda:0"):
    for m in node.memory:
        if m.device == device:
            return m
    raise KeyError(device)


def test_allocations_go_to_the_innermost_module_and_add_up_the_tree(analyze_built):
    b = forward_model(TraceBuilder())
    b.memory(35, 4096, total=10_000)  # inside fc's addmm
    b.memory(40, 1024, total=11_024)  # inside fc, after the op
    b.memory(170, 512, total=11_536)  # inside act's relu
    b.memory(175, -1024, total=10_512)  # a free inside act
    p = analyze_built(b)
    fc, act, net = p.find("fc"), p.find("act"), p.find("")
    assert use(fc).forward.allocated_bytes == 5120
    assert use(fc).forward.peak_bytes == 11_024
    assert use(act).forward.allocated_bytes == 512
    assert use(act).forward.freed_bytes == 1024
    assert use(act).forward.net_bytes == -512
    assert use(net).forward.allocated_bytes == 5632  # subtree sums
    assert use(net).forward.freed_bytes == 1024
    assert use(net).forward.peak_bytes == 11_536  # subtree maximum
    assert use(net).backward.allocated_bytes == 0
    assert p.unattributed.memory == ()


def test_backward_memory_goes_to_the_module_of_the_forward_op(analyze_built):
    b = forward_model(TraceBuilder())
    b.op("AddmmBackward0", 600, 40, tid=2, seq=11, fwd_tid=1)  # seq 11: fc's addmm
    b.memory(610, 2048, total=20_000, tid=2)
    p = analyze_built(b)
    fc = p.find("fc")
    assert use(fc).backward.allocated_bytes == 2048
    assert use(fc).backward.peak_bytes == 20_000
    assert use(fc).forward.allocated_bytes == 0


def test_memory_outside_modules_and_per_device(analyze_built):
    b = forward_model(TraceBuilder())
    b.memory(5, 256, total=100, device_type=0, device_id=-1)  # in the step, before the model
    b.memory(35, 64, total=164, device_type=0, device_id=-1)  # CPU memory inside fc
    b.memory(36, 4096, total=5000)  # CUDA memory inside fc
    p = analyze_built(b)
    fc = p.find("fc")
    assert {m.device for m in fc.memory} == {"cpu", "cuda:0"}
    assert use(fc, "cpu").forward.allocated_bytes == 64
    assert use(fc, "cuda:0").forward.allocated_bytes == 4096
    # in the step but outside every op: neither forward nor backward
    assert use(p.unattributed, "cpu").other.allocated_bytes == 256


def test_memory_devices_are_named_once_in_first_seen_order(tmp_path):
    from traceprof.read.build import load_trace

    b = forward_model(TraceBuilder())
    b.memory(31, 8, device_type=1, device_id=1)
    b.memory(32, 8, device_type=0, device_id=-1)
    b.memory(33, 8, device_type=0, device_id=3)  # another CPU id: the same device name
    b.memory(34, 8, device_type=1, device_id=0)
    b.memory(35, 8, device_type=1, device_id=1)
    memory = load_trace(b.write(tmp_path / "t.json"), cache=False).memory
    assert memory.devices == ("cuda:1", "cpu", "cuda:0")
    assert memory.device.tolist() == [0, 1, 1, 2, 0]


def test_traces_without_allocator_totals_have_no_peak(analyze_built):
    b = forward_model(TraceBuilder(era="2021"))
    b.memory(35, 4096)
    p = analyze_built(b)
    fc = use(p.find("fc"))
    assert fc.forward.allocated_bytes == 4096 and fc.forward.peak_bytes is None


def test_memory_is_a_mean_per_step_over_the_selection(analyze_built):
    b = forward_model(TraceBuilder(), t0=0, step=1)
    forward_model(b, t0=2000, step=2)
    b.memory(35, 1000, total=1000)
    b.memory(2035, 3000, total=4000)
    p = analyze_built(b)
    assert use(p.find("fc")).forward.allocated_bytes == 2000
    assert use(p.find("fc")).forward.peak_bytes == 4000
    one = analyze_built(b, step=2)
    assert use(one.find("fc")).forward.allocated_bytes == 3000


def test_bert_memory_adds_up_to_the_raw_events():
    path = SHARED_TRACES / "module_tree" / "h100_bert_small_inference.json.gz"
    p = traceprof.analyze(path)
    with gzip.open(path, "rt") as f:
        raw = json.load(f)["traceEvents"]
    steps = [
        e
        for e in raw
        if e.get("ph") == "X"
        and e.get("cat") != "gpu_user_annotation"
        and e.get("name", "").startswith("ProfilerStep#")
        and int(e["name"].split("#")[1]) in p.selection.numbers
    ]
    mem = [
        e
        for e in raw
        if e.get("name") == "[memory]"
        and e["args"].get("Device Type") == 1
        and any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps)
    ]
    assert mem, "the bert trace has CUDA [memory] events in its steps"
    expect_alloc = sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] > 0) / len(steps)
    expect_peak = max(e["args"]["Total Allocated"] for e in mem)
    got = [use(p.nodes[r]) for r in p.roots if any(m.device == "cuda:0" for m in p.nodes[r].memory)]
    alloc = sum(ph.allocated_bytes for m in got for ph in m.phases)
    assert alloc == pytest.approx(expect_alloc)
    assert max(ph.peak_bytes for m in got for ph in m.phases if ph.peak_bytes is not None) == expect_peak
    root = p.nodes[p.roots[0]]
    assert use(root).forward.allocated_bytes > 0.5 * expect_alloc  # most of it is in the model
