#!/usr/bin/env python3
"""Generate a large, realistic synthetic Kineto trace of GPT training, for benchmarks and tests.

The trace imitates what ``torch.profiler`` (2024+, CUDA, ``record_shapes=True``,
``profile_memory=True``) writes for a nanoGPT-style model captured with ``traceprof.capture``:

* ``ProfilerStep#N`` user annotations on the main thread, one per training step;
* per ``nn.Module`` call a scope ``[traceprof:1]<Class>: <qualified.name>`` (cat
  ``user_annotation``; the root is ``[traceprof:1]GPT: ``), nested like the module calls;
* aten ``cpu_op`` trees inside the scopes (``aten::linear`` > ``aten::t`` + ``aten::view`` +
  ``aten::addmm`` + ``aten::view``, ...) with "Input Dims"/"Input type"/"Input Strides"/
  "Concrete Inputs"; ops that create an autograd node carry "Sequence number" (increasing) and
  "Fwd thread id": 0 (composite ops carry the number of their first node, as PyTorch does);
* ``cudaLaunchKernel``/``cudaLaunchKernelExC``/``cudaMemcpyAsync``/``cudaMemsetAsync``
  ``cuda_runtime`` events inside the ops (the op's "External id", a unique "correlation"), the
  matching ``kernel``/``gpu_memcpy``/``gpu_memset`` events on GPU 0 (pid 0, tid = stream: 7
  compute, 20 NCCL all-reduce, 24 input copies), serialized per stream and starting after their
  launch, and ``ac2g`` flow pairs;
* the backward pass on a second CPU thread: ``autograd::engine::evaluate_function: XBackward0``
  > ``XBackward0`` (the forward op's "Sequence number", "Fwd thread id": 1) > aten ops that launch
  kernels, ``AccumulateGrad`` nodes, DDP-style ``nccl:all_reduce`` buckets, ``fwdbwd`` flows;
* ``Optimizer.step#AdamW.step`` with ``aten::_foreach_*`` ops, ``Optimizer.zero_grad``, a
  ``loss.item()`` device-to-host copy and stream synchronize closing every step;
* ``[memory]`` instant events, process/thread ``M`` metadata, the profiler span events.

Timestamps are float microseconds with 3 decimals relative to ``baseTimeNanoseconds``; slices
nest properly on every thread and stream. The file is written step by step (never the whole
event list in memory), one compact JSON event per line, in Kineto's key order (``traceEvents``
followed by ``traceName``, ``displayTimeUnit``, ``baseTimeNanoseconds``).

A sidecar ``<out>.expect.json`` holds the counts (kernel events, module scopes per step, steps,
...) and, per module, the GPU ``kernel`` time attributed to it (forward: kernels launched while
the module is the innermost scope; backward: kernels launched by backward nodes whose
"Sequence number" belongs to a forward op in that innermost scope).

Usage::

    python scripts/gen_large_trace.py --out /tmp/big.json              # >= 520 MB (default)
    python scripts/gen_large_trace.py --out /tmp/small.json.gz --target-mb 20 --validate
    python scripts/gen_large_trace.py --out t.json --steps 3 --layers 4 --seed 1

Options: --out PATH (.json or .json.gz), --target-mb N (uncompressed size to reach; steps are
added until it is reached), --steps N (fixed step count instead), --layers N (transformer blocks,
default 24), --seed N, --validate (re-read the file and check its invariants).
Only the standard library and orjson are used.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import random
import sys
import time

import orjson

# ---------------------------------------------------------------------------------------------
# Trace constants
# ---------------------------------------------------------------------------------------------

PID = 48213                    # CPU process id
MAIN_TID = 48213               # forward / optimizer thread
BWD_TID = 48377                # autograd engine thread
DEVICE = 0                     # GPU events: pid = device index
S_COMPUTE, S_NCCL, S_COPY = 7, 20, 24
BASE_TIME_NS = 1767225600000000000
PREFIX = "[traceprof:1]"

BF16, LONG, FLOAT = "c10::BFloat16", "long int", "float"
DSIZE = {BF16: 2, LONG: 8, FLOAT: 4, "bool": 1}

CBID = {"cudaLaunchKernel": 211, "cudaLaunchKernelExC": 430, "cudaMemcpyAsync": 41,
        "cudaMemsetAsync": 51, "cudaStreamSynchronize": 131, "cudaStreamWaitEvent": 147,
        "cudaEventRecord": 135}

# Kernel names as CUDA 12 / PyTorch 2.x on H100 spell them.
_MTA = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::TensorListMetadata<{n}>, at::native::(anonymous namespace)::"
        "{functor}<c10::BFloat16, {n}, {r}, 0>, {op}, float>(at::native::(anonymous namespace)::"
        "TensorListMetadata<{n}>, at::native::(anonymous namespace)::{functor}<c10::BFloat16, "
        "{n}, {r}, 0>, {op}, float)")
_FA_BWD_TRAITS = ("pytorch_flash::Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, false, false, "
                  "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 8, "
                  "cutlass::bfloat16_t> >")
K = {
    "gemm_tn": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_nn": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_nt": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "ln_fwd": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "ln_bwd_in": "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    "ln_bwd_gb": "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, 32u, 32u, 8u, true, false>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, c10::BFloat16*)",
    "emb_fwd": "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "emb_sort": "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<long, long, int>::Policy900, false, long, long, int, int, at_cuda_detail::cub::detail::identity_decomposer_t>(int*, int*, int*, int const*, long*, long const*, long*, long const*, int, int, int, at_cuda_detail::cub::detail::identity_decomposer_t)",
    "emb_grad": "void at::native::(anonymous namespace)::compute_grad_weight<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, long const*, long, long, long const*, long const*, float*)",
    "emb_scatter": "void at::native::(anonymous namespace)::sum_and_scatter<c10::BFloat16, float, long>(long const*, c10::BFloat16*, long, long const*, long const*, float const*, long const*, long, long)",
    "drop_fwd": "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)",
    "drop_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(c10::BFloat16, bool)#1}, std::array<char*, 3ul> >(int, at::native::(anonymous namespace)::masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(c10::BFloat16, bool)#1}, std::array<char*, 3ul>)",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "copy": "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})",
    "cat": "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
    "gelu_fwd": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    "gelu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)",
    "flash_fwd": "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "flash_bwd_dot": f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {_FA_BWD_TRAITS} >(pytorch_flash::Flash_bwd_params)",
    "flash_bwd": f"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{_FA_BWD_TRAITS}, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_bwd_params)",
    "flash_bwd_cvt": f"void pytorch_flash::flash_bwd_convert_dq_kernel<{_FA_BWD_TRAITS} >(pytorch_flash::Flash_bwd_params, int)",
    "lsm_fwd": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
    "lsm_bwd": "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, long)",
    "nll_fwd": "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<c10::BFloat16, float, long>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, bool, long, long, long, long)",
    "nll_bwd": "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<c10::BFloat16, long>(c10::BFloat16*, c10::BFloat16 const*, long const*, c10::BFloat16 const*, c10::BFloat16 const*, bool, int, int, long, long)",
    "fill": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)",
    "arange": "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#3}::operator()() const::{lambda(long)#1}>(int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#3}::operator()() const::{lambda(long)#1}, function_traits<at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#3}::operator()() const::{lambda(long)#1}>::result_type*)",
    "sum": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4>)",
    "nccl": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "mta_mul": _MTA.format(n=1, r=1, functor="BinaryOpScalarFunctor", op="std::multiplies<float>"),
    "mta_add": _MTA.format(n=1, r=1, functor="BinaryOpScalarFunctor", op="std::plus<float>"),
    "mta_lerp": _MTA.format(n=2, r=2, functor="TernaryOpScalarFunctor", op="at::native::LerpFunctor<float>"),
    "mta_addcmul": _MTA.format(n=3, r=1, functor="PointwiseOpScalarFunctor", op="std::multiplies<float>"),
    "mta_sqrt": _MTA.format(n=2, r=1, functor="UnaryOpFunctor", op="at::native::Sqrt<float>"),
    "mta_div": _MTA.format(n=1, r=1, functor="BinaryOpScalarListFunctor", op="std::divides<float>"),
    "mta_addcdiv": _MTA.format(n=3, r=1, functor="PointwiseOpScalarListFunctor", op="std::divides<float>"),
}

# Throughput model (H100 SXM, bf16): durations in ns.
GEMM_FLOPS_PER_NS = 520e3        # ~520 TFLOP/s achieved
FLASH_FLOPS_PER_NS = 330e3
MEM_BYTES_PER_NS = 2600.0        # ~2.6 TB/s
H2D_BYTES_PER_NS = 22.0
NCCL_BYTES_PER_NS = 160.0


def _ew_ns(nbytes):
    """Duration of a memory-bound kernel moving nbytes."""
    return int(2500 + nbytes / MEM_BYTES_PER_NS)


# ---------------------------------------------------------------------------------------------
# Static description of one training step (built once, replayed every step)
# ---------------------------------------------------------------------------------------------

PEEK, TAKE = 1, 2        # how an op uses the autograd sequence number


class Tn:
    """A tensor argument: shape, dtype, strides (contiguous unless given)."""

    __slots__ = ("shape", "dtype", "strides")

    def __init__(self, *shape, dtype=BF16, strides=None):
        self.shape = list(shape)
        self.dtype = dtype
        if strides is None:
            strides, acc = [], 1
            for d in reversed(shape):
                strides.append(acc)
                acc *= d
            strides.reverse()
        self.strides = list(strides)

    @property
    def numel(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.numel * DSIZE[self.dtype]


class TL:
    """A TensorList argument (foreach ops)."""


def ins(*items):
    """The "Concrete Inputs"/"Input type"/"Input Strides"/"Input Dims" args of an op."""
    conc, types, strides, dims = [], [], [], []
    for it in items:
        if isinstance(it, Tn):
            conc.append(""), types.append(it.dtype), strides.append(it.strides), dims.append(it.shape)
            continue
        dims.append([]), strides.append([])
        if it is None:
            conc.append(""), types.append("")
        elif it is TL:
            conc.append(""), types.append("TensorList")
        elif isinstance(it, list):
            conc.append(str(it)), types.append("ScalarList")
        else:
            conc.append(str(it)), types.append("Scalar")
    return {"Concrete Inputs": conc, "Input type": types, "Input Strides": strides, "Input Dims": dims}


class Op:
    __slots__ = ("name", "args", "children", "seq", "grad", "cost")

    def __init__(self, name, args, children=(), seq=None, grad=None, cost=1200):
        self.name, self.args, self.children = name, args, tuple(children)
        self.seq, self.grad, self.cost = seq, grad, cost


class Scope:
    """A user_annotation; a module scope when qual is not None."""

    __slots__ = ("name", "qual", "children")

    def __init__(self, name, children, qual=None):
        self.name, self.children, self.qual = name, tuple(children), qual


class Launch:
    """A runtime call that puts one kernel / memcpy / memset on a stream."""

    __slots__ = ("api", "cbid", "cat", "kname", "stream", "dur", "kargs")

    def __init__(self, kname, dur, stream=S_COMPUTE, cat="kernel", api="cudaLaunchKernel",
                 grid=(1, 1, 1), block=(256, 1, 1), regs=32, smem=0, nbytes=0):
        self.kname, self.dur, self.stream, self.cat, self.api = kname, int(dur), stream, cat, api
        self.cbid = CBID[api]
        if cat == "kernel":
            blocks = grid[0] * grid[1] * grid[2]
            bps = round(blocks / 132, 6)
            wps = round(bps * block[0] * block[1] * block[2] / 32, 6)
            occ = min(100, int(wps / 64 * 100)) if wps else 0
            self.kargs = {"registers per thread": regs, "shared memory": smem,
                          "blocks per SM": bps, "warps per SM": wps,
                          "grid": list(grid), "block": list(block),
                          "est. achieved occupancy %": occ}
        else:
            bw = nbytes / dur if dur else 0.0       # bytes/ns == GB/s
            self.kargs = {"bytes": nbytes, "memory bandwidth (GB/s)": bw}


class Api:
    """A runtime call without GPU work; wait=(dst, src) makes stream dst wait for stream src."""

    __slots__ = ("name", "cbid", "cost", "wait")

    def __init__(self, name, cost=2500, wait=None):
        self.name, self.cbid, self.cost, self.wait = name, CBID[name], cost, wait


class Sync:
    """cudaStreamSynchronize: blocks the CPU until the stream is idle."""

    __slots__ = ("stream",)

    def __init__(self, stream):
        self.stream = stream


class Alloc:
    """A caching-allocator allocation: one [memory] instant event."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes):
        self.nbytes = int(nbytes)


class Grad:
    """The autograd node a forward op creates, and what running it in backward does."""

    __slots__ = ("name", "args", "children", "params")

    def __init__(self, name, args, children=(), params=()):
        self.name, self.args, self.children, self.params = name, args, tuple(children), tuple(params)


def gemm(kname, m, n, k, api="cudaLaunchKernelExC"):
    dur = 4000 + 2 * m * n * k / GEMM_FLOPS_PER_NS
    return Launch(kname, dur, api=api, grid=(max(1, n // 256), max(1, m // 128), 1),
                  block=(384, 1, 1), regs=168, smem=213248)


def ew(kname, nbytes, numel):
    return Launch(kname, _ew_ns(nbytes), grid=(max(1, min(numel // 1024, 1 << 20)), 1, 1),
                  block=(128, 1, 1), regs=28)


def t_op(w, seq=None, grad=None):
    """aten::t > aten::transpose > aten::as_strided (a view, no kernel)."""
    r, c = w.shape
    tw = Tn(c, r, dtype=w.dtype, strides=[1, c])
    return Op("aten::t", ins(w), [
        Op("aten::transpose", ins(w, 0, 1), [
            Op("aten::as_strided", ins(w, [c, r], [1, c], None), cost=300)], cost=700)],
        seq=seq, grad=grad, cost=900), tw


def view_op(x, shape, seq=TAKE, name="aten::view", grad_name="ViewBackward0"):
    y = Tn(*shape, dtype=x.dtype)
    g = Grad(grad_name, ins(y), [Op("aten::reshape", ins(y, list(x.shape)), [
        Op("aten::view", ins(y, list(x.shape)), cost=500)], cost=800)]) if seq == TAKE else None
    return Op(name, ins(x, list(shape)), seq=seq, grad=g, cost=700), y


def empty(name, t, *extra):
    return Op(name, ins(*extra) if extra else ins(list(t.shape), 15, 0, None, None, 0),
              [Alloc(t.nbytes)], cost=1500)


def linear(x, w, bias):
    """nn.Linear on a (B, T, in) input: aten::linear folding the batch dims into aten::addmm."""
    B, T, fin = x.shape
    fout = w.shape[0]
    m = B * T
    x2, y2, y = Tn(m, fin), Tn(m, fout), Tn(B, T, fout)
    t, wt = t_op(w, seq=TAKE, grad=None)
    t.grad = Grad("TBackward0", ins(Tn(fin, fout)), [t_op(Tn(fin, fout))[0]], params=[w])
    v_in, _ = view_op(x, [m, fin])
    if bias is not None:
        mm = Op("aten::addmm", ins(bias, x2, wt, 1, 1), [Alloc(y2.nbytes),
                gemm(K["gemm_tn"], m, fout, fin)], seq=TAKE, cost=6000,
                grad=Grad("AddmmBackward0", ins(y2), [
                    t_op(wt)[0],
                    Op("aten::mm", ins(y2, w), [Alloc(x2.nbytes), gemm(K["gemm_nn"], m, fin, fout)], cost=5000),
                    t_op(Tn(fout, m))[0],
                    Op("aten::mm", ins(Tn(fout, m, strides=[1, fout]), x2), [Alloc(w.nbytes),
                       gemm(K["gemm_nt"], fout, fin, m)], cost=5000),
                    t_op(Tn(fout, fin))[0],
                    Op("aten::sum", ins(y2, [0], True, None), [Alloc(bias.nbytes),
                       ew(K["sum"], y2.nbytes, y2.numel)], cost=4000),
                    Op("aten::view", ins(Tn(1, fout), [fout]), cost=500)], params=[bias]))
        v_out, _ = view_op(y2, [B, T, fout])
        return Op("aten::linear", ins(x, w, bias), [t, v_in, mm, v_out], seq=PEEK, cost=2500), y
    # no bias (lm_head): aten::matmul > view, mm, _unsafe_view
    mm = Op("aten::mm", ins(x2, wt), [Alloc(y2.nbytes), gemm(K["gemm_tn"], m, fout, fin)],
            seq=TAKE, cost=5000, grad=Grad("MmBackward0", ins(y2), [
                t_op(wt)[0],
                Op("aten::mm", ins(y2, w), [Alloc(x2.nbytes), gemm(K["gemm_nn"], m, fin, fout)], cost=5000),
                t_op(Tn(fout, m))[0],
                Op("aten::mm", ins(Tn(fout, m, strides=[1, fout]), x2), [Alloc(w.nbytes),
                   gemm(K["gemm_nt"], fout, fin, m)], cost=5000),
                t_op(Tn(fout, fin))[0]]))
    uv, _ = view_op(y2, [B, T, fout], name="aten::_unsafe_view", grad_name="UnsafeViewBackward0")
    matmul = Op("aten::matmul", ins(x, wt), [v_in, mm, uv], seq=PEEK, cost=2500)
    return Op("aten::linear", ins(x, w, None), [t, matmul], seq=PEEK, cost=2500), y


def layer_norm(x):
    C = x.shape[-1]
    w, b = Tn(C), Tn(C)
    rows = x.numel // C
    stats = Tn(rows, 1, dtype=FLOAT)
    native = Op("aten::native_layer_norm", ins(x, [C], w, b, 1e-05), [
        empty("aten::empty_like", x, x, None, None, None, None, None), empty("aten::empty", stats),
        empty("aten::empty", stats),
        Launch(K["ln_fwd"], _ew_ns(2 * x.nbytes), grid=(rows, 1, 1), block=(32, 4, 1), regs=40)],
        seq=TAKE, cost=3000, grad=Grad("NativeLayerNormBackward0", ins(x), [
            Op("aten::native_layer_norm_backward", ins(x, x, [C], stats, stats, w, b, [True, True, True]), [
                empty("aten::empty_like", x, x, None, None, None, None, None),
                empty("aten::empty_like", w, w, None, None, None, None, None),
                empty("aten::empty_like", b, b, None, None, None, None, None),
                Launch(K["ln_bwd_in"], _ew_ns(3 * x.nbytes), grid=(rows, 1, 1), block=(32, 4, 1), regs=48),
                Launch(K["ln_bwd_gb"], _ew_ns(2 * x.nbytes), grid=(C // 32, 1, 1), block=(32, 32, 1), regs=64)],
               cost=6000)], params=[w, b]))
    return Op("aten::layer_norm", ins(x, [C], w, b, 1e-05, True), [native], seq=PEEK, cost=1500)


def dropout(x, p=0.1):
    mask = Tn(*x.shape, dtype="bool")
    native = Op("aten::native_dropout", ins(x, p, True), [
        empty("aten::empty_like", x, x, None, None, None, None, None),
        empty("aten::empty", mask),
        ew(K["drop_fwd"], x.nbytes * 2 + mask.nbytes, x.numel)], seq=TAKE, cost=3000,
        grad=Grad("NativeDropoutBackward0", ins(x), [
            Op("aten::native_dropout_backward", ins(x, mask, 1 / (1 - p)), [
                Alloc(x.nbytes), ew(K["drop_bwd"], x.nbytes * 2 + mask.nbytes, x.numel)], cost=3000)]))
    return Op("aten::dropout", ins(x, p, True), [native], seq=PEEK, cost=1200)


def add(x):
    return Op("aten::add", ins(x, x, 1), [Alloc(x.nbytes), ew(K["add"], 3 * x.nbytes, x.numel)],
              seq=TAKE, cost=3000, grad=Grad("AddBackward0", ins(x)))


def embedding(w, idx):
    out = Tn(*idx.shape, w.shape[1])
    flat = Tn(idx.numel, dtype=LONG)
    V, C = w.shape
    sort_idx = Tn(idx.numel, dtype=LONG)
    bwd = Op("aten::embedding_backward", ins(out, idx, V, -1, False, False), [
        Op("aten::embedding_dense_backward", ins(out, idx, V, -1, False), [
            Op("aten::zeros", ins([V, C], 15, None, None, None), [
                empty("aten::empty", w), Op("aten::zero_", ins(w), [
                    Launch("Memset (Device)", 2000 + w.nbytes / 3000.0, cat="gpu_memset",
                           api="cudaMemsetAsync", nbytes=w.nbytes)], cost=2500)], cost=2000),
            empty("aten::empty", sort_idx),
            Launch(K["emb_sort"], _ew_ns(4 * sort_idx.nbytes) + 6000, grid=(idx.numel // 3840 + 1, 1, 1)),
            Launch(K["emb_grad"], _ew_ns(out.nbytes * 2), grid=(idx.numel // 32 + 1, 1, 1), regs=40),
            Launch(K["emb_scatter"], _ew_ns(out.nbytes), grid=(idx.numel // 32 + 1, 1, 1), regs=32)],
           cost=9000)], cost=2000)
    return Op("aten::embedding", ins(w, idx, -1, False, False), [
        Op("aten::reshape", ins(idx, [-1]), [Op("aten::view", ins(idx, [-1]), cost=400)], cost=900),
        Op("aten::index_select", ins(w, 0, flat), [Alloc(out.nbytes),
           ew(K["emb_fwd"], 2 * out.nbytes, out.numel)], cost=4000),
        Op("aten::view", ins(Tn(idx.numel, C), [*idx.shape, C]), cost=400)],
        seq=TAKE, cost=2500,
        grad=Grad("EmbeddingBackward0", ins(out), [bwd], params=[w])), out


def attention_core(x, n_head):
    """The ops of CausalSelfAttention.forward between c_attn and c_proj."""
    B, T, C3 = x.shape
    C = C3 // 3
    D = C // n_head
    part = Tn(B, T, C, strides=[T * C3, C3, 1])
    ops = [Op("aten::split", ins(x, C, 2), [
        Op("aten::narrow", ins(x, 2, i * C, C), [
            Op("aten::slice", ins(x, 2, i * C, (i + 1) * C, 1), [
                Op("aten::as_strided", ins(x, [B, T, C], [T * C3, C3, 1], i * C), cost=300)], cost=800)],
           cost=1100) for i in range(3)], seq=TAKE, cost=2500,
        grad=Grad("SplitBackward0", ins(Tn(B, T, C), Tn(B, T, C), Tn(B, T, C)), [
            Op("aten::cat", ins(None, 2), [Alloc(x.nbytes), ew(K["cat"], 2 * x.nbytes, x.numel)],
               cost=5000)]))]
    head = Tn(B, T, n_head, D, strides=[T * C3, C3, D, 1])
    headT = Tn(B, n_head, T, D, strides=[T * C3, D, C3, 1])
    for _ in range(3):
        v, _v = view_op(part, [B, T, n_head, D])
        ops.append(v)
        ops.append(Op("aten::transpose", ins(head, 1, 2), [
            Op("aten::as_strided", ins(head, [B, n_head, T, D], [T * C3, D, C3, 1], None), cost=300)],
            seq=TAKE, cost=900, grad=Grad("TransposeBackward0", ins(headT), [
                Op("aten::transpose", ins(headT, 1, 2), [
                    Op("aten::as_strided", ins(headT, [B, T, n_head, D], [T * C3, C3, D, 1], None),
                       cost=300)], cost=900)])))
    flops = 4 * B * n_head * T * T * D / 2           # causal
    out = Tn(B, n_head, T, D)
    lse = Tn(B, n_head, T, dtype=FLOAT)
    fa_grid = (T // 128, B * n_head, 1)
    flash = Op("aten::_scaled_dot_product_flash_attention", ins(headT, headT, headT, 0.0, True, False, None), [
        *[Op("aten::transpose", ins(headT, 1, 2), [Op("aten::as_strided", ins(headT, [B, T, n_head, D],
             [T * C3, C3, D, 1], None), cost=300)], cost=800) for _ in range(3)],
        Op("aten::_flash_attention_forward", ins(head, head, head, None, None, T, T, 0.0, True, False, None, None, None, None), [
            empty("aten::empty_like", head, head, None, None, None, None, None), empty("aten::empty", lse),
            Launch(K["flash_fwd"], 6000 + flops / FLASH_FLOPS_PER_NS, grid=fa_grid, block=(128, 1, 1),
                   regs=255, smem=49152)], cost=9000),
        Op("aten::transpose", ins(Tn(B, T, n_head, D), 1, 2), [Op("aten::as_strided",
           ins(Tn(B, T, n_head, D), [B, n_head, T, D], [T * C, D, C, 1], None), cost=300)], cost=800)],
        seq=TAKE, cost=5000, grad=Grad("ScaledDotProductFlashAttentionBackward0", ins(out), [
            Op("aten::_scaled_dot_product_flash_attention_backward",
               ins(out, headT, headT, headT, out, lse, None, None, T, T, 0.0, True, None, None, None), [
                   Op("aten::_flash_attention_backward",
                      ins(head, head, head, head, head, lse, None, None, T, T, 0.0, True, None, None, None), [
                          empty("aten::empty_like", head, head, None, None, None, None, None),
                          empty("aten::empty_like", head, head, None, None, None, None, None),
                          empty("aten::empty_like", head, head, None, None, None, None, None),
                          empty("aten::empty", lse),
                          Op("aten::empty", ins([B, T, n_head, D], 6, 0, None, None, 0),
                             [Alloc(B * T * C * 4)], cost=1500),
                          Launch("Memset (Device)", 2000 + B * T * C * 4 / 3000.0, cat="gpu_memset",
                                 api="cudaMemsetAsync", nbytes=B * T * C * 4),
                          Launch(K["flash_bwd_dot"], _ew_ns(2 * out.nbytes), grid=(T // 128, B, n_head)),
                          Launch(K["flash_bwd"], 9000 + 2.5 * flops / FLASH_FLOPS_PER_NS, grid=(T // 128, B, n_head),
                                 block=(256, 1, 1), regs=255, smem=114688),
                          Launch(K["flash_bwd_cvt"], _ew_ns(3 * out.nbytes), grid=(T // 128, B, n_head))],
                      cost=15000)], cost=4000)]))
    ops.append(Op("aten::scaled_dot_product_attention", ins(headT, headT, headT, None, 0.0, True, None, False),
                  [flash], seq=PEEK, cost=3000))
    ops.append(Op("aten::transpose", ins(out, 1, 2), [Op("aten::as_strided",
                  ins(out, [B, T, n_head, D], [T * C, D, C, 1], None), cost=300)],
                  seq=TAKE, cost=900, grad=Grad("TransposeBackward0", ins(Tn(B, T, n_head, D)), [
                      Op("aten::transpose", ins(Tn(B, T, n_head, D), 1, 2), cost=900)])))
    y4 = Tn(B, T, n_head, D, strides=[T * C, D, C, 1])
    ops.append(Op("aten::contiguous", ins(y4, 0), [
        Op("aten::clone", ins(y4, 0), [empty("aten::empty_like", y4, y4, None, None, None, None, 0),
           Op("aten::copy_", ins(Tn(B, T, n_head, D), y4, False), [ew(K["copy"], 2 * y4.nbytes, y4.numel)],
              cost=4000)], seq=TAKE, cost=2500, grad=Grad("CloneBackward0", ins(Tn(B, T, n_head, D))))],
        seq=PEEK, cost=1200))
    v, y = view_op(Tn(B, T, n_head, D), [B, T, C])
    ops.append(v)
    return ops, y


class Model:
    """A nanoGPT-style GPT: the forward program, parameter list and module list."""

    def __init__(self, n_layer, n_embd, n_head, batch, seq_len, vocab=50304):
        B, T, C, V = batch, seq_len, n_embd, vocab
        self.cfg = dict(n_layer=n_layer, n_embd=C, n_head=n_head, batch=B, seq_len=T, vocab=V)
        self.modules = []           # (qualified name, class), in call order
        self.params = []            # Tn of every parameter (lm_head tied to wte)
        x = Tn(B, T, C)
        idx = Tn(B, T, dtype=LONG)

        def scope(cls, qual, children):
            self.modules.append((qual, cls))
            return Scope(f"{PREFIX}{cls}: {qual}", children, qual)

        def lin(qual, x, fin, fout, bias=True):
            w = Tn(fout, fin)
            b = Tn(fout) if bias else None
            self.params += [w] + ([b] if bias else [])
            op, y = linear(x, w, b)
            return scope("Linear", qual, [op]), y

        def ln(qual, x):
            self.params += [Tn(C), Tn(C)]
            return scope("LayerNorm", qual, [layer_norm(x)])

        root = []
        wte, wpe = Tn(V, C), Tn(T, C)
        self.params += [wte, wpe]
        pos = Tn(T, dtype=LONG)
        root.append(Op("aten::arange", ins(0, T, None, None, None, None), [
            empty("aten::empty", pos, [0], 4, None, None, None, None),
            Op("aten::arange", ins(0, T, 1, pos), [Launch(K["arange"], 2500)], cost=2500)], cost=3000))
        self.modules.append(("", "GPT"))
        e1, _ = embedding(wte, idx)
        e2, _ = embedding(wpe, pos)
        root.append(scope("Embedding", "transformer.wte", [e1]))
        root.append(scope("Embedding", "transformer.wpe", [e2]))
        root.append(add(x))
        root.append(scope("Dropout", "transformer.drop", [dropout(x)]))
        for i in range(n_layer):
            p = f"transformer.h.{i}"
            blk = [ln(f"{p}.ln_1", x)]
            c_attn, qkv = lin(f"{p}.attn.c_attn", x, C, 3 * C)
            core, y = attention_core(qkv, n_head)
            c_proj, _ = lin(f"{p}.attn.c_proj", y, C, C)
            blk.append(scope("CausalSelfAttention", f"{p}.attn", [
                c_attn, *core, c_proj, scope("Dropout", f"{p}.attn.resid_dropout", [dropout(x)])]))
            blk.append(add(x))
            blk.append(ln(f"{p}.ln_2", x))
            c_fc, h = lin(f"{p}.mlp.c_fc", x, C, 4 * C)
            gelu = Op("aten::gelu", ins(h, "none"), [Alloc(h.nbytes), ew(K["gelu_fwd"], 2 * h.nbytes, h.numel)],
                      seq=TAKE, cost=3000, grad=Grad("GeluBackward0", ins(h), [
                          Op("aten::gelu_backward", ins(h, h, "none"), [Alloc(h.nbytes),
                             ew(K["gelu_bwd"], 3 * h.nbytes, h.numel)], cost=3000)]))
            c_proj2, _ = lin(f"{p}.mlp.c_proj", h, 4 * C, C)
            blk.append(scope("MLP", f"{p}.mlp", [
                c_fc, scope("GELU", f"{p}.mlp.gelu", [gelu]), c_proj2,
                scope("Dropout", f"{p}.mlp.dropout", [dropout(x)])]))
            blk.append(add(x))
            root.append(scope("Block", p, blk))
        root.append(ln("transformer.ln_f", x))
        # lm_head shares wte's weight: its TBackward0 accumulates nothing of its own
        w_tied = Tn(V, C)
        lm, logits = linear(x, w_tied, None)
        lm.children[0].grad.params = ()
        self.modules.append(("lm_head", "Linear"))
        root.append(Scope(f"{PREFIX}Linear: lm_head", [lm], "lm_head"))
        # loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
        M = B * T
        lg = Tn(M, V)
        v1, _ = view_op(logits, [M, V])
        root.append(v1)
        root.append(Op("aten::view", ins(idx, [-1]), cost=600))
        tgt = Tn(M, dtype=LONG)
        scalar = Tn()
        lsm = Op("aten::_log_softmax", ins(lg, 1, False), [Alloc(lg.nbytes),
                 Launch(K["lsm_fwd"], _ew_ns(2 * lg.nbytes), grid=(M, 1, 1), block=(1024, 1, 1), regs=40)],
                 seq=TAKE, cost=3500, grad=Grad("LogSoftmaxBackward0", ins(lg), [
                     Op("aten::_log_softmax_backward_data", ins(lg, lg, 1, 15), [Alloc(lg.nbytes),
                        Launch(K["lsm_bwd"], _ew_ns(3 * lg.nbytes), grid=(M, 1, 1), block=(1024, 1, 1),
                               regs=40)], cost=3500)]))
        nll = Op("aten::nll_loss_forward", ins(lg, tgt, None, 1, -1), [Alloc(512), Alloc(512),
                 Launch(K["nll_fwd"], 9000, grid=(1, 1, 1), block=(1024, 1, 1))],
                 seq=TAKE, cost=4000, grad=Grad("NllLossBackward0", ins(scalar), [
                     Op("aten::nll_loss_backward", ins(scalar, lg, tgt, None, 1, -1, scalar), [
                         Alloc(lg.nbytes),
                         Op("aten::zero_", ins(lg), [Op("aten::fill_", ins(lg, 0), [
                             ew(K["fill"], lg.nbytes, lg.numel)], cost=2500)], cost=2000),
                         Launch(K["nll_bwd"], 9000, grid=(1, 1, 1), block=(1024, 1, 1))], cost=5000)]))
        root.append(Op("aten::cross_entropy_loss", ins(lg, tgt, None, 1, -1, 0.0), [
            Op("aten::log_softmax", ins(lg, 1, None), [lsm], seq=PEEK, cost=1500),
            Op("aten::nll_loss_nd", ins(lg, tgt, None, 1, -1), [
                Op("aten::nll_loss", ins(lg, tgt, None, 1, -1), [nll], seq=PEEK, cost=1200)],
               seq=PEEK, cost=1200)], seq=PEEK, cost=2000))
        self.forward = Scope(f"{PREFIX}GPT: ", root, "")
        self.modules.insert(0, self.modules.pop(self.modules.index(("", "GPT"))))
        self.scopes_per_step = self._count_scopes(self.forward)
        self.batch_inputs = [idx, idx]
        self.optimizer = self._adamw()

    @staticmethod
    def _count_scopes(node):
        n = 1 if isinstance(node, Scope) and node.qual is not None else 0
        for c in getattr(node, "children", ()):
            n += Model._count_scopes(c)
        return n

    def _adamw(self):
        """Optimizer.step of torch.optim.AdamW(foreach=True) on the parameters."""
        n = len(self.params)
        numel = sum(p.numel for p in self.params)
        chunks = sum(-(-p.numel // 65536) for p in self.params)

        def foreach(name, kname, lists, concrete, tensors_per_elem):
            launches = max(-(-n // (110 // lists)), -(-chunks // 320))
            per = numel * 2 * tensors_per_elem / launches
            ks = [Launch(K[kname], _ew_ns(per) + 2000, grid=(320, 1, 1), block=(512, 1, 1), regs=38)
                  for _ in range(launches)]
            return Op(name, ins(*([TL] * lists), *concrete), ks, cost=12000 + 40 * n)

        ops = [Op("aten::_foreach_add_", ins(TL, 1), cost=25000 + 30 * n),     # CPU step counters
               foreach("aten::_foreach_mul_", "mta_mul", 1, [0.9999], 2),       # weight decay
               foreach("aten::_foreach_lerp_", "mta_lerp", 2, [0.1], 3),
               foreach("aten::_foreach_mul_", "mta_mul", 1, [0.95], 2),
               foreach("aten::_foreach_addcmul_", "mta_addcmul", 3, [0.05], 4),
               foreach("aten::_foreach_sqrt", "mta_sqrt", 1, [], 2),
               foreach("aten::_foreach_div_", "mta_div", 1, [None], 2),
               foreach("aten::_foreach_add_", "mta_add", 1, [1e-08], 2),
               foreach("aten::_foreach_addcdiv_", "mta_addcdiv", 3, [None], 4)]
        return Scope("Optimizer.step#AdamW.step", ops)


# ---------------------------------------------------------------------------------------------
# Replaying the program: timestamps, ids, events
# ---------------------------------------------------------------------------------------------

def _us(ns):
    return ns / 1000          # ns integer -> microseconds, exact to 3 decimals


class Emitter:
    def __init__(self, model, rng, t0):
        self.m, self.rng = model, rng
        self.t = t0                      # main-thread clock (ns)
        self.t_first = t0
        self.ext = 0                     # External id
        self.corr = 0                    # correlation id
        self.seq = 17 + rng.randrange(1000)
        self.evidx = 0
        self.fwdbwd = 0
        self.sfree = {S_COMPUTE: t0, S_NCCL: t0, S_COPY: t0}
        self.allocated = 2_400_000_000
        self.reserved = 4_000_000_000
        self.live = []                   # (addr, bytes) of this step's allocations
        self.addr = 0x7F3A00000000
        self.counts = {"kernel": 0, "gpu_memcpy": 0, "gpu_memset": 0, "cuda_runtime": 0,
                       "cpu_op": 0, "user_annotation": 0, "module_scopes": 0, "memory": 0,
                       "ac2g_pairs": 0, "fwdbwd_pairs": 0}
        self.fwd_ns, self.bwd_ns = {}, {}    # module -> attributed kernel ns
        self.cpu, self.gpu = [], []
        self.grads, self.scopes = [], []
        self.attr = None
        self.step_k7 = None              # first/last stream-7 activity of the step
        # an injected straggler (generate_job): the kernels of one module run slow_factor times
        # longer on the slow rank; the other ranks wait that long in their next all-reduce
        self.slow_module, self.slow_factor, self.is_slow = None, 1.0, False
        self.pending_wait = 0

    # -- helpers --
    def _ev_idx(self):
        self.evidx += 1
        return self.evidx - 1

    def _alloc(self, tid, t, nbytes):
        self.addr += (nbytes + 511) // 512 * 512 + 512
        self.allocated += nbytes
        if self.allocated > self.reserved:
            self.reserved = (self.allocated // (2 << 20) + 8) * (2 << 20)
        self.live.append((self.addr, nbytes))
        self._mem(tid, t, nbytes, self.addr)

    def _mem(self, tid, t, nbytes, addr):
        self.counts["memory"] += 1
        self.cpu.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                         "pid": PID, "tid": tid, "ts": _us(t),
                         "args": {"Total Reserved": self.reserved, "Total Allocated": self.allocated,
                                  "Bytes": nbytes, "Addr": addr, "Device Id": 0, "Device Type": 1,
                                  "Ev Idx": self._ev_idx()}})

    def _free(self, tid, t, n):
        for _ in range(min(n, len(self.live))):
            addr, nbytes = self.live.pop()
            self.allocated -= nbytes
            self._mem(tid, t, -nbytes, addr)

    def _jit(self, ns, spread=0.4):
        return int(ns * (1 - spread / 2 + spread * self.rng.random()))

    # -- the recursive replay: returns the thread's clock after the node --
    def run(self, node, tid, t, eid, bwd=False):
        rng = self.rng
        if isinstance(node, Op):
            t += 300 + int(900 * rng.random())
            self.ext += 1
            my = self.ext
            args = {"External id": my, "Record function id": 0}
            seq = node.seq
            if seq is not None and not bwd:
                args["Sequence number"] = self.seq
                args["Fwd thread id"] = 0
            args.update(node.args)
            args["Ev Idx"] = self._ev_idx()
            ev = {"ph": "X", "cat": "cpu_op", "name": node.name, "pid": PID, "tid": tid,
                  "ts": _us(t), "dur": 0, "args": args}
            self.cpu.append(ev)
            self.counts["cpu_op"] += 1
            start = t
            if seq == TAKE and not bwd:
                s = self.seq
                self.seq += 1
                if node.grad is not None:
                    self.fwdbwd += 1
                    self.cpu.append({"ph": "s", "id": self.fwdbwd, "pid": PID, "tid": tid, "ts": _us(t),
                                     "cat": "fwdbwd", "name": "fwdbwd"})
                    self.grads.append((s, node.grad, self.fwdbwd, self.attr))
            t += 200 + int(400 * rng.random())
            for c in node.children:
                t = self.run(c, tid, t, my, bwd)
            t += self._jit(node.cost)
            ev["dur"] = _us(t - start)
            return t
        if isinstance(node, Launch):
            t += 200 + int(600 * rng.random())
            self.corr += 1
            c = self.corr
            rdur = self._jit(5200 if node.cat == "kernel" else 6500)
            self.cpu.append({"ph": "X", "cat": "cuda_runtime", "name": node.api, "pid": PID, "tid": tid,
                             "ts": _us(t), "dur": _us(rdur),
                             "args": {"External id": eid, "cbid": node.cbid, "correlation": c}})
            self.cpu.append({"ph": "s", "id": c, "pid": PID, "tid": tid, "ts": _us(t),
                             "cat": "ac2g", "name": "ac2g"})
            s = node.stream
            ks = max(t + 2500 + int(3000 * rng.random()), self.sfree[s])
            kd = self._jit(node.dur, 0.06)
            if self.slow_module is not None and self.attr == self.slow_module and node.cat == "kernel":
                extra = int(kd * (self.slow_factor - 1))
                if self.is_slow:
                    kd += extra
                else:
                    self.pending_wait += extra
            if node.kname == K["nccl"] and self.pending_wait:
                kd += self.pending_wait            # waiting for the slow rank
                self.pending_wait = 0
            self.sfree[s] = ks + kd + 700 + int(900 * rng.random())
            if s == S_COMPUTE:
                if self.step_k7 is None:
                    self.step_k7 = [ks, ks + kd]
                self.step_k7[1] = ks + kd
            if node.cat == "kernel":
                kargs = {"External id": eid, "queued": 0, "device": DEVICE, "context": 1,
                         "stream": s, "correlation": c, **node.kargs}
            else:
                kargs = {"External id": eid, "device": DEVICE, "context": 1, "stream": s,
                         "correlation": c, **node.kargs}
            self.gpu.append({"ph": "X", "cat": node.cat, "name": node.kname, "pid": DEVICE, "tid": s,
                             "ts": _us(ks), "dur": _us(kd), "args": kargs})
            self.gpu.append({"ph": "f", "id": c, "pid": DEVICE, "tid": s, "ts": _us(ks),
                             "cat": "ac2g", "name": "ac2g", "bp": "e"})
            cnt = self.counts
            cnt[node.cat] += 1
            cnt["cuda_runtime"] += 1
            cnt["ac2g_pairs"] += 1
            if self.attr is not None:
                d = self.bwd_ns if bwd else self.fwd_ns
                key = (self.attr, node.cat == "kernel")
                d[key] = d.get(key, 0) + kd
            return t + rdur
        if isinstance(node, Scope):
            t += 400 + int(800 * rng.random())
            self.ext += 1
            my = self.ext
            ev = {"ph": "X", "cat": "user_annotation", "name": node.name, "pid": PID, "tid": tid,
                  "ts": _us(t), "dur": 0,
                  "args": {"External id": my, "Record function id": 0, "Ev Idx": self._ev_idx()}}
            self.cpu.append(ev)
            self.counts["user_annotation"] += 1
            start = t
            outer = self.attr
            if node.qual is not None:
                self.counts["module_scopes"] += 1
                self.attr = node.qual
            t += 1500 + int(2500 * rng.random())       # Python forward() overhead
            for c in node.children:
                t = self.run(c, tid, t, my, bwd)
            t += 1200 + int(2000 * rng.random())
            self.attr = outer
            ev["dur"] = _us(t - start)
            return t
        if isinstance(node, Alloc):
            t += 150
            self._alloc(tid, t, node.nbytes)
            return t + 100
        if isinstance(node, Api):
            t += 300
            self.corr += 1
            d = self._jit(node.cost)
            self.cpu.append({"ph": "X", "cat": "cuda_runtime", "name": node.name, "pid": PID, "tid": tid,
                             "ts": _us(t), "dur": _us(d),
                             "args": {"External id": eid, "cbid": node.cbid, "correlation": self.corr}})
            self.counts["cuda_runtime"] += 1
            if node.wait:
                dst, src = node.wait
                self.sfree[dst] = max(self.sfree[dst], self.sfree[src])
            return t + d
        if isinstance(node, Sync):
            t += 400
            end = max(t + 3000, self.sfree[node.stream] + 2000)
            self.corr += 1
            self.cpu.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                             "pid": PID, "tid": tid, "ts": _us(t), "dur": _us(end - t),
                             "args": {"External id": eid, "cbid": CBID["cudaStreamSynchronize"],
                                      "correlation": self.corr}})
            self.counts["cuda_runtime"] += 1
            return end + 500
        raise TypeError(node)

    # -- one training step --
    def step(self, number):
        m, rng = self.m, self.rng
        self.cpu, self.gpu, self.grads, self.step_k7 = [], [], [], None
        t = t_step = self.t
        self.ext += 1
        step_eid = self.ext
        step_ev = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": PID,
                   "tid": MAIN_TID, "ts": _us(t), "dur": 0,
                   "args": {"External id": step_eid, "Record function id": 0, "Ev Idx": self._ev_idx()}}
        self.cpu.append(step_ev)
        self.counts["user_annotation"] += 1
        t += 20_000 + int(30_000 * rng.random())          # dataloader next()
        for inp in m.batch_inputs:                          # x, y = x.to(dev, non_blocking=True)
            t = self.run(Op("aten::to", ins(inp, 4, 0, None, None, True, False, None), [
                Op("aten::_to_copy", ins(inp, 4, 0, None, None, True, None), [
                    empty("aten::empty_strided", inp, list(inp.shape), list(inp.strides), 4, 0, None, False),
                    Op("aten::copy_", ins(inp, inp, True), [
                        Launch("Memcpy HtoD (Pinned -> Device)", 3000 + inp.nbytes / H2D_BYTES_PER_NS,
                               stream=S_COPY, cat="gpu_memcpy", api="cudaMemcpyAsync", nbytes=inp.nbytes)],
                       cost=3000)], cost=2500)], cost=1500), MAIN_TID, t, step_eid)
        t = self.run(Api("cudaEventRecord"), MAIN_TID, t, step_eid)
        t = self.run(Api("cudaStreamWaitEvent", wait=(S_COMPUTE, S_COPY)), MAIN_TID, t, step_eid)

        t = self.run(m.forward, MAIN_TID, t, step_eid)
        # loss.backward(): the seed gradient on the main thread, the graph on the autograd thread
        t = self.run(Op("aten::ones_like", ins(Tn(), None, None, None, None, 1), [
            empty("aten::empty_like", Tn(), Tn(), None, None, None, None, 1),
            Op("aten::fill_", ins(Tn(), 1), [Launch(K["fill"], 2000)], cost=2500)], cost=2000),
            MAIN_TID, t, step_eid)
        t = self.backward(t + 12_000 + int(8000 * rng.random()))
        t += 15_000 + int(10_000 * rng.random())
        t = self.run(m.optimizer, MAIN_TID, t, step_eid)
        t = self.run(Scope("Optimizer.zero_grad#AdamW.zero_grad", []), MAIN_TID, t + 5000, step_eid)
        t = self.run(Op("aten::item", ins(Tn()), [Op("aten::_local_scalar_dense", ins(Tn()), [
            Launch("Memcpy DtoH (Device -> Pinned)", 1500, cat="gpu_memcpy", api="cudaMemcpyAsync",
                   nbytes=2), Sync(S_COMPUTE)], cost=2000)], cost=1500), MAIN_TID, t, step_eid)
        self._free(MAIN_TID, t + 200, len(self.live))
        t += 8_000 + int(6000 * rng.random())
        step_ev["dur"] = _us(t - t_step)
        if self.step_k7:                                    # Kineto's GPU-side span of the step
            a, b = self.step_k7
            self.gpu.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{number}",
                             "pid": DEVICE, "tid": S_COMPUTE, "ts": _us(a), "dur": _us(b - a),
                             "args": {"External id": step_eid}})
        self.t = t + 1500 + int(2000 * rng.random())
        return self.cpu + self.gpu

    def backward(self, tb):
        """Run the recorded autograd nodes, latest first, on the autograd thread."""
        rng = self.rng
        bucket, bucket_cap = 0, 25 << 20
        for seq, g, flow, attr in reversed(self.grads):
            self.attr = attr
            tb += 1500 + int(2500 * rng.random())
            self.ext += 1
            outer = {"ph": "X", "cat": "cpu_op", "name": f"autograd::engine::evaluate_function: {g.name}",
                     "pid": PID, "tid": BWD_TID, "ts": _us(tb), "dur": 0,
                     "args": {"External id": self.ext, "Record function id": 0, "Sequence number": seq,
                              "Fwd thread id": 1, "Ev Idx": self._ev_idx()}}
            self.cpu.append(outer)
            start = tb
            tb += 400 + int(600 * rng.random())
            self.ext += 1
            my = self.ext
            args = {"External id": my, "Sequence number": seq, "Fwd thread id": 1, "Record function id": 0}
            args.update(g.args)
            args["Ev Idx"] = self._ev_idx()
            inner = {"ph": "X", "cat": "cpu_op", "name": g.name, "pid": PID, "tid": BWD_TID,
                     "ts": _us(tb), "dur": 0, "args": args}
            self.cpu.append(inner)
            self.cpu.append({"ph": "f", "id": flow, "pid": PID, "tid": BWD_TID, "ts": _us(tb),
                             "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"})
            self.counts["cpu_op"] += 2
            self.counts["fwdbwd_pairs"] += 1
            istart = tb
            tb += 1500 + int(2000 * rng.random())
            for c in g.children:
                tb = self.run(c, BWD_TID, tb, my, bwd=True)
            tb += 1000 + int(1500 * rng.random())
            inner["dur"] = _us(tb - istart)
            tb += 2000 + int(3000 * rng.random())            # engine: validate outputs, queue next
            outer["dur"] = _us(tb - start)
            self._free(BWD_TID, tb + 200, 2)
            tb += 400
            self.attr = None
            for p in g.params:                                # AccumulateGrad for leaf params
                tb = self.run(Op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                                 {}, [Op("torch::autograd::AccumulateGrad", ins(p), cost=2500)], cost=2000),
                              BWD_TID, tb, my, bwd=True)
                bucket += p.nbytes
                if bucket >= bucket_cap:
                    tb = self.allreduce(tb, bucket)
                    bucket = 0
        if bucket:
            tb = self.allreduce(tb, bucket)
        # DDP finalize: the compute stream waits for the last all-reduce
        tb = self.run(Api("cudaStreamWaitEvent", wait=(S_COMPUTE, S_NCCL)), BWD_TID, tb + 2000, self.ext)
        return tb

    def allreduce(self, tb, nbytes):
        dur = 12_000 + 2 * 7 / 8 * nbytes / NCCL_BYTES_PER_NS
        node = Scope("nccl:all_reduce", [Op("record_param_comms", ins(Tn(nbytes // 2), 0, 0, 8), [
            Api("cudaEventRecord"), Api("cudaStreamWaitEvent", wait=(S_NCCL, S_COMPUTE)),
            Launch(K["nccl"], dur, stream=S_NCCL, grid=(16, 1, 1), block=(640, 1, 1), regs=94)],
            cost=9000)])
        return self.run(node, BWD_TID, tb, self.ext, bwd=True)


# ---------------------------------------------------------------------------------------------
# File writing
# ---------------------------------------------------------------------------------------------

def _header(model, seed, rank=0, world_size=8):
    dev = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9,
           "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
           "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
           "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
           "sharedMemPerMultiprocessor": 233472}
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, **dev} for i in range(min(world_size, 8))],
        "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12080,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                           "backend_config": "cuda:nccl", "pg_size": world_size,
                                           "ranks": list(range(world_size))}], "nccl_version": "2.21.5"},
        "record_shapes": 1, "profile_memory": 1,
        "trace_id": "%032X" % random.Random(seed).getrandbits(128),
    }
    return b"{\n" + b"".join(b'  "%s": %s,\n' % (k.encode(), orjson.dumps(v)) for k, v in head.items()) \
        + b'  "traceEvents": [\n'


def _trailer_events(em, t_start, t_end):
    cpu_threads = {MAIN_TID: "python3", BWD_TID: "pt_autograd_0"}
    ts = _us(t_start + 100_000)
    ev = []

    def meta(name, pid, tid, args):
        ev.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

    meta("process_name", PID, 0, {"name": "python3"})
    meta("process_labels", PID, 0, {"labels": "CPU"})
    meta("process_sort_index", PID, 0, {"sort_index": PID})
    meta("process_name", DEVICE, 0, {"name": "python3"})
    meta("process_labels", DEVICE, 0, {"labels": f"GPU {DEVICE}"})
    meta("process_sort_index", DEVICE, 0, {"sort_index": 5000000 + DEVICE})
    for s in (S_COMPUTE, S_NCCL, S_COPY):
        meta("thread_name", DEVICE, s, {"name": f"stream {s} "})
        meta("thread_sort_index", DEVICE, s, {"sort_index": s})
    for tid, name in cpu_threads.items():
        meta("thread_name", PID, tid, {"name": f"thread {tid} ({name})"})
        meta("thread_sort_index", PID, tid, {"sort_index": tid})
    ev.append({"ph": "X", "cat": "Trace", "ts": _us(t_start), "dur": _us(t_end - t_start),
               "pid": "Spans", "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)",
               "args": {"Op count": 0}})
    ev.append({"name": "process_sort_index", "ph": "M", "ts": _us(t_start), "pid": "Spans", "tid": 0,
               "args": {"sort_index": 536870912}})
    ev.append({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
               "tid": "Trace PyTorch Profiler", "ts": _us(t_start)})
    ev.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
               "ts": _us(t_end + 50_000)})
    return ev


def generate(out, target_mb=520.0, steps=None, layers=24, seed=0, n_embd=1024, n_head=16,
             batch=8, seq_len=1024, first_step=5, quiet=False, rank=0, world_size=8,
             slow_module=None, slow_factor=1.0, slow=False):
    """Write the trace to out; returns the expectation dict (also written to out.expect.json).
    ``rank``/``world_size``: the distributedInfo; ``slow_module``: the qualified name of a module
    whose kernels take ``slow_factor`` times longer when ``slow`` (the other ranks wait for it in
    their next all-reduce)."""
    t_wall = time.perf_counter()
    rng = random.Random(seed)
    model = Model(layers, n_embd, n_head, batch, seq_len)
    t0 = 1_900_000_000_000_000 + rng.randrange(10**12)       # ns, ~1.9e12 us like real traces
    em = Emitter(model, rng, t0 + 300_000)
    em.slow_module, em.slow_factor, em.is_slow = slow_module, slow_factor, slow
    target = int(target_mb * 1e6)
    opener = (lambda p: gzip.open(p, "wb", compresslevel=3)) if out.endswith(".gz") else \
        (lambda p: open(p, "wb", buffering=1 << 22))
    written = n_steps = n_events = 0
    tmp = out + ".tmp"
    with opener(tmp) as f:
        head = _header(model, seed, rank, world_size)
        f.write(head)
        written += len(head)
        first = True
        while (steps is None and (written < target or n_steps < 2)) or (steps is not None and n_steps < steps):
            events = em.step(first_step + n_steps)
            chunk = b",\n".join(map(orjson.dumps, events))
            if not first:
                chunk = b",\n" + chunk
            first = False
            f.write(chunk)
            written += len(chunk)
            n_steps += 1
            n_events += len(events)
            if not quiet and n_steps % 20 == 0:
                print(f"  step {n_steps}: {written / 1e6:.0f} MB", file=sys.stderr)
        tail_events = _trailer_events(em, t0, em.t)
        n_events += len(tail_events)
        tail = b",\n" + b",\n".join(map(orjson.dumps, tail_events)) + b"\n  ],\n" + \
            b'  "traceName": "%s",\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d\n}\n' % (
                os.path.basename(out).encode(), BASE_TIME_NS)
        f.write(tail)
        written += len(tail)
    os.replace(tmp, out)
    c = em.counts

    def us(d, q, kernel):
        return round(d.get((q, kernel), 0) / 1000, 3)

    expect = {
        "generator": "scripts/gen_large_trace.py",
        "args": {"layers": layers, "seed": seed, "target_mb": target_mb, "steps": steps, **model.cfg},
        "uncompressed_bytes": written,
        "events": n_events,
        "steps": n_steps,
        "first_step": first_step,
        "kernels": c["kernel"],
        "kernels_per_step": c["kernel"] // n_steps,
        "module_scopes_per_step": model.scopes_per_step,
        "module_scopes": c["module_scopes"],
        "modules": len(model.modules),
        "gpu_memcpy": c["gpu_memcpy"], "gpu_memset": c["gpu_memset"],
        "cuda_runtime": c["cuda_runtime"], "cpu_ops": c["cpu_op"],
        "user_annotations": c["user_annotation"], "memory_events": c["memory"],
        "ac2g_flow_pairs": c["ac2g_pairs"], "fwdbwd_flow_pairs": c["fwdbwd_pairs"],
        "streams": [S_COMPUTE, S_NCCL, S_COPY],
        "threads": {"main": MAIN_TID, "backward": BWD_TID},
        "module_kernel_us": {q: {"class": cls, "fwd": us(em.fwd_ns, q, True), "bwd": us(em.bwd_ns, q, True),
                                 "fwd_gpu": us(em.fwd_ns, q, True) + us(em.fwd_ns, q, False),
                                 "bwd_gpu": us(em.bwd_ns, q, True) + us(em.bwd_ns, q, False)}
                             for q, cls in model.modules},
        "module_kernel_us_note": "summed over all steps; self time of the innermost module scope "
                                 "(forward: GPU work launched inside it; backward: GPU work of backward "
                                 "nodes whose Sequence number is a forward op inside it). fwd/bwd: "
                                 "'kernel' events only; fwd_gpu/bwd_gpu: kernels + gpu_memcpy + "
                                 "gpu_memset. GPU work outside module scopes (optimizer, NCCL, input "
                                 "copies, ones_like, loss.item) is not included.",
        "generation_seconds": round(time.perf_counter() - t_wall, 2),
    }
    with open(out + ".expect.json", "wb") as f:
        f.write(orjson.dumps(expect, option=orjson.OPT_INDENT_2))
    return expect


def generate_job(out_dir, ranks=8, slow_rank=None, slow_module="transformer.h.1.mlp.c_fc",
                 slow_factor=3.0, name="gpt", gz=False, seed=0, **kwargs):
    """Write the traces of one ``ranks``-rank job into ``out_dir``, one per rank
    (``<name>_rank<R>.<ms>.pt.trace.json[.gz]``, with distributedInfo), all with the same steps;
    on ``slow_rank`` the kernels of ``slow_module`` run ``slow_factor`` times longer (forward and
    backward), and the other ranks wait that long in their all-reduce. Returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for r in range(ranks):
        path = os.path.join(out_dir, f"{name}_rank{r}.{1767225600000 + r}.pt.trace.json"
                            + (".gz" if gz else ""))
        generate(path, seed=seed * 1000 + r, rank=r, world_size=ranks,
                 slow_module=slow_module if slow_rank is not None else None,
                 slow_factor=slow_factor, slow=r == slow_rank, **kwargs)
        os.remove(path + ".expect.json")
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# Validation (reads the whole file; for tests of the generator itself)
# ---------------------------------------------------------------------------------------------

def validate(path, expect):
    """Check the invariants of a generated trace; returns a list of problems (empty: fine)."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    del data
    problems = []
    evs = doc["traceEvents"]
    if doc.get("baseTimeNanoseconds") != BASE_TIME_NS:
        problems.append("baseTimeNanoseconds missing")
    by_thread = {}
    launches, kernels = {}, []
    seq_scope = {}
    n_steps = n_scopes = 0
    for e in evs:
        if e.get("ph") != "X":
            continue
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
        cat = e.get("cat")
        if cat == "cuda_runtime":
            c = e["args"]["correlation"]
            if c in launches:
                problems.append(f"duplicate runtime correlation {c}")
            launches[c] = e
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
        elif cat == "user_annotation":
            if e["name"].startswith("ProfilerStep#"):
                n_steps += 1
            elif e["name"].startswith(PREFIX):
                n_scopes += 1
        for k in ("ts", "dur"):
            v = e[k]
            if isinstance(v, float) and round(v, 3) != v:
                problems.append(f"{k} {v} has more than 3 decimals")
    # nesting per thread (stack check on events sorted by start, longest first)
    for key, lst in by_thread.items():
        lst.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in lst:
            s, d = round(e["ts"] * 1000), round(e["dur"] * 1000)
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and s + d > stack[-1]:
                problems.append(f"partial overlap on {key}: {e['name'][:60]} at {e['ts']}")
                break
            stack.append(s + d)
        if key[0] == PID and key[1] == MAIN_TID:
            # forward ops: which innermost module scope each sequence number lives in
            scope_stack = []
            for e in lst:
                s = round(e["ts"] * 1000)
                while scope_stack and scope_stack[-1][0] <= s:
                    scope_stack.pop()
                if e["name"].startswith(PREFIX):
                    scope_stack.append((s + round(e["dur"] * 1000), e["name"]))
                sn = e.get("args", {}).get("Sequence number")
                if sn is not None:
                    inner = scope_stack[-1][1] if scope_stack else None
                    if seq_scope.setdefault(sn, inner) != inner:
                        problems.append(f"sequence number {sn} in two module scopes")
    seen = set()
    for k in kernels:
        c = k["args"]["correlation"]
        r = launches.get(c)
        if r is None:
            problems.append(f"kernel correlation {c} has no launch")
            continue
        if c in seen:
            problems.append(f"correlation {c} used by two GPU events")
        seen.add(c)
        if not k["ts"] > r["ts"]:
            problems.append(f"kernel {c} starts before its launch")
        if k["args"]["External id"] != r["args"]["External id"]:
            problems.append(f"kernel {c} External id differs from its launch")
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["tid"] == BWD_TID and \
                "Sequence number" in e["args"] and e["args"]["Sequence number"] not in seq_scope:
            problems.append(f"backward op {e['name']} has no forward op")
            break
    nk = sum(1 for k in kernels if k["cat"] == "kernel")
    streams = {k["tid"] for k in kernels}
    if nk != expect["kernels"]:
        problems.append(f"kernels {nk} != expected {expect['kernels']}")
    if n_steps != expect["steps"]:
        problems.append(f"steps {n_steps} != expected {expect['steps']}")
    if n_scopes != expect["module_scopes_per_step"] * expect["steps"]:
        problems.append(f"module scopes {n_scopes} != expected")
    if len(streams) < 3:
        problems.append(f"only streams {streams}")
    print(f"validated {len(evs)} events: {nk} kernels on streams {sorted(streams)}, {n_steps} steps, "
          f"{n_scopes} module scopes, {len(seq_scope)} forward sequence numbers, "
          f"{len(by_thread)} threads/streams", file=sys.stderr)
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output path, .json or .json.gz")
    ap.add_argument("--target-mb", type=float, default=520.0,
                    help="uncompressed size to reach, in MB (10^6 bytes); default 520")
    ap.add_argument("--steps", type=int, default=None, help="exact number of steps (overrides --target-mb)")
    ap.add_argument("--layers", type=int, default=24, help="transformer blocks (default 24)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--validate", action="store_true", help="re-read the file and check its invariants")
    ap.add_argument("--ranks", type=int, default=None,
                    help="write a job of N ranks (distributedInfo) into the directory --out")
    ap.add_argument("--slow-rank", type=int, default=None, help="job: the straggler rank")
    ap.add_argument("--slow-module", default="transformer.h.1.mlp.c_fc",
                    help="job: the module that is slow on --slow-rank")
    ap.add_argument("--slow-factor", type=float, default=3.0,
                    help="job: how much longer its kernels run there (default 3)")
    ap.add_argument("--gz", action="store_true", help="job: gzip the traces")
    a = ap.parse_args(argv)
    if a.ranks:
        t = time.perf_counter()
        paths = generate_job(a.out, ranks=a.ranks, slow_rank=a.slow_rank, slow_module=a.slow_module,
                             slow_factor=a.slow_factor, gz=a.gz, seed=a.seed, target_mb=a.target_mb,
                             steps=a.steps, layers=a.layers, quiet=True)
        size = sum(os.path.getsize(p) for p in paths)
        print(f"wrote {len(paths)} ranks to {a.out}: {size / 1e6:.1f} MB on disk in "
              f"{time.perf_counter() - t:.1f} s")
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    exp = generate(a.out, target_mb=a.target_mb, steps=a.steps, layers=a.layers, seed=a.seed)
    size = os.path.getsize(a.out)
    print(f"wrote {a.out}: {size / 1e6:.1f} MB on disk, {exp['uncompressed_bytes'] / 1e6:.1f} MB JSON, "
          f"{exp['events']} events in {exp['generation_seconds']} s")
    print(f"  steps {exp['steps']}, kernels {exp['kernels']} ({exp['kernels_per_step']}/step), "
          f"module scopes {exp['module_scopes']} ({exp['module_scopes_per_step']}/step), "
          f"memcpy {exp['gpu_memcpy']}, memset {exp['gpu_memset']}, cpu_ops {exp['cpu_ops']}")
    print(f"  expectations: {a.out}.expect.json")
    if a.validate:
        problems = validate(a.out, exp)
        for p in problems[:20]:
            print("PROBLEM:", p)
        if problems:
            return 1
        print("validation OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
