"""Trust in FLOP/s, MFU and the unsupported list: achieved rates over the time a node's kernels
ran (not their concurrency-shared busy time), zero-FLOP selection and integer ops, a
structural (timing-free) unsupported rule, ``_grouped_mm``, the convolutions of 2021 traces,
and a partial MFU said to be partial. Tiny traces built in code (tests/tracebuilder.py) and the
shared real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traceprof
from traceprof.analysis.link import link
from traceprof.analysis.node_metrics import kernel_time
from traceprof.analysis.op_costs import count_ops
from traceprof.flops import REGISTRY, OpArgs
from traceprof.render.header import flop_lines
from traceprof.render.registry import RenderOptions

from .conftest import SHARED_TRACES
from .tracebuilder import TraceBuilder

F, L, S, GL, INT, BO = "float", "long int", "Scalar", "GenericList", "Int", "Bool"
SHARED = SHARED_TRACES
MI300 = SHARED / "module_tree" / "mi300_resnet_activation_checkpoint_training.json.gz"
LEGACY = SHARED / "legacy_2021" / "resnet50_v100_2021.pt.trace.json.gz"


def _load(builder: TraceBuilder, tmp_path: Path):
    return traceprof.load_trace(builder.write(tmp_path / "t.json"))


def _counted_and_unsupported(trace) -> tuple[dict[str, float], list[str]]:
    costs = count_ops(trace, link(trace))
    ev = trace.events
    counted: dict[str, float] = {}
    for k, e in enumerate(costs.counted.tolist()):
        name = ev.names[ev.name[e]]
        counted[name] = counted.get(name, 0.0) + float(costs.flops[k])
    return counted, list(costs.labels)


# --- item 4: achieved rates over the time the node's kernels ran ---------------------------------


class _Work:
    def __init__(self, node, pass_code):
        self.node, self.pass_code = np.asarray(node), np.asarray(pass_code)


def test_kernel_time_is_the_union_of_each_node_and_pass_intervals():
    # node 0 forward: [0, 4], [2, 3] (inside), [5, 7]: 6 us; node 1: [0, 3], [10, 11]; node 0
    # backward: [0, 1]
    start = np.array([0.0, 5, 2, 0, 0, 10])
    dur = np.array([4.0, 2, 1, 3, 1, 1])
    share = kernel_time(start, dur, _Work([0, 0, 0, 1, 0, 1], [0, 0, 0, 0, 1, 0]))
    assert share.tolist() == [4, 2, 0, 3, 1, 1]
    # nested and chained overlaps: [0, 10], [1, 3], [2, 22] -> 22
    share = kernel_time(np.array([0.0, 1, 2]), np.array([10.0, 2, 20]), _Work([0, 0, 0], [0, 0, 0]))
    assert share.sum() == 22


def test_a_module_overlapped_by_nccl_gets_its_flop_rate_over_its_own_kernel_time(tmp_path):
    """A 100 us kernel of a module half overlapped by an all-reduce kernel outside it: its busy
    time is 75 us (shared), its FLOP/s are over the 100 us its kernel ran."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("lin", "Linear", 10, 100)
    b.shaped_op("aten::mm", 20, 50, [[64, 32], [32, 16]], [F, F], ["", ""])
    b.launch(30, 100, 100)
    b.op("nccl:all_reduce", 200, 50)
    b.launch(210, 150, 100, stream=9, name="ncclDevKernel_AllReduce")
    profile = traceprof.analyze(b.write(tmp_path / "t.json"))
    node = profile.find("lin")
    assert node.forward.total.gpu_busy_us == pytest.approx(75.0)
    assert node.forward.total.gpu_kernel_us == pytest.approx(100.0)
    rate = profile.throughput(node.forward.total).flop_per_s
    assert rate == pytest.approx(2 * 64 * 32 * 16 / 100e-6)


@pytest.fixture(scope="module")
def mi300():
    return traceprof.analyze(str(MI300))


def test_mi300_batchnorm_backward_rate_uses_its_own_kernel_time(mi300):
    node = next(
        n for n in mi300.nodes if n.name == "BatchNorm2d_0" or n.qualified_name.endswith("BatchNorm2d_0")
    )
    bwd = node.backward.total
    assert bwd.gpu_busy_us == pytest.approx(199.6, abs=0.1)  # shared with a concurrent NCCL kernel
    assert bwd.gpu_kernel_us == pytest.approx(399.2, abs=0.2)
    assert mi300.throughput(bwd).flop_per_s == pytest.approx(bwd.flops / (bwd.gpu_kernel_us * 1e-6))
    assert mi300.throughput(bwd).flop_per_s < 250e9  # was 402 GFLOP/s over the shared time


def test_mi300_resnet_backward_rate_over_its_kernels_time(mi300):
    root = next(n for n in mi300.nodes if n.name == "ResNet_0" or n.class_name == "ResNet")
    rate = mi300.throughput(root.backward.total).flop_per_s
    assert rate == pytest.approx(23.6e12, rel=0.03)  # was 42.3 TFLOP/s


# --- item 5: selection by index and integer work have zero FLOPs, comparisons of floats count -


def test_selection_indexing_and_integer_ops_are_zero_flop_not_unsupported(tmp_path):
    b = TraceBuilder()
    b.shaped_op("aten::index", 0, 10, [[8, 16], []], [F, "TensorList"], ["", ""])
    b.shaped_op("aten::nonzero", 20, 10, [[8, 16]], ["bool"], [""])
    b.shaped_op(
        "aten::topk", 40, 10, [[8, 16], [], [], [], []], [F, S, S, S, S], ["", "3", "1", "True", "True"]
    )
    b.shaped_op("aten::aminmax", 60, 10, [[10], [], []], [L, "", S], ["", "", "False"])
    b.shaped_op("aten::histc", 80, 10, [[8, 16], [], [], []], [F, S, S, S], ["", "4", "0", "0"])
    # the backward of max along a dim: zeros and a scatter_, its own CPU time mostly its own
    b.shaped_op("aten::value_selecting_reduction_backward", 100, 100, [[8], [], [8], [], []], [F, S, L, S, S])
    b.shaped_op("aten::zeros", 105, 2, [[], [], [], [], []], [S, S, S, S, S])
    b.shaped_op("aten::scatter_", 110, 2, [[8, 16], [], [8, 1], [8, 1]], [F, S, L, F], ["", "1", "", ""])
    counted, unsupported = _counted_and_unsupported(_load(b, tmp_path))
    assert unsupported == []
    assert counted.get("aten::aminmax") == 0  # integers: no floating-point operations
    # selection by index or mask: no FLOPs; by value (comparisons of floats): 1 per element
    assert counted["aten::index"] == counted["aten::nonzero"] == 0
    assert counted["aten::topk"] == counted["aten::histc"] == 8 * 16


def test_aminmax_on_floats_counts_a_min_and_a_max_per_element():
    cost = REGISTRY.get("aten::aminmax").formula(
        OpArgs("aten::aminmax", [[10], [], []], [F, "", S], ["", "", ""])
    )
    assert cost.flops == 20


# --- item 6: the unsupported list is decided by structure; _grouped_mm ----------------------------


@pytest.mark.parametrize("own_us", [5, 95])
def test_an_op_whose_children_carry_flops_is_covered_whatever_its_cpu_time(tmp_path, own_us):
    """On CPU, an op without a formula around counted matrix products is covered, whether it
    spends 5% or 95% of its CPU time itself: identical runs give the same list."""
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.shaped_op("mylib::fused_router", 0, 100, [[8, 16]], [F], [""])
    b.shaped_op("aten::mm", 1, 100 - own_us, [[64, 32], [32, 16]], [F, F], ["", ""])
    counted, unsupported = _counted_and_unsupported(_load(b, tmp_path))
    assert unsupported == []
    assert counted == {"aten::mm": 2 * 64 * 32 * 16}


def test_an_op_running_its_own_kernels_beside_a_counted_child_stays_unsupported(tmp_path):
    b = TraceBuilder()
    b.shaped_op("mylib::fused_layer", 0, 100, [[8, 16]], [F], [""])
    b.shaped_op("aten::add", 5, 10, [[16], [16], []], [F, F, S], ["", "", "1"])
    b.launch(6, 100, 10)
    b.launch(30, 120, 90)  # the layer's own kernel: 90% of the GPU time launched inside it
    _, unsupported = _counted_and_unsupported(_load(b, tmp_path))
    assert unsupported == ["mylib::fused_layer"]


@pytest.mark.parametrize(
    ("dims", "flops"),
    [
        ([[12, 16], [3, 16, 8], [3], [], []], 2 * 12 * 16 * 8),  # 2-D x 3-D: tokens x experts
        ([[16, 12], [12, 8], [3], [], []], 2 * 16 * 8 * 12),  # 2-D x 2-D (weight gradient)
        ([[3, 4, 16], [16, 24], [3], [], []], 2 * 4 * 16 * 24),  # 3-D x 2-D
        ([[3, 4, 16], [3, 16, 8], [], [], []], 2 * 3 * 4 * 16 * 8),  # batched
    ],
)
def test_grouped_mm_formula(dims, flops):
    types = [F, F, "int" if dims[2] else "", "", ""]
    cost = REGISTRY.get("aten::_grouped_mm").formula(OpArgs("aten::_grouped_mm", dims, types, [""] * 5))
    assert cost.flops == flops
    assert cost.macs == flops // 2


def test_grouped_mm_is_counted_as_one_op_covering_the_mms_it_runs_on_cpu(tmp_path):
    """As captured on CPU (torch 2.13): _grouped_mm runs one mm per group; the op is counted
    once, with the FLOPs of its mms, and is never unsupported whatever its own time."""
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.shaped_op("aten::_grouped_mm", 0, 100, [[12, 16], [3, 16, 8], [3], [], []], [F, F, "int", "", ""])
    for g in range(3):
        b.shaped_op("aten::mm", 10 + 5 * g, 2, [[4, 16], [16, 8], [4, 8]], [F, F, F], ["", "", ""])
    counted, unsupported = _counted_and_unsupported(_load(b, tmp_path))
    assert unsupported == []
    assert counted == {"aten::_grouped_mm": 3 * 2 * 4 * 16 * 8}


# --- item 7: 2021-era convolutions; a partial MFU says so --------------------------------------


def _legacy_conv(b: TraceBuilder, t0: float, seq: int, with_input_grad: bool = True) -> None:
    """A 2021 convolution (no Concrete Inputs): x [2, 3, 8, 8], w [4, 3, 3, 3], stride 2,
    padding 1 -> out [2, 4, 4, 4]; forward on thread 1, its backward node on thread 2."""
    x, w, g = [2, 3, 8, 8], [4, 3, 3, 3], [2, 4, 4, 4]
    b.shaped_op("aten::conv2d", t0, 50, [x, w, [], [], [], [], []], [F, F, "", GL, GL, GL, INT], seq=seq)
    b.shaped_op(
        "aten::cudnn_convolution", t0 + 5, 40, [x, w] + [[]] * 7, [F, F, GL, GL, GL, INT, BO, BO, BO], seq=seq
    )
    b.shaped_op("CudnnConvolutionBackward", t0 + 500, 100, [g], [F], tid=2, seq=seq, fwd_tid=1)
    types = [F, F, F, GL, GL, GL, INT, BO, BO, BO, GL]
    b.shaped_op("aten::cudnn_convolution_backward", t0 + 505, 90, [x, g, w] + [[]] * 8, types, tid=2)
    grad_types = [GL, F, F, GL, GL, GL, INT, BO, BO, BO]
    if with_input_grad:
        b.shaped_op(
            "aten::cudnn_convolution_backward_input", t0 + 510, 30, [[], g, w] + [[]] * 7, grad_types, tid=2
        )
    b.shaped_op(
        "aten::cudnn_convolution_backward_weight", t0 + 550, 30, [[], g, x] + [[]] * 7, grad_types, tid=2
    )


CONV_FLOPS = 2 * 2 * 4 * 4 * 4 * 3 * 9  # 2 N Ho Wo C_out C_in k k


def test_2021_convolutions_are_counted_through_their_gradients(tmp_path):
    b = TraceBuilder(era="2021")
    _legacy_conv(b, 0, seq=7)
    _legacy_conv(b, 1000, seq=8, with_input_grad=False)  # a first layer: no input gradient
    counted, unsupported = _counted_and_unsupported(_load(b, tmp_path))
    assert unsupported == []
    assert counted == {
        "aten::cudnn_convolution": 2 * CONV_FLOPS,
        "aten::cudnn_convolution_backward_input": CONV_FLOPS,
        "aten::cudnn_convolution_backward_weight": 2 * CONV_FLOPS,
    }


@pytest.fixture(scope="module")
def legacy():
    return traceprof.analyze(str(LEGACY))


def test_legacy_resnet50_convolutions_have_flops(legacy):
    names = {u.name.split(" (")[0] for u in legacy.flops.unsupported}
    assert not names & {
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_backward_input",
        "aten::cudnn_convolution_backward_weight",
    }
    fwd = sum(legacy.nodes[r].forward.total.flops for r in legacy.roots)
    # ResNet-50: 4.09 GMAC per 224x224 image, batch 32
    assert fwd == pytest.approx(2 * 4.09e9 * 32, rel=0.02)
    assert legacy.flops.unsupported_share < 0.1  # was 72%


def test_a_partial_mfu_is_headlined_as_a_lower_bound(legacy):
    line = next(x for x in flop_lines(legacy, RenderOptions()) if x.startswith("achieved:"))
    assert legacy.flops.partial  # batch norms of 2021 (no training flag recorded) are missing
    assert "MFU ≥ " in line
    covered = 1 - legacy.flops.unsupported_share
    assert f"FLOPs of ops covering only {covered * 100:.1f}% of the step's GPU busy time" in line


SL = "ScalarList"


@pytest.mark.parametrize(
    ("name", "dims", "types", "concrete", "flops"),
    [
        # x [2, 3, 8, 8], w [4, 3, 3, 3], stride 2, padding 1 -> out [2, 4, 4, 4]
        (
            "aten::thnn_conv2d",
            [[2, 3, 8, 8], [4, 3, 3, 3], [], [4], [], []],
            [F, F, SL, F, SL, SL],
            ["", "", "[3, 3]", "", "[2, 2]", "[1, 1]"],
            CONV_FLOPS,
        ),
        # depthwise: w [8, 1, 3, 3] on 8 channels, stride 1, padding 1 -> 8x8
        (
            "aten::_conv_depthwise2d",
            [[2, 8, 8, 8], [8, 1, 3, 3], [], [], [], [], []],
            [F, F, SL, "", SL, SL, SL],
            ["", "", "[3, 3]", "", "[1, 1]", "[1, 1]", "[1, 1]"],
            2 * 2 * 64 * 8 * 9,
        ),
        # input and weight gradients of the first case
        (
            "aten::_slow_conv2d_backward",
            [[2, 4, 4, 4], [2, 3, 8, 8], [4, 3, 3, 3], [], [], [], []],
            [F, F, F, SL, SL, SL, SL],
            ["", "", "", "[3, 3]", "[2, 2]", "[1, 1]", "[True, True, False]"],
            2 * CONV_FLOPS,
        ),
    ],
)
def test_cpu_fallback_convolutions_have_formulas(name, dims, types, concrete, flops):
    assert REGISTRY.get(name).formula(OpArgs(name, dims, types, concrete)).flops == flops
