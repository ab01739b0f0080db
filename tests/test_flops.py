"""FLOP formulas, one op at a time, against hand-computed values; the counting rule; unsupported
ops; peaks and MFU. Traces are built in code (tests/tracebuilder.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import traceprof
from traceprof.analysis.link import link
from traceprof.analysis.op_costs import NOT_UNDERSTOOD, count_ops
from traceprof.flops import MATRIX_FAMILIES, REGISTRY, Family, OpArgs, Registry
from traceprof.flops.attention import attention_pairs
from traceprof.trace.hardware import PEAKS, find_peaks

from .tracebuilder import TraceBuilder

F, H, B, L = "float", "c10::Half", "c10::BFloat16", "long int"
S, SL, TL = "Scalar", "ScalarList", "TensorList"


# name, Input Dims, Input type, Concrete Inputs, expected (flops, macs, bytes_read, bytes_written);
# None: not checked. Every figure is worked out by hand in the comment.
OPS = [
    # 2*64*16*32; reads (64*32 + 32*16)*4, writes 64*16*4
    ("mm", "aten::mm", [[64, 32], [32, 16]], [F, F], ["", ""], (65536, 32768, 10240, 4096)),
    # the bias is read, not counted as FLOPs; bf16: 2 bytes
    (
        "addmm bf16",
        "aten::addmm",
        [[16], [64, 32], [32, 16], [], []],
        [B, B, B, S, S],
        ["", "", "", "1", "1"],
        (65536, 32768, (16 + 2048 + 512) * 2, 64 * 16 * 2),
    ),
    (
        "bmm",
        "aten::bmm",
        [[4, 8, 16], [4, 16, 32]],
        [F, F],
        ["", ""],
        (2 * 4 * 8 * 32 * 16, 4 * 8 * 32 * 16, None, 4 * 8 * 32 * 4),
    ),
    (
        "baddbmm",
        "aten::baddbmm",
        [[4, 8, 32], [4, 8, 16], [4, 16, 32], [], []],
        [F, F, F, S, S],
        ["", "", "", "1", "1"],
        (32768, 16384, None, None),
    ),
    # [2,3,8,16] @ [16,4]: 6 batches of 8x16 @ 16x4
    (
        "matmul nd@2d",
        "aten::matmul",
        [[2, 3, 8, 16], [16, 4]],
        [F, F],
        ["", ""],
        (2 * 6 * 8 * 4 * 16, None, None, 2 * 3 * 8 * 4 * 4),
    ),
    # broadcast batch (5,1) x (3,) -> (5,3)
    (
        "matmul broadcast",
        "aten::matmul",
        [[5, 1, 8, 16], [3, 16, 4]],
        [F, F],
        ["", ""],
        (2 * 15 * 8 * 4 * 16, None, None, 15 * 8 * 4 * 4),
    ),
    ("matmul dot", "aten::matmul", [[16], [16]], [F, F], ["", ""], (32, 16, None, 4)),
    ("matmul mat@vec", "aten::matmul", [[8, 16], [16]], [F, F], ["", ""], (256, 128, None, 32)),
    # 20 rows of 32 -> 64
    (
        "linear",
        "aten::linear",
        [[2, 10, 32], [64, 32], [64]],
        [F, F, F],
        ["", "", ""],
        (81920, 40960, (640 + 2048 + 64) * 4, 2 * 10 * 64 * 4),
    ),
    # fp8 operands, bf16 output (out_dtype 15)
    (
        "_scaled_mm",
        "aten::_scaled_mm",
        [[64, 32], [32, 16], [], [], [], [], [], []],
        ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", F, F, "", "", S, S],
        ["", "", "", "", "", "", "15", "False"],
        (65536, 32768, 64 * 32 + 32 * 16 + 8, 64 * 16 * 2),
    ),
    # out 16x16: 2 * 16*16 * 8 * 3 * 9 MACs
    (
        "conv2d",
        "aten::conv2d",
        [[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], []],
        [F, F, F, SL, SL, SL, S],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"],
        (2 * 110592, 110592, None, 2 * 8 * 16 * 16 * 4),
    ),
    # depthwise: weight [8, 1, 3, 3], 8 groups: 2 * 256 * 8 * 1 * 9 MACs
    (
        "conv2d depthwise",
        "aten::conv2d",
        [[2, 8, 16, 16], [8, 1, 3, 3], [], [], [], [], []],
        [F, F, "", SL, SL, SL, S],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "8"],
        (2 * 36864, 36864, None, 2 * 8 * 256 * 4),
    ),
    # dilation 2, no padding: out (20 - 4 - 1) + 1 = 16
    (
        "conv2d dilated",
        "aten::conv2d",
        [[1, 4, 20, 20], [4, 4, 3, 3], [], [], [], [], []],
        [F, F, "", SL, SL, SL, S],
        ["", "", "", "[1, 1]", "[0, 0]", "[2, 2]", "1"],
        (2 * 256 * 4 * 4 * 9, None, None, 4 * 256 * 4),
    ),
    # conv1d, 2 groups, stride 2: out (50 + 4 - 4 - 1) // 2 + 1 = 25; 2 * 25 * 6 * 2 * 5 MACs
    (
        "conv1d grouped",
        "aten::conv1d",
        [[2, 4, 50], [6, 2, 5], [], [], [], [], []],
        [F, F, "", SL, SL, SL, S],
        ["", "", "", "[2]", "[2]", "[1]", "2"],
        (6000, 3000, None, 2 * 6 * 25 * 4),
    ),
    # conv3d: out 6x6x6
    (
        "conv3d",
        "aten::conv3d",
        [[1, 2, 8, 8, 8], [4, 2, 3, 3, 3], [], [], [], [], []],
        [F, F, "", SL, SL, SL, S],
        ["", "", "", "[1, 1, 1]", "[0, 0, 0]", "[1, 1, 1]", "1"],
        (2 * 216 * 4 * 2 * 27, None, None, 4 * 216 * 4),
    ),
    # transposed, 2 groups: weight [C_in 16, C_out/g 4, 4, 4]; MACs over the *input* 8x8:
    # 2 * 64 * 16 * 4 * 16; output (8-1)*2 - 2 + 3 + 1 = 16 -> [2, 8, 16, 16]
    (
        "conv_transpose2d grouped",
        "aten::conv_transpose2d",
        [[2, 16, 8, 8], [16, 4, 4, 4], [8], [], [], [], [], []],
        [F, F, F, SL, SL, SL, S, SL],
        ["", "", "", "[2, 2]", "[1, 1]", "[0, 0]", "2", "[1, 1]"],
        (2 * 131072, 131072, None, 2 * 8 * 16 * 16 * 4),
    ),
    (
        "convolution transposed",
        "aten::convolution",
        [[2, 16, 8, 8], [16, 4, 4, 4], [8], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, S, SL, S],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "2"],
        (2 * 131072, 131072, None, 2 * 8 * 16 * 16 * 4),
    ),
    (
        "conv2d padding=same",
        "aten::conv2d",
        [[1, 3, 10, 10], [4, 3, 3, 3], [], [], [], [], []],
        [F, F, "", SL, "", SL, S],
        ["", "", "", "[1, 1]", "same", "[1, 1]", "1"],
        (2 * 100 * 4 * 3 * 9, None, None, 4 * 100 * 4),
    ),
    # input and weight gradients: twice the forward's 110592 MACs; bias gradient [8] written
    (
        "convolution_backward",
        "aten::convolution_backward",
        [[2, 8, 16, 16], [2, 3, 32, 32], [8, 3, 3, 3], [], [], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SL, S, SL, S, SL],
        ["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, True]"],
        (4 * 110592, 2 * 110592, None, (2 * 3 * 32 * 32 + 8 * 3 * 9 + 8) * 4),
    ),
    (
        "convolution_backward weight only",
        "aten::convolution_backward",
        [[2, 8, 16, 16], [2, 3, 32, 32], [8, 3, 3, 3], [], [], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SL, S, SL, S, SL],
        ["", "", "", "[0]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"],
        (2 * 110592, 110592, None, 8 * 3 * 9 * 4),
    ),
    # depthwise backward: each gradient costs the forward's 36864 MACs (not 8x more)
    (
        "convolution_backward depthwise",
        "aten::convolution_backward",
        [[2, 8, 16, 16], [2, 8, 16, 16], [8, 1, 3, 3], [], [], [], [], [], [], [], []],
        [F, F, F, SL, SL, SL, SL, S, SL, S, SL],
        ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "8", "[True, True, False]"],
        (4 * 36864, 2 * 36864, None, None),
    ),
    # attention: 2*4 heads * 128*128 pairs * (64 + 64) MACs
    (
        "sdpa flash",
        "aten::_scaled_dot_product_flash_attention",
        [[2, 4, 128, 64]] * 3 + [[], [], [], []],
        [B, B, B, S, S, S, S],
        ["", "", "", "0.", "False", "False", "0.125"],
        (2 * 16777216, 16777216, 3 * 2 * 4 * 128 * 64 * 2, 2 * 4 * 128 * 64 * 2),
    ),
    # causal: 128*129/2 pairs per head
    (
        "sdpa flash causal",
        "aten::_scaled_dot_product_flash_attention",
        [[2, 4, 128, 64]] * 3 + [[], [], [], []],
        [B, B, B, S, S, S, S],
        ["", "", "", "0.", "True", "False", "0.125"],
        (2 * 8 * 8256 * 128, 8 * 8256 * 128, None, None),
    ),
    # grouped-query attention: 8 query heads, 2 key/value heads; 16*16 pairs, d 32
    (
        "sdpa efficient GQA",
        "aten::_scaled_dot_product_efficient_attention",
        [[1, 8, 16, 32], [1, 2, 16, 32], [1, 2, 16, 32], [], [], [], [], []],
        [H, H, H, "", S, S, S, S],
        ["", "", "", "", "False", "0.", "False", ""],
        (2 * 8 * 256 * 64, 8 * 256 * 64, None, 8 * 16 * 32 * 2),
    ),
    (
        "cudnn attention",
        "aten::_scaled_dot_product_cudnn_attention",
        [[1, 2, 16, 32]] * 3 + [[], [], [], [], []],
        [B, B, B, "", S, S, S, S, S],
        ["", "", "", "", "False", "0.", "True", "False", ""],
        (2 * 2 * 136 * 64, 2 * 136 * 64, None, None),
    ),
    (
        "cpu flash",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        [[2, 4, 128, 64]] * 3 + [[], [], [], []],
        [F, F, F, S, S, "", ""],
        ["", "", "", "0.", "True", "", ""],
        (2 * 8 * 8256 * 128, None, None, None),
    ),
    # _flash_attention_forward takes [b, s, h, d]
    (
        "flash forward bshd",
        "aten::_flash_attention_forward",
        [[2, 128, 4, 64]] * 3 + [[]] * 12,
        [B, B, B, "", "", S, S, S, S, S, S, "", "", "", ""],
        ["", "", "", "", "", "128", "128", "0.", "True", "False", "0.125", "", "", "", ""],
        (2 * 8 * 8256 * 128, None, None, None),
    ),
    # custom_mask_type 2: bottom-right causal, 4 queries x 10 keys: 7 + 8 + 9 + 10 pairs
    (
        "efficient forward bottom-right",
        "aten::_efficient_attention_forward",
        [[1, 4, 1, 8], [1, 10, 1, 8], [1, 10, 1, 8]] + [[]] * 9,
        [H, H, H, "", "", "", "", "", S, S, S, ""],
        ["", "", "", "", "", "", "", "", "0.", "2", "False", ""],
        (2 * 34 * 16, 34 * 16, None, None),
    ),
    # backward: 2*4 heads * 128*128 pairs * (3*64 + 2*64) MACs; writes dq, dk, dv
    (
        "sdpa flash backward",
        "aten::_scaled_dot_product_flash_attention_backward",
        [[2, 4, 128, 64]] * 5 + [[2, 4, 128], [], [], [], [], [], [], [], [], []],
        [B] * 5 + [F, "", "", S, S, S, S, L, L, S],
        [""] * 8 + ["128", "128", "0.", "False", "", "", "0.125"],
        (2 * 8 * 16384 * 320, 8 * 16384 * 320, None, 3 * 2 * 4 * 128 * 64 * 2),
    ),
    (
        "cpu flash backward causal",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        [[2, 4, 128, 64]] * 5 + [[2, 4, 128], [], [], [], []],
        [F] * 6 + [S, S, "", ""],
        [""] * 6 + ["0.", "True", "", ""],
        (2 * 8 * 8256 * 320, None, None, None),
    ),
    # layer norm with weight: 5 FLOPs per element (DeepSpeed); backward twice that
    (
        "layer_norm",
        "aten::layer_norm",
        [[8, 16, 32], [], [32], [32], [], []],
        [F, SL, F, F, S, S],
        ["", "[32]", "", "", "1e-05", "True"],
        (5 * 4096, 0, (4096 + 64) * 4, 4096 * 4),
    ),
    (
        "layer_norm no affine",
        "aten::native_layer_norm",
        [[8, 16, 32], [], [], [], []],
        [F, SL, "", "", S],
        ["", "[32]", "", "", "1e-05"],
        (4 * 4096, 0, None, None),
    ),
    (
        "layer_norm backward",
        "aten::native_layer_norm_backward",
        [[8, 32], [8, 32], [], [8, 1], [8, 1], [32], [32], []],
        [F, F, SL, F, F, F, F, SL],
        ["", "", "[32]", "", "", "", "", "[True, True, True]"],
        (2 * 5 * 256, 0, None, (256 + 32 + 32) * 4),
    ),
    (
        "rms_norm",
        "aten::rms_norm",
        [[4, 64], [], [64], []],
        [B, SL, B, ""],
        ["", "[64]", "", ""],
        (4 * 256, 0, (256 + 64) * 2, 256 * 2),
    ),
    (
        "group_norm",
        "aten::group_norm",
        [[2, 8, 4, 4], [], [8], [8], [], []],
        [F, S, F, F, S, S],
        ["", "4", "", "", "1e-05", "True"],
        (5 * 256, 0, None, None),
    ),
    (
        "batch_norm train",
        "aten::batch_norm",
        [[2, 8, 4, 4], [8], [8], [8], [8], [], [], [], []],
        [F, F, F, F, F, S, S, S, S],
        ["", "", "", "", "", "True", "0.1", "1e-05", "True"],
        (5 * 256, 0, None, None),
    ),
    (
        "batch_norm eval",
        "aten::batch_norm",
        [[2, 8, 4, 4], [8], [8], [8], [8], [], [], [], []],
        [F, F, F, F, F, S, S, S, S],
        ["", "", "", "", "", "False", "0.1", "1e-05", "True"],
        (2 * 256, 0, None, None),
    ),
    (
        "batch_norm backward",
        "aten::native_batch_norm_backward",
        [[2, 8, 4, 4], [2, 8, 4, 4], [8], [8], [8], [8], [8], [], [], []],
        [F] * 7 + [S, S, SL],
        [""] * 7 + ["True", "1e-05", "[True, True, True]"],
        (10 * 256, 0, None, (256 + 16) * 4),
    ),
    ("softmax", "aten::_softmax", [[4, 10], [], []], [F, S, S], ["", "-1", "False"], (40, 0, 160, 160)),
    (
        "softmax backward",
        "aten::_softmax_backward_data",
        [[4, 10], [4, 10], [], []],
        [F, F, S, S],
        ["", "", "-1", "6"],
        (80, 0, 320, 160),
    ),
    ("relu", "aten::relu", [[1000]], [F], [""], (1000, 0, 4000, 4000)),
    (
        "gelu_backward",
        "aten::gelu_backward",
        [[10, 100], [10, 100], []],
        [F, F, ""],
        ["", "", ""],
        (1000, 0, 8000, 4000),
    ),
    # broadcast [4,1,8] + [3,1] -> [4,3,8]
    (
        "add broadcast",
        "aten::add",
        [[4, 1, 8], [3, 1], []],
        [F, F, S],
        ["", "", "1"],
        (96, 0, (32 + 3) * 4, 96 * 4),
    ),
    ("add_ in place", "aten::add_", [[4, 3, 8], [8], []], [F, F, S], ["", "", "1"], (96, 0, None, 96 * 4)),
    # integer arithmetic (a step counter) moves bytes but is no floating-point operation
    ("add_ int64", "aten::add_", [[], [], []], [L, L, S], ["", "", "1"], (0, 0, 16, 8)),
    (
        "addcmul_",
        "aten::addcmul_",
        [[10], [10], [10], []],
        [F, F, F, S],
        ["", "", "", "0.5"],
        (30, 0, 120, 40),
    ),
    # a Python number arrives as a 0-d double tensor: read (8 bytes), but the output stays fp16
    ("mul by scalar", "aten::mul", [[6, 7], []], [H, "double"], ["", ""], (42, 0, 84 + 8, 84)),
    ("mul scalar first", "aten::mul", [[], [6, 7]], ["double", H], ["", ""], (42, 0, 84 + 8, 84)),
    ("where", "aten::where", [[8], [8], [8]], ["bool", F, F], ["", "", ""], (0, 0, 8 + 64, 32)),
    (
        "sum over dims",
        "aten::sum",
        [[4, 5, 6], [], [], []],
        [F, SL, S, ""],
        ["", "[1, 2]", "False", ""],
        (120, 0, 480, 16),
    ),
    (
        "mean keepdim",
        "aten::mean",
        [[4, 5, 6], [], [], []],
        [F, SL, S, ""],
        ["", "[-1]", "True", ""],
        (120, 0, 480, 80),
    ),
    ("var", "aten::var", [[4, 5], [], [], []], [F, SL, S, S], ["", "[1]", "1", "False"], (60, 0, None, 16)),
    # embedding: no FLOPs; reads 64 indices and the 64 rows it picks, writes them
    (
        "embedding",
        "aten::embedding",
        [[1000, 64], [4, 16], [], [], []],
        [F, L, S, S, S],
        ["", "", "-1", "False", "False"],
        (0, 0, 64 * 8 + 64 * 64 * 4, 64 * 64 * 4),
    ),
    (
        "embedding backward",
        "aten::embedding_dense_backward",
        [[64, 64], [64], [], [], []],
        [F, L, S, S, S],
        ["", "", "1000", "-1", "False"],
        (4096, 0, 64 * 64 * 4 + 64 * 8, 1000 * 64 * 4),
    ),
    ("mse_loss", "aten::mse_loss", [[8, 10], [8, 10], []], [F, F, S], ["", "", "1"], (240, 0, 640, 4)),
    (
        "nll_loss",
        "aten::nll_loss_forward",
        [[8, 10], [8], [], [], []],
        [F, L, "", S, S],
        ["", "", "", "1", "-100"],
        (8, 0, 8 * 8 + 8 * 4, 8),
    ),
    (
        "nll_loss backward",
        "aten::nll_loss_backward",
        [[], [8, 10], [8], [], [], [], []],
        [F, F, L, "", S, S, F],
        ["", "", "", "", "1", "-100", ""],
        (8, 0, None, 320),
    ),
    # pooling: one FLOP per input element (DeepSpeed); output 16x16 (+ int64 indices)
    (
        "max_pool2d",
        "aten::max_pool2d_with_indices",
        [[1, 3, 32, 32], [], [], [], [], []],
        [F, SL, SL, SL, SL, S],
        ["", "[2, 2]", "[]", "[0, 0]", "[1, 1]", "False"],
        (3072, 0, 3072 * 4, 768 * 4 + 768 * 8),
    ),
    (
        "max_pool2d 3x3/2 pad 1 ceil",
        "aten::max_pool2d",
        [[1, 1, 9, 9], [], [], [], [], []],
        [F, SL, SL, SL, SL, S],
        ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "True"],
        (81, 0, None, 25 * 4),
    ),
    (
        "avg_pool2d",
        "aten::avg_pool2d",
        [[2, 6, 28, 28], [], [], [], [], [], []],
        [F, SL, SL, SL, S, S, ""],
        ["", "[2, 2]", "[2, 2]", "[0, 0]", "False", "True", ""],
        (2 * 6 * 784, 0, None, 2 * 6 * 196 * 4),
    ),
    (
        "adaptive_avg_pool2d",
        "aten::adaptive_avg_pool2d",
        [[2, 512, 7, 7], []],
        [F, SL],
        ["", "[1, 1]"],
        (2 * 512 * 49, 0, None, 1024 * 4),
    ),
    (
        "pool backward",
        "aten::max_pool2d_with_indices_backward",
        [[1, 3, 16, 16], [1, 3, 32, 32], [], [], [], [], [], [1, 3, 16, 16]],
        [F, F, SL, SL, SL, SL, S, L],
        ["", "", "[2, 2]", "[2, 2]", "[0, 0]", "[1, 1]", "False", ""],
        (3072, 0, None, 3072 * 4),
    ),
    # optimizers: tensor lists are fp32
    (
        "_foreach_add_ list",
        "aten::_foreach_add_",
        [[[10], [20]], [[10], [20]], []],
        [TL, TL, S],
        ["", "", "1."],
        (30, 0, 240, 120),
    ),
    (
        "_foreach_addcdiv_",
        "aten::_foreach_addcdiv_",
        [[[10], [20]]] * 3 + [[]],
        [TL, TL, TL, SL],
        ["", "", "", "[-0.01, -0.01]"],
        (90, 0, 360, 120),
    ),
    ("_foreach_sqrt", "aten::_foreach_sqrt", [[[10], [20]]], [TL], [""], (30, 0, 120, 120)),
    # AdamW with weight decay: 13 + 2 FLOPs per parameter element; reads params, grads, m, v
    (
        "_fused_adamw_",
        "aten::_fused_adamw_",
        [[[100], [50]]] * 4 + [[], [[], []]] + [[]] * 9,
        [TL] * 6 + [S] * 7 + ["", ""],
        [""] * 6 + ["0.001", "0.9", "0.999", "0.01", "1e-08", "False", "False", "", ""],
        (150 * 15, 0, 4 * 150 * 4, 3 * 150 * 4),
    ),
    # SGD with momentum, no weight decay: 2 + 3
    (
        "_fused_sgd_",
        "aten::_fused_sgd_",
        [[[100], [50]]] * 3 + [[]] * 9,
        [TL] * 3 + [S] * 7 + ["", ""],
        [""] * 3 + ["0.", "0.9", "0.01", "0.", "False", "False", "False", "", ""],
        (150 * 5, 0, 3 * 150 * 4, 2 * 150 * 4),
    ),
    ("copy_", "aten::copy_", [[4, 8], [4, 8], []], [B, F, S], ["", "", "False"], (0, 0, 128, 64)),
    ("fill_", "aten::fill_", [[4, 8], []], [F, S], ["", "0."], (0, 0, 0, 128)),
    ("cat", "aten::cat", [[[2, 3], [2, 5]], []], [TL, S], ["", "1"], (0, 0, 64, 64)),
    (
        "index_select",
        "aten::index_select",
        [[100, 8], [], [5]],
        [F, S, L],
        ["", "0", ""],
        (0, 0, 40 + 160, 160),
    ),
    # --- recurrent layers (traceprof/flops/rnn.py). LSTM I=16 H=32 over 5 steps x 3 rows = 15
    # rows: gate GEMMs 15*4*32*(16+32) = 92160 MACs; gate math 15*13*32 = 6240
    (
        "mkldnn_rnn_layer",
        "aten::mkldnn_rnn_layer",
        [[5, 3, 16], [128, 16], [128, 32], [128], [128], [3, 32], [3, 32]] + [[]] * 9,
        [F] * 7 + [S, SL] + [S] * 7,
        [""] * 7 + ["False", "[]", "2", "32", "1", "True", "False", "False", "True"],
        # reads input, 4 weights, hx, cx; writes output [15, 32], hy, cy
        (2 * 92160 + 6240, 92160, (240 + 2048 + 4096 + 128 + 128 + 96 + 96) * 4, (480 + 96 + 96) * 4),
    ),
    # backward: data and weight gradients (2 x 92160 MACs), gate math twice
    (
        "mkldnn_rnn_layer_backward",
        "aten::mkldnn_rnn_layer_backward",
        [
            [5, 3, 16],
            [128, 16],
            [128, 32],
            [128],
            [128],
            [3, 32],
            [3, 32],
            [5, 3, 32],
            [3, 32],
            [3, 32],
            [5, 3, 32],
            [],
            [],
        ]
        + [[]] * 9
        + [[53248]],
        [F] * 11 + ["", ""] + [S] * 7 + [SL, S, "unsigned char"],
        [""] * 13 + ["False", "2", "32", "1", "True", "True", "False", "[]", "False", ""],
        (4 * 92160 + 2 * 6240, 2 * 92160, None, (240 + 2048 + 4096 + 128 + 128 + 96 + 96) * 4),
    ),
    # cuDNN, bf16 LSTM with projection P=8, 2 layers, bidirectional: every layer-direction has
    # 16 inputs (layer 1: 2*8) -> 4*32*(16+8) + 8*32 = 3328 MACs per row, 4 of them; gate math
    # 4*13*32 per row. Reads input, hx, cx, the weights once (13312 + 4*256 biases); writes
    # output [15, 2*8], hy, cy
    (
        "_cudnn_rnn lstm proj bidir",
        "aten::_cudnn_rnn",
        [[5, 3, 16], [[128, 16], [128, 8], [128], [128], [8, 32]] * 4, [], [14336], [4, 3, 8], [4, 3, 32]]
        + [[]] * 10,
        [B, TL, S, B, B, B] + [S] * 8 + [SL, ""],
        ["", "", "5", "", "", "", "2", "32", "8", "2", "False", "0.", "True", "True", "[]", ""],
        (
            2 * 15 * 13312 + 15 * 4 * 13 * 32,
            15 * 13312,
            (240 + 96 + 384 + 13312 + 1024) * 2,
            (240 + 96 + 384) * 2,
        ),
    ),
    # the schema before proj_size (PyTorch < 1.8): GRU, 15 rows x 3*32*(16+32); gate math 10*32
    (
        "_cudnn_rnn gru old schema",
        "aten::_cudnn_rnn",
        [[5, 3, 16], [[96, 16], [96, 32], [96], [96]], [], [4800], [1, 3, 32]] + [[]] * 10,
        [F, TL, S, F, F, ""] + [S] * 7 + [SL, ""],
        ["", "", "4", "", "", "", "3", "32", "1", "False", "0.", "True", "False", "[]", ""],
        (2 * 15 * 4608 + 15 * 320, 15 * 4608, None, None),
    ),
    # backward of an RNN (tanh, mode 1) whose input needs no gradient (output_mask[0] False):
    # data gradients 32*(16+32) - 32*16 (the input's), weight gradients 32*(16+32); gate math 2*2*32
    (
        "_cudnn_rnn_backward no input grad",
        "aten::_cudnn_rnn_backward",
        [
            [5, 3, 16],
            [[32, 16], [32, 32], [32], [32]],
            [],
            [1600],
            [1, 3, 32],
            [],
            [5, 3, 32],
            [5, 3, 32],
            [],
            [],
        ]
        + [[]] * 10
        + [[100], []],
        [F, TL, S, F, F, "", F, F, "", ""] + [S] * 8 + [SL, "", "unsigned char", SL],
        [
            "",
            "",
            "4",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "1",
            "32",
            "0",
            "1",
            "False",
            "0.",
            "True",
            "False",
            "[]",
            "",
            "",
            "[False, True, False, True]",
        ],
        (2 * 15 * (1024 + 1536) + 15 * 4 * 32, 15 * (1024 + 1536), None, None),
    ),
    (
        "miopen_rnn lstm",
        "aten::miopen_rnn",
        [[5, 3, 16], [[128, 16], [128, 32], [128], [128]], [], [1, 3, 32], [1, 3, 32]] + [[]] * 9,
        [H, TL, S, H, H] + [S] * 7 + [SL, ""],
        ["", "", "4", "", "", "2", "32", "1", "False", "0.", "True", "False", "[]", ""],
        (2 * 92160 + 6240, 92160, None, (480 + 96 + 96) * 2),
    ),
    (
        "miopen_rnn_backward lstm",
        "aten::miopen_rnn_backward",
        [
            [5, 3, 16],
            [[128, 16], [128, 32], [128], [128]],
            [],
            [6400],
            [1, 3, 32],
            [1, 3, 32],
            [5, 3, 32],
            [5, 3, 32],
            [],
            [],
        ]
        + [[]] * 9
        + [[100], []],
        [F, TL, S, F, F, F, F, F, "", ""] + [S] * 7 + [SL, "", "unsigned char", SL],
        [
            "",
            "",
            "4",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "2",
            "32",
            "1",
            "False",
            "0.",
            "True",
            "False",
            "[]",
            "",
            "",
            "[True, True, True, True]",
        ],
        (4 * 92160 + 2 * 6240, 2 * 92160, None, None),
    ),
    # the CUDA cells' fused gate math over 3 rows: LSTM 13*32 per row, GRU 10*32; backward twice
    (
        "_thnn_fused_lstm_cell",
        "aten::_thnn_fused_lstm_cell",
        [[3, 128], [3, 128], [3, 32], [128], [128]],
        [F] * 5,
        [""] * 5,
        (3 * 13 * 32, 0, None, 2 * 96 * 4),
    ),
    (
        "_thnn_fused_lstm_cell_backward",
        "aten::_thnn_fused_lstm_cell_backward_impl",
        [[3, 32], [3, 32], [3, 32], [3, 32], [3, 128], []],
        [F] * 5 + [S],
        [""] * 5 + ["True"],
        (2 * 3 * 13 * 32, 0, None, (96 + 384) * 4),
    ),
    (
        "_thnn_fused_gru_cell",
        "aten::_thnn_fused_gru_cell",
        [[3, 96], [3, 96], [3, 32], [96], [96]],
        [F] * 5,
        [""] * 5,
        (3 * 10 * 32, 0, None, 96 * 4),
    ),
    (
        "_thnn_fused_gru_cell_backward",
        "aten::_thnn_fused_gru_cell_backward",
        [[3, 32], [3, 160], []],
        [F, F, S],
        ["", "", "True"],
        (2 * 3 * 10 * 32, 0, None, None),
    ),
    # composite ops alone in a trace (nothing inside them counted): their fallback formulas
    (
        "lstm_cell",
        "aten::lstm_cell",
        [[3, 16], [[3, 32], [3, 32]], [128, 16], [128, 32], [128], [128]],
        [F, TL, F, F, F, F],
        [""] * 6,
        (2 * 3 * 6144 + 3 * 13 * 32, 3 * 6144, None, 2 * 96 * 4),
    ),
    (
        "gru_cell",
        "aten::gru_cell",
        [[3, 16], [3, 32], [96, 16], [96, 32], [96], [96]],
        [F] * 6,
        [""] * 6,
        (2 * 3 * 4608 + 3 * 10 * 32, 3 * 4608, None, 96 * 4),
    ),
    # unbatched: one row
    (
        "rnn_relu_cell",
        "aten::rnn_relu_cell",
        [[16], [32], [32, 16], [32, 32], [], []],
        [F, F, F, F, "", ""],
        [""] * 6,
        (2 * 1536 + 2 * 32, 1536, None, 32 * 4),
    ),
    (
        "lstm",
        "aten::lstm",
        [[5, 3, 16], [[1, 3, 32], [1, 3, 32]], [[128, 16], [128, 32], [128], [128]]] + [[]] * 6,
        [F, TL, TL] + [S] * 6,
        ["", "", "", "True", "1", "0.", "True", "False", "False"],
        (2 * 92160 + 6240, 92160, None, 480 * 4),
    ),
    # the packed overload (data, batch_sizes, hx, params, ...): 11 rows
    (
        "gru packed",
        "aten::gru",
        [[11, 16], [5], [1, 3, 32], [[96, 16], [96, 32], [96], [96]]] + [[]] * 5,
        [F, L, F, TL] + [S] * 5,
        ["", "", "", "", "True", "1", "0.", "True", "False"],
        (2 * 11 * 4608 + 11 * 320, 11 * 4608, None, 11 * 32 * 4),
    ),
    # 2 layers, bidirectional, no biases: 2 x 32*(16+32) + 2 x 32*(64+32) MACs per row
    (
        "rnn_tanh 2 layers bidir",
        "aten::rnn_tanh",
        [[5, 3, 16], [4, 3, 32], [[32, 16], [32, 32]] * 2 + [[32, 64], [32, 32]] * 2] + [[]] * 6,
        [F, F, TL] + [S] * 6,
        ["", "", "", "False", "2", "0.", "True", "True", "False"],
        (2 * 15 * 9216 + 15 * 4 * 2 * 32, 15 * 9216, None, 15 * 64 * 4),
    ),
    (
        "_lstm_mps",
        "aten::_lstm_mps",
        [[5, 3, 16], [[1, 3, 32], [1, 3, 32]], [[128, 16], [128, 32], [128], [128]]] + [[]] * 6,
        [F, TL, TL] + [S] * 6,
        ["", "", "", "True", "1", "0.", "True", "False", "False"],
        (2 * 92160 + 6240, 92160, None, None),
    ),
    (
        "_cudnn_rnn_flatten_weight",
        "aten::_cudnn_rnn_flatten_weight",
        [[[128, 16], [128, 32], [128], [128]]] + [[]] * 8,
        [TL] + [S] * 8,
        ["", "4", "16", "2", "32", "0", "1", "False", "False"],
        (0, 0, 6400 * 4, 6400 * 4),
    ),
    ("_pin_memory", "aten::_pin_memory", [[4, 8], []], [F, ""], ["", ""], (0, 0, 128, 128)),
    # selection by value and sorting: 1 comparison per element compared (floats); the schemas
    # as torch 2.13 records them. topk k=3 along -1: values [4,3] fp32 (48 B) + indices (96 B)
    (
        "topk",
        "aten::topk",
        [[4, 16], [], [], [], []],
        [F, S, S, S, S],
        ["", "3", "-1", "True", "True"],
        (64, 0, 256, 144),
    ),
    # integers: no FLOPs, the bytes still (values and indices int64: 96 + 96)
    (
        "topk int64",
        "aten::topk",
        [[4, 16], [], [], [], []],
        [L, S, S, S, S],
        ["", "3", "-1", "True", "True"],
        (0, 0, 512, 192),
    ),
    (
        "kthvalue",
        "aten::kthvalue",
        [[4, 16], [], [], []],
        [F, S, S, S],
        ["", "2", "1", "False"],
        (64, 0, 256, 48),
    ),
    ("median all", "aten::median", [[4, 16]], [F], [""], (64, 0, 256, 4)),
    ("median dim", "aten::median", [[4, 16], [], []], [F, S, S], ["", "1", "False"], (64, 0, 256, 48)),
    ("mode", "aten::mode", [[4, 16], [], []], [F, S, S], ["", "1", "True"], (64, 0, 256, 48)),
    # sorted values (256 B) and int64 indices (512 B)
    ("sort", "aten::sort", [[4, 16], [], []], [F, S, S], ["", "1", "False"], (64, 0, 256, 768)),
    (
        "sort stable",
        "aten::sort",
        [[4, 16], [], [], []],
        [F, S, S, S],
        ["", "False", "1", "False"],
        (64, 0, 256, 768),
    ),
    ("argsort", "aten::argsort", [[4, 16], [], []], [F, S, S], ["", "1", "False"], (64, 0, 256, 512)),
    ("msort", "aten::msort", [[4, 16]], [F], [""], (64, 0, 256, 256)),
    # the unique values' number depends on the values: not written
    (
        "_unique2",
        "aten::_unique2",
        [[4, 16], [], [], []],
        [F, S, S, S],
        ["", "True", "False", "False"],
        (64, 0, 256, 0),
    ),
    # 64 values searched in 16 boundaries: reads (16 + 64) * 4, an int64 position each
    (
        "searchsorted",
        "aten::searchsorted",
        [[16], [4, 16], [], [], [], []],
        [F, F, S, S, "", ""],
        ["", "", "False", "False", "", ""],
        (64, 0, 320, 512),
    ),
    (
        "bucketize",
        "aten::bucketize",
        [[4, 16], [5], [], []],
        [F, F, S, S],
        ["", "", "False", "False"],
        (64, 0, 276, 512),
    ),
    ("histc", "aten::histc", [[4, 16], [], [], []], [F, S, S, S], ["", "10", "0", "0"], (64, 0, 256, 40)),
    # selection by index or mask, index building: no FLOPs
    ("bincount", "aten::bincount", [[16], [], []], [L, "", S], ["", "", "0"], (0, 0, 128, 0)),
    # weights: each one added (16 adds of fp32)
    ("bincount weights", "aten::bincount", [[16], [16], []], [L, F, S], ["", "", "0"], (16, 0, 192, 0)),
    # an int64 row of 8 classes per index: 4 * 16 * 8 * 8 bytes
    ("one_hot", "aten::one_hot", [[4, 16], []], [L, S], ["", "8"], (0, 0, 512, 4096)),
    ("one_hot classes unknown", "aten::one_hot", [[4, 16], []], [L, S], ["", "-1"], (0, 0, 512, 0)),
    ("nonzero", "aten::nonzero", [[4, 16]], ["bool"], [""], (0, 0, 64, 0)),
    ("index", "aten::index", [[4, 16], []], [F, ""], ["", ""], (0, 0, 0, 0)),
    ("take", "aten::take", [[4, 16], [4, 16]], [F, L], ["", ""], (0, 0, 768, 256)),
    (
        "repeat_interleave",
        "aten::repeat_interleave",
        [[4, 16], [], [], []],
        [F, S, S, ""],
        ["", "2", "0", ""],
        (0, 0, 256, 512),
    ),
]


@pytest.fixture
def trace_of(tmp_path):
    """Write a TraceBuilder trace and load it."""

    def load(builder: TraceBuilder):
        return traceprof.load_trace(builder.write(tmp_path / "t.json"))

    return load


@pytest.fixture(scope="module")
def single_op_costs(tmp_path_factory):
    """Every row of OPS as one top-level op of one trace; the cost counted for each."""
    b = TraceBuilder()
    for i, (_, name, dims, types, concrete, _) in enumerate(OPS):
        b.shaped_op(name, 10.0 * i, 5.0, dims, types, concrete)
    trace = traceprof.load_trace(b.write(tmp_path_factory.mktemp("ops") / "ops.json"))
    costs = count_ops(trace, link(trace))
    by_row = {}
    for k, event in enumerate(costs.counted.tolist()):
        row = int(trace.events.ts[event] // 10)
        by_row[row] = (costs.flops[k], costs.macs[k], costs.bytes_read[k], costs.bytes_written[k])
    return by_row, costs


@pytest.mark.parametrize("row", range(len(OPS)), ids=[r[0] for r in OPS])
def test_single_op_flops_macs_and_bytes(single_op_costs, row):
    by_row, costs = single_op_costs
    label, name, *_, expected = OPS[row]
    assert row in by_row, f"{name} was not counted (unsupported: {costs.labels})"
    for what, want, got in zip(("flops", "macs", "bytes read", "bytes written"), expected, by_row[row]):
        if want is not None:
            assert got == want, f"{label}: {what} {got} != {want}"


def test_every_row_counted_and_nothing_unsupported(single_op_costs):
    by_row, costs = single_op_costs
    assert sorted(by_row) == list(range(len(OPS)))
    assert len(costs.unsupported) == 0


def test_attention_pairs_match_a_brute_force_count():
    for s_q in range(1, 7):
        for s_k in range(1, 7):
            assert attention_pairs(s_q, s_k, 0) == s_q * s_k
            assert attention_pairs(s_q, s_k, 1) == sum(min(i + 1, s_k) for i in range(s_q))
            assert attention_pairs(s_q, s_k, 2) == sum(
                max(0, min(s_k, i + s_k - s_q + 1)) for i in range(s_q)
            )


# --- the counting rule -----------------------------------------------------------------------


def test_nested_ops_are_counted_once_at_the_outermost_op_with_a_formula(trace_of):
    b = TraceBuilder()
    # aten::linear -> aten::t, aten::addmm: the linear is counted, its addmm is not
    b.shaped_op("aten::linear", 0, 100, [[4, 8], [16, 8], [16]], [F, F, F], ["", "", ""])
    b.shaped_op("aten::t", 10, 5, [[16, 8]], [F], [""])
    b.shaped_op(
        "aten::addmm", 20, 50, [[16], [4, 8], [8, 16], [], []], [F, F, F, S, S], ["", "", "", "1", "1"]
    )
    # a wrapper (einsum, no cost of its own) is looked through: its bmm is counted
    b.shaped_op("aten::einsum", 200, 100, [[], [[2, 3, 4], [2, 4, 5]], []], ["", TL, ""], ["", "", ""])
    b.shaped_op("aten::bmm", 210, 50, [[2, 3, 4], [2, 4, 5]], [F, F], ["", ""])
    # a no-cost wrapper (aten::to) is looked through: its copy_ is counted
    b.shaped_op(
        "aten::to", 400, 100, [[4, 4], [], [], [], []], [F, S, S, S, ""], ["", "15", "False", "False", ""]
    )
    b.shaped_op("aten::copy_", 410, 50, [[4, 4], [4, 4], []], [B, F, S], ["", "", "False"])
    trace = trace_of(b)
    costs = count_ops(trace, link(trace))
    names = [trace.events.names[trace.events.name[e]] for e in costs.counted.tolist()]
    assert names == ["aten::linear", "aten::bmm", "aten::copy_"]
    assert costs.flops.tolist() == [2 * 4 * 16 * 8, 2 * 2 * 3 * 5 * 4, 0]
    assert costs.bytes_written[2] == 16 * 2
    assert len(costs.unsupported) == 0


LSTM_ARGS = (
    [[5, 3, 16], [[1, 3, 32], [1, 3, 32]], [[128, 16], [128, 32], [128], [128]]] + [[]] * 6,
    [F, TL, TL] + [S] * 6,
    ["", "", "", "True", "1", "0.", "True", "False", "False"],
)
MKLDNN_LAYER_ARGS = (
    [[5, 3, 16], [128, 16], [128, 32], [128], [128], [3, 32], [3, 32]] + [[]] * 9,
    [F] * 7 + [S, SL] + [S] * 7,
    [""] * 7 + ["False", "[]", "2", "32", "1", "True", "False", "False", "True"],
)
LSTM_FLOPS = 2 * 15 * 4 * 32 * (16 + 32) + 15 * 13 * 32  # 15 rows, I=16, H=32


def test_composite_rnn_ops_count_only_when_nothing_inside_them_is_counted(trace_of):
    b = TraceBuilder()
    # CPU LSTM: aten::lstm -> aten::mkldnn_rnn_layer -> aten::add (its two biases): the layer
    b.shaped_op("aten::lstm", 0, 100, *LSTM_ARGS)
    b.shaped_op("aten::cudnn_is_acceptable", 2, 1, [[5, 3, 16]], [F], [""])
    b.shaped_op("aten::mkldnn_rnn_layer", 5, 90, *MKLDNN_LAYER_ARGS)
    b.shaped_op("aten::add", 10, 5, [[128], [128], []], [F, F, S], ["", "", "1"])
    # CPU GRU: aten::gru runs linear layers and the gate math as separate ops: those count
    b.shaped_op(
        "aten::gru",
        200,
        100,
        [[5, 3, 16], [1, 3, 32], [[96, 16], [96, 32], [96], [96]]] + [[]] * 6,
        [F, F, TL] + [S] * 6,
        ["", "", "", "True", "1", "0.", "True", "False", "False"],
    )
    b.shaped_op("aten::linear", 210, 20, [[5, 3, 16], [96, 16], [96]], [F, F, F], ["", "", ""])
    b.shaped_op(
        "aten::addmm", 212, 15, [[96], [15, 16], [16, 96], [], []], [F, F, F, S, S], ["", "", "", "1", "1"]
    )
    b.shaped_op("aten::unsafe_chunk", 240, 10, [[3, 96], [], []], [F, S, S], ["", "3", "1"])
    b.shaped_op("aten::sigmoid_", 260, 10, [[3, 32]], [F], [""])
    # an LSTM whose backend op traceprof does not know: the composite op's own formula
    b.shaped_op("aten::lstm", 400, 100, *LSTM_ARGS)
    b.shaped_op("mylib::fused_lstm", 410, 80, [[5, 3, 16]], [F], [""])
    trace = trace_of(b)
    costs = count_ops(trace, link(trace))
    names = [trace.events.names[trace.events.name[e]] for e in costs.counted.tolist()]
    assert names == ["aten::mkldnn_rnn_layer", "aten::linear", "aten::sigmoid_", "aten::lstm"]
    assert costs.flops.tolist() == [LSTM_FLOPS, 2 * 15 * 96 * 16, 96, LSTM_FLOPS]
    assert len(costs.unsupported) == 0


def test_a_cudnn_lstm_is_counted_in_its_module_forward_and_backward(analyze_built):
    """aten::lstm -> aten::_cudnn_rnn on a GPU, and its backward on the autograd thread: the
    backend ops are counted (not the composite aten::lstm around them) in the module's passes."""
    cudnn = (
        [[5, 3, 16], [[128, 16], [128, 32], [128], [128]], [], [6400], [1, 3, 32], [1, 3, 32]] + [[]] * 10,
        [F, TL, S, F, F, F] + [S] * 8 + [SL, ""],
        ["", "", "4", "", "", "", "2", "32", "0", "1", "False", "0.", "True", "False", "[]", ""],
    )
    backward = (
        [
            [5, 3, 16],
            [[128, 16], [128, 32], [128], [128]],
            [],
            [6400],
            [1, 3, 32],
            [1, 3, 32],
            [5, 3, 32],
            [5, 3, 32],
            [],
            [],
        ]
        + [[]] * 10
        + [[100], []],
        [F, TL, S, F, F, F, F, F, "", ""] + [S] * 8 + [SL, "", "unsigned char", SL],
        [
            "",
            "",
            "4",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "2",
            "32",
            "0",
            "1",
            "False",
            "0.",
            "True",
            "False",
            "[]",
            "",
            "",
            "[True, True, True, True]",
        ],
    )
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 300)
    b.scope("lstm", "LSTM", 20, 200)
    b.shaped_op("aten::lstm", 30, 150, *LSTM_ARGS)
    b.shaped_op("aten::cudnn_is_acceptable", 32, 2, [[5, 3, 16]], [F], [""])
    b.shaped_op(
        "aten::_cudnn_rnn_flatten_weight",
        40,
        20,
        [[[128, 16], [128, 32], [128], [128]]] + [[]] * 8,
        [TL] + [S] * 8,
        ["", "4", "16", "2", "32", "0", "1", "False", "False"],
    )
    b.launch(45, 100, 5, kind="memcpy")
    b.shaped_op("aten::_cudnn_rnn", 70, 100, *cudnn, seq=7)
    b.launch(80, 110, 200)
    b.op("autograd::engine::evaluate_function: CudnnRnnBackward0", 600, 200, tid=2, seq=7, fwd_tid=1)
    b.op("CudnnRnnBackward0", 601, 190, tid=2, seq=7, fwd_tid=1)
    b.shaped_op("aten::_cudnn_rnn_backward", 610, 150, *backward, tid=2)
    b.launch(620, 700, 400, tid=2)
    p = analyze_built(b)
    lstm = p.find("lstm")
    assert lstm.forward.total.flops == LSTM_FLOPS
    assert lstm.backward.total.flops == 2 * LSTM_FLOPS
    assert p.flops.unsupported == ()


def test_on_cpu_the_structure_decides_not_the_time(analyze_built):
    """On CPU an op without a formula whose children carry counted FLOPs is covered, however
    much of its CPU time is its own (CPU time is noise on small ops: identical runs must list
    the same ops); an op with nothing counted inside it is unsupported (on GPUs, the kernels an
    op launches itself decide: the next test)."""
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.step(1, 0, 1000)
    b.shaped_op("mylib::rnn_layer", 10, 400, [[5, 3, 16]], [F], [""])
    b.shaped_op("aten::add", 20, 10, [[128], [128], []], [F, F, S], ["", "", "1"])
    # an op without a formula that spends most of its time in a counted op: looked through
    b.shaped_op("mylib::wrapper", 500, 100, [[2, 3, 4], [2, 4, 5]], [F, F], ["", ""])
    b.shaped_op("aten::bmm", 505, 90, [[2, 3, 4], [2, 4, 5]], [F, F], ["", ""])
    # zero-FLOP ops: views, metadata, predicates are never unsupported
    b.shaped_op("aten::unsafe_chunk", 700, 50, [[3, 96], [], []], [F, S, S], ["", "3", "1"])
    b.shaped_op("aten::unsafe_split", 705, 40, [[3, 96], [], []], [F, S, S], ["", "32", "1"])
    b.shaped_op("aten::cudnn_is_acceptable", 760, 5, [[5, 3, 16]], [F], [""])
    b.shaped_op("aten::_nnpack_available", 770, 5, [], [], [])
    b.shaped_op("aten::is_contiguous", 780, 5, [[3, 96], []], [F, S], ["", "0"])
    b.shaped_op(
        "aten::empty_permuted", 790, 5, [[], [], [], [], [], []], [""] * 6, ["[3]", "[0]", "6", "", "", ""]
    )
    # nothing counted inside: unsupported, with its own CPU time
    b.shaped_op("mylib::gather_tokens", 800, 60, [[5, 3, 16]], [F], [""])
    b.shaped_op("aten::copy_", 810, 10, [[4, 4], [4, 4], []], [F, F, S], ["", "", "False"])
    p = analyze_built(b)
    listed = {u.name: u for u in p.flops.unsupported}
    assert set(listed) == {"mylib::gather_tokens"}
    assert listed["mylib::gather_tokens"].time_us == pytest.approx(50)  # its own time, not the copy's
    assert 0 < listed["mylib::gather_tokens"].share_of_step <= 1


def test_on_gpu_an_op_is_unsupported_when_it_launches_most_of_its_gpu_work_itself(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.shaped_op("mylib::rnn_layer", 10, 100, [[5, 3, 16]], [F], [""])
    b.shaped_op("aten::add", 20, 10, [[128], [128], []], [F, F, S], ["", "", "1"])
    b.launch(22, 200, 5)  # the add's kernel
    b.launch(40, 210, 50)  # the layer's own kernel
    # 5 of 65 µs launched by the op itself, the rest by the counted mm inside it: explained
    b.shaped_op("mylib::wrapper", 300, 100, [[4, 8]], [F], [""])
    b.shaped_op("aten::mm", 310, 50, [[4, 8], [8, 16]], [F, F], ["", ""])
    b.launch(320, 400, 60)
    b.launch(380, 470, 5)
    p = analyze_built(b)
    assert [u.name for u in p.flops.unsupported] == ["mylib::rnn_layer"]
    layer = p.flops.unsupported[0]
    assert layer.time_us == pytest.approx(50)  # the GPU time of its own kernel only
    assert layer.share_of_step == pytest.approx(50 / 120)


def test_an_op_without_formula_is_listed_unsupported_with_calls_and_time(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 900)
    b.scope("fc", "Linear", 20, 100)
    b.shaped_op("aten::mm", 30, 50, [[4, 8], [8, 16]], [F, F], ["", ""], seq=1)
    b.launch(40, 100, 30)
    b.scope("custom", "Custom", 200, 100)
    b.shaped_op("mylib::fancy_op", 210, 60, [[4, 16]], [F], [""], seq=2)
    b.launch(220, 300, 10)
    # an op whose formula does not understand its arguments (a 3-D mm) is unsupported too
    b.shaped_op("aten::mm", 400, 50, [[2, 4, 8], [8, 16]], [F, F], ["", ""], seq=3)
    b.launch(410, 500, 10)
    p = analyze_built(b)
    assert p.find("fc").forward.total.flops == 2 * 4 * 16 * 8
    assert p.find("custom").forward.total.flops == 0
    assert p.find("custom").forward.total.unsupported_ops == 1
    listed = {u.name: u for u in p.flops.unsupported}
    assert set(listed) == {"mylib::fancy_op", "aten::mm" + NOT_UNDERSTOOD}
    fancy = listed["mylib::fancy_op"]
    assert fancy.calls == 1 and fancy.time_us == pytest.approx(10)
    assert fancy.share_of_step == pytest.approx(10 / 50)
    assert p.selection.unsupported_ops == 2
    text = traceprof.render.render(p, "tree", traceprof.render.RenderOptions(unsupported_ops=True))
    assert "2 kinds of op without a FLOP formula" in text
    assert "mylib::fancy_op" in text and "20.0%" in text
    assert "--unsupported-ops lists them" in traceprof.render.render(p, "tree")


def test_an_event_launching_gpu_work_itself_is_an_op(analyze_built):
    """A compiled graph's CompiledFunction launches its kernels without aten ops inside."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("CompiledFunction", 10, 100)
    b.launch(20, 200, 40)
    b.op("ProfilerStepHelper", 300, 10)  # an event without work or shapes is not an op
    b.shaped_op("aten::relu", 400, 10, [[8]], [F], [""])
    p = analyze_built(b)
    assert [u.name for u in p.flops.unsupported] == ["CompiledFunction"]
    assert p.flops.unsupported[0].share_of_step == pytest.approx(1.0)


def test_backward_ops_go_to_the_module_of_their_forward_op(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 300)
    b.scope("fc", "Linear", 20, 100)
    b.shaped_op("aten::mm", 30, 50, [[4, 8], [8, 16]], [F, F], ["", ""], seq=11)
    b.op("autograd::engine::evaluate_function: MmBackward0", 600, 100, tid=2, seq=11, fwd_tid=1)
    b.op("MmBackward0", 601, 90, tid=2, seq=11, fwd_tid=1)
    b.shaped_op("aten::mm", 610, 20, [[4, 16], [16, 8]], [F, F], ["", ""], tid=2)  # grad input
    b.shaped_op("aten::mm", 640, 20, [[8, 4], [4, 16]], [F, F], ["", ""], tid=2)  # grad weight
    p = analyze_built(b)
    fc = p.find("fc")
    assert fc.forward.total.flops == 1024
    assert fc.backward.total.flops == 2048
    assert fc.backward.own.macs == 1024
    assert p.unattributed.total.flops == 0
    assert p.selection.flops == 3072


def test_a_trace_without_shapes_says_so(analyze_built):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::mm", 10, 50)
    b.launch(20, 100, 30)
    p = analyze_built(b)
    assert not p.flops.has_shapes
    assert any("without shapes" in w for w in p.warnings)
    assert p.selection.flops == 0 and p.flops.unsupported == ()
    text = traceprof.render.render(p, "tree")
    assert "warning:   trace recorded without shapes" in text
    assert "FLOP" not in text.split("warning:")[0]
    assert p.throughput(p.selection).flop_per_s is None


# --- peaks, achieved FLOP/s, MFU -------------------------------------------------------------


def test_mfu_is_achieved_flops_over_the_peak_of_the_dtype_used(analyze_built):
    b = TraceBuilder()
    b.top["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936}]
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 900)
    b.scope("proj", "Linear", 20, 100)
    # bf16 [4096, 4096] @ [4096, 4096]: 137.4 GFLOP in one 200 us kernel
    b.shaped_op("aten::mm", 30, 50, [[4096, 4096], [4096, 4096]], [B, B], ["", ""])
    b.launch(40, 100, 200)
    b.scope("small", "Linear", 200, 100)
    b.shaped_op("aten::mm", 210, 50, [[64, 64], [64, 64]], ["float", "float"], ["", ""])
    b.launch(220, 400, 100)
    p = analyze_built(b)
    flops = 2 * 4096**3
    peak = p.flops.peak
    assert (peak.device, peak.precision, peak.flop_per_s) == ("H100 SXM", "bf16", 989.5e12)
    assert dict(p.flops.flops_by_precision) == {"bf16": flops, "fp32": 2 * 64**3}
    rates = p.throughput(p.find("proj").total)
    assert rates.flop_per_s == pytest.approx(flops / 200e-6)
    assert rates.mfu == pytest.approx(flops / 200e-6 / 989.5e12)
    moved = 2 * 4096 * 4096 * 2 + 4096 * 4096 * 2
    assert rates.bytes_per_s == pytest.approx(moved / 200e-6)
    assert rates.bandwidth_use == pytest.approx(moved / 200e-6 / 3.35e12)
    assert rates.flops_per_byte == pytest.approx(flops / moved)
    step = p.throughput(p.selection)
    assert step.flop_per_s == pytest.approx((flops + 2 * 64**3) / 300e-6)
    text = traceprof.render.render(p, "tree")
    assert "MFU" in text and "H100 SXM bf16 peak 990 TFLOP/s" in text
    table = traceprof.render.render(p, "table")
    assert "MFU" in next(line for line in table.splitlines() if line.startswith("Layer (type"))


def test_fp32_convolutions_count_at_the_tf32_peak_on_gpus_that_have_it(analyze_built):
    b = TraceBuilder()
    b.top["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 84990623744}]
    b.step(1, 0, 1000)
    b.shaped_op(
        "aten::conv2d",
        10,
        50,
        [[8, 64, 32, 32], [64, 64, 3, 3], [], [], [], [], []],
        [F, F, "", SL, SL, SL, S],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
    )
    b.launch(20, 100, 50)
    p = analyze_built(b)
    assert p.flops.peak.precision == "tf32"
    assert p.flops.peak.flop_per_s == 156e12
    assert p.flops.peak.bytes_per_s == 2039e9


def test_cpu_traces_get_achieved_flops_but_no_mfu(analyze_built):
    b = TraceBuilder()
    b.top["deviceProperties"] = []
    b.step(1, 0, 1000)
    b.scope("", "Net", 0, 500)
    b.shaped_op("aten::mm", 100, 400, [[100, 100], [100, 100]], [F, F], ["", ""])
    p = analyze_built(b)
    rates = p.throughput(p.find("").total)
    assert rates.flop_per_s == pytest.approx(2e6 / 500e-6)  # over Net's CPU time
    assert rates.mfu is None and rates.bandwidth_use is None
    assert p.flops.peak is None
    assert "over CPU time" in traceprof.render.render(p, "tree")


def test_device_names_find_their_peaks():
    cases = {
        ("NVIDIA H100 80GB HBM3", None): "H100 SXM",
        ("NVIDIA H100 PCIe", None): "H100 PCIe",
        ("NVIDIA H100 NVL", None): "H100 NVL",
        ("NVIDIA H200", None): "H200 SXM",
        ("NVIDIA B200", None): "B200",
        ("NVIDIA A100-SXM4-80GB", 84990623744): "A100 80GB SXM",
        ("NVIDIA A100-PG509-200", 42297524224): "A100 40GB",
        ("Tesla V100-DGXS-32GB", None): "V100 SXM2",
        ("Tesla V100-PCIE-16GB", None): "V100 PCIe",
        ("AMD Instinct MI250X", None): "MI250X",
        ("AMD Instinct MI300X", None): "MI300X",
    }
    for (name, memory), want in cases.items():
        assert find_peaks(name, memory).name == want, name
    assert find_peaks("AMD Radeon Graphics") is None and find_peaks("") is None
    for entry in PEAKS:
        assert entry.source and entry.bytes_per_s > 0
        # matrix-unit peaks are never below the vector fp32 peak
        for precision in ("bf16", "fp16", "fp8"):
            if precision in entry.flop_per_s and "fp32" in entry.flop_per_s:
                assert entry.flop_per_s[precision] > entry.flop_per_s["fp32"], entry.name


# --- the registry ----------------------------------------------------------------------------


def test_registry_narrows_to_families_and_refuses_duplicates():
    matrix = REGISTRY.only(*MATRIX_FAMILIES)
    assert "aten::mm" in matrix and "aten::convolution_backward" in matrix
    assert "aten::layer_norm" not in matrix and "aten::relu" not in matrix
    assert matrix.get("aten::view").family is Family.NO_COST
    assert matrix.get("c10d::allreduce_").family is Family.NO_COST
    r = Registry()
    r.formula("aten::x", family=Family.POINTWISE)(lambda a: None)
    with pytest.raises(ValueError):
        r.no_cost("aten::x")
    assert REGISTRY.get("aten::definitely_not_an_op") is None


def test_arguments_missing_from_the_trace_are_not_guessed():
    """A 2021 trace has no Concrete Inputs: a convolution's stride is unknown, so the op is not
    understood rather than taken as stride 1."""
    conv = REGISTRY.get("aten::conv2d").formula
    args = OpArgs(
        "aten::conv2d",
        [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []],
        [F, F, "", "GenericList", "GenericList", "GenericList", "Int"],
        [],
    )
    with pytest.raises(ValueError):
        conv(args)
    ok = OpArgs(
        "aten::conv2d",
        [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []],
        [F, F, "", SL, SL, SL, S],
        ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"],
    )
    assert conv(ok).macs == 36 * 4 * 27


def test_cli_lists_unsupported_ops_and_sorts_by_flops(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 900)
    b.scope("a", "A", 20, 100)
    b.shaped_op("aten::mm", 30, 50, [[4, 8], [8, 16]], [F, F], ["", ""])
    b.launch(40, 100, 30)
    b.scope("b", "B", 200, 100)
    b.shaped_op("aten::mm", 210, 50, [[40, 8], [8, 16]], [F, F], ["", ""])
    b.launch(220, 300, 10)
    b.shaped_op("mylib::op", 400, 50, [[4]], [F], [""])
    b.launch(410, 500, 10)
    path = b.write(tmp_path / "t.json")
    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", str(path), "--unsupported-ops", "--sort", "flops"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "unsupported: 1 kind of op without a FLOP formula" in out
    assert "  mylib::op" in out and "20.0%" in out
    assert out.index("(b): B(") < out.index("(a): A(")


def test_registry_is_the_formula_modules_tables_combined():
    """REGISTRY is built from each formula module's own table; importing a module changes no
    other table, and an op in two tables is refused."""
    import importlib

    import traceprof.flops as flops

    modules = [
        importlib.import_module(f"traceprof.flops.{m}")
        for m in (
            "attention",
            "conv",
            "data_movement",
            "losses",
            "matmul",
            "norm",
            "optim",
            "pointwise",
            "pooling",
            "reduction",
            "rnn",
            "selection",
        )
    ]
    names = [e.name for m in modules for e in m.FORMULAS]
    assert [e.name for e in flops.REGISTRY] == names and len(set(names)) == len(names)
    assert "aten::mm" in flops.matmul.FORMULAS and "aten::mm" not in flops.conv.FORMULAS
    extra = Registry()
    extra.no_cost("aten::mm")
    with pytest.raises(ValueError, match="aten::mm is registered twice"):
        Registry.combined(flops.REGISTRY, extra)
