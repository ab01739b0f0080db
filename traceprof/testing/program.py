"""The vocabulary of a training step's program: the trace's fixed ids, and the nodes a step is built
of (tensors, ops, scopes, kernel launches, runtime calls, allocations, autograd nodes).

A step is described once as a tree of these nodes (:mod:`traceprof.testing.gpt`) and replayed every
step by :class:`~traceprof.testing.emitter.Emitter`, which gives them timestamps and ids; nothing
here knows about time or randomness, so the description can be shared by all steps and ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeAlias

# ---------------------------------------------------------------------------------------------
# Trace constants
# ---------------------------------------------------------------------------------------------

PID = 48213  # CPU process id
MAIN_TID = 48213  # forward / optimizer thread
BWD_TID = 48377  # autograd engine thread
DEVICE = 0  # GPU events: pid = device index
S_COMPUTE, S_NCCL, S_COPY = 7, 20, 24
STREAMS = (S_COMPUTE, S_NCCL, S_COPY)  # every GPU stream of the trace, in this order
BASE_TIME_NS = 1767225600000000000
PREFIX = "[traceprof:1]"

BF16, LONG, FLOAT = "c10::BFloat16", "long int", "float"
DSIZE = {BF16: 2, LONG: 8, FLOAT: 4, "bool": 1}

CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaStreamWaitEvent": 147,
    "cudaEventRecord": 135,
}

PEEK, TAKE = 1, 2  # how an op uses the autograd sequence number

#: one trace event, as written (a JSON object)
Event: TypeAlias = dict[str, Any]


class Tn:
    """A tensor argument: shape, dtype, strides (contiguous unless given)."""

    __slots__ = ("dtype", "shape", "strides")

    def __init__(self, *shape: int, dtype: str = BF16, strides: Sequence[int] | None = None) -> None:
        self.shape = list(shape)
        self.dtype = dtype
        if strides is None:
            contiguous: list[int] = []
            acc = 1
            for d in reversed(shape):
                contiguous.append(acc)
                acc *= d
            contiguous.reverse()
            strides = contiguous
        self.strides = list(strides)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DSIZE[self.dtype]


class TL:
    """A TensorList argument (foreach ops): the class itself is the argument, never an instance."""


#: what an op's argument can be: a tensor, a tensor list, a list of scalars or ints, a scalar,
#: or None (an absent optional argument)
Arg: TypeAlias = Tn | type[TL] | list[Any] | str | int | float | bool | None


def ins(*items: Arg) -> dict[str, list[Any]]:
    """The "Concrete Inputs"/"Input type"/"Input Strides"/"Input Dims" args of an op."""
    conc: list[str] = []
    types: list[str] = []
    strides: list[list[int]] = []
    dims: list[list[int]] = []
    for it in items:
        if isinstance(it, Tn):
            conc.append("")
            types.append(it.dtype)
            strides.append(it.strides)
            dims.append(it.shape)
            continue
        dims.append([])
        strides.append([])
        if it is None:
            conc.append("")
            types.append("")
        elif it is TL:
            conc.append("")
            types.append("TensorList")
        elif isinstance(it, list):
            conc.append(str(it))
            types.append("ScalarList")
        else:
            conc.append(str(it))
            types.append("Scalar")
    return {"Concrete Inputs": conc, "Input type": types, "Input Strides": strides, "Input Dims": dims}


class Op:
    """A cpu_op (aten or autograd); ``seq`` is PEEK or TAKE when it carries a sequence number,
    ``grad`` the autograd node it creates (TAKE only)."""

    __slots__ = ("args", "children", "cost", "grad", "name", "seq")

    def __init__(
        self,
        name: str,
        args: dict[str, Any],
        children: Sequence[Node] = (),
        seq: int | None = None,
        grad: Grad | None = None,
        cost: int = 1200,
    ) -> None:
        self.name, self.args, self.children = name, args, tuple(children)
        self.seq, self.grad, self.cost = seq, grad, cost


class Scope:
    """A user_annotation; a module scope when qual is not None."""

    __slots__ = ("children", "name", "qual")

    def __init__(self, name: str, children: Sequence[Node], qual: str | None = None) -> None:
        self.name, self.children, self.qual = name, tuple(children), qual


class Launch:
    """A runtime call that puts one kernel / memcpy / memset on a stream."""

    __slots__ = ("api", "cat", "cbid", "dur", "kargs", "kname", "stream")

    def __init__(
        self,
        kname: str,
        dur: float,
        stream: int = S_COMPUTE,
        cat: str = "kernel",
        api: str = "cudaLaunchKernel",
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (256, 1, 1),
        regs: int = 32,
        smem: int = 0,
        nbytes: int = 0,
    ) -> None:
        self.kname, self.dur, self.stream, self.cat, self.api = kname, int(dur), stream, cat, api
        self.cbid = CBID[api]
        self.kargs: dict[str, Any]
        if cat == "kernel":
            blocks = grid[0] * grid[1] * grid[2]
            bps = round(blocks / 132, 6)
            wps = round(bps * block[0] * block[1] * block[2] / 32, 6)
            occ = min(100, int(wps / 64 * 100)) if wps else 0
            self.kargs = {
                "registers per thread": regs,
                "shared memory": smem,
                "blocks per SM": bps,
                "warps per SM": wps,
                "grid": list(grid),
                "block": list(block),
                "est. achieved occupancy %": occ,
            }
        else:
            bw = nbytes / dur if dur else 0.0  # bytes/ns == GB/s
            self.kargs = {"bytes": nbytes, "memory bandwidth (GB/s)": bw}


class Api:
    """A runtime call without GPU work; wait=(dst, src) makes stream dst wait for stream src."""

    __slots__ = ("cbid", "cost", "name", "wait")

    def __init__(self, name: str, cost: int = 2500, wait: tuple[int, int] | None = None) -> None:
        self.name, self.cbid, self.cost, self.wait = name, CBID[name], cost, wait


class Sync:
    """cudaStreamSynchronize: blocks the CPU until the stream is idle."""

    __slots__ = ("stream",)

    def __init__(self, stream: int) -> None:
        self.stream = stream


class Alloc:
    """A caching-allocator allocation: one [memory] instant event."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)


class Grad:
    """The autograd node a forward op creates, and what running it in backward does."""

    __slots__ = ("args", "children", "name", "params")

    def __init__(
        self, name: str, args: dict[str, Any], children: Sequence[Node] = (), params: Sequence[Tn] = ()
    ) -> None:
        self.name, self.args, self.children, self.params = name, args, tuple(children), tuple(params)


#: a node of a step's program (Grad is not one: it hangs off the Op that creates it)
Node: TypeAlias = Op | Scope | Launch | Api | Sync | Alloc
