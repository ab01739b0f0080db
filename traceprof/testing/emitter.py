"""The event writer: replays a step's program (:mod:`traceprof.testing.program` nodes) on the CPU
threads and GPU streams, giving every node its timestamps, ids and events.

Times are integer nanoseconds while replaying (exact; written as microseconds with 3 decimals),
and every duration is drawn from one ``random.Random``, so a seed gives the same bytes on every
run. The emitter also keeps what the trace should be analyzed to (counts, and the kernel time of
each innermost module scope, forward and backward), which becomes the sidecar expectations.
"""

from __future__ import annotations

import random
from typing import Any

from traceprof.testing.aten import empty
from traceprof.testing.gpt import Model
from traceprof.testing.kernels import H2D_BYTES_PER_NS, NCCL_BYTES_PER_NS, K
from traceprof.testing.program import (
    BWD_TID,
    CBID,
    DEVICE,
    MAIN_TID,
    PID,
    S_COMPUTE,
    S_COPY,
    S_NCCL,
    STREAMS,
    TAKE,
    Alloc,
    Api,
    Event,
    Grad,
    Launch,
    Node,
    Op,
    Scope,
    Sync,
    Tn,
    ins,
)


def us(ns: int) -> float:
    return ns / 1000  # ns integer -> microseconds, exact to 3 decimals


def slice_event(cat: str, name: str, pid: int, tid: int, t: int, dur: int, args: dict[str, Any]) -> Event:
    """A complete ("X") event from ``t`` for ``dur`` ns (an open slice is written 0 long and
    given its duration when it closes)."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": us(t),
        "dur": us(dur),
        "args": args,
    }


def flow_event(ph: str, flow_id: int, pid: int, tid: int, t: int, cat: str) -> Event:
    """One end of a flow arrow: ``ph`` "s" its start, "f" its end (bound to the enclosing slice)."""
    ev: Event = {"ph": ph, "id": flow_id, "pid": pid, "tid": tid, "ts": us(t), "cat": cat, "name": cat}
    if ph == "f":
        ev["bp"] = "e"
    return ev


def _input_copy(inp: Tn) -> Op:
    """``x.to(dev, non_blocking=True)`` of one batch input: a host-to-device copy on the copy stream."""
    copy = Launch(
        "Memcpy HtoD (Pinned -> Device)",
        3000 + inp.nbytes / H2D_BYTES_PER_NS,
        stream=S_COPY,
        cat="gpu_memcpy",
        api="cudaMemcpyAsync",
        nbytes=inp.nbytes,
    )
    to_copy = Op(
        "aten::_to_copy",
        ins(inp, 4, 0, None, None, True, None),
        [
            empty("aten::empty_strided", inp, list(inp.shape), list(inp.strides), 4, 0, None, False),
            Op("aten::copy_", ins(inp, inp, True), [copy], cost=3000),
        ],
        cost=2500,
    )
    return Op("aten::to", ins(inp, 4, 0, None, None, True, False, None), [to_copy], cost=1500)


def _seed_gradient() -> Op:
    """``loss.backward()``'s seed gradient, on the main thread: ``ones_like(loss)``."""
    return Op(
        "aten::ones_like",
        ins(Tn(), None, None, None, None, 1),
        [
            empty("aten::empty_like", Tn(), Tn(), None, None, None, None, 1),
            Op("aten::fill_", ins(Tn(), 1), [Launch(K["fill"], 2000)], cost=2500),
        ],
        cost=2000,
    )


def _loss_item() -> Op:
    """``loss.item()``: a device-to-host copy and a synchronization with the compute stream."""
    dtoh = Launch("Memcpy DtoH (Device -> Pinned)", 1500, cat="gpu_memcpy", api="cudaMemcpyAsync", nbytes=2)
    dense = Op("aten::_local_scalar_dense", ins(Tn()), [dtoh, Sync(S_COMPUTE)], cost=2000)
    return Op("aten::item", ins(Tn()), [dense], cost=1500)


#: the gradient bytes DDP gathers before it all-reduces them (its default bucket_cap_mb, 25)
BUCKET_CAP = 25 << 20


def _accumulate_grad(p: Tn) -> Op:
    """The AccumulateGrad node of a leaf parameter, run in backward after the node that made its
    gradient."""
    return Op(
        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
        {},
        [Op("torch::autograd::AccumulateGrad", ins(p), cost=2500)],
        cost=2000,
    )


class Emitter:
    """Replays a model's step program; ``step`` returns the events of one training step."""

    def __init__(self, model: Model, rng: random.Random, t0: int) -> None:
        self.m, self.rng = model, rng
        self.t = t0  # main-thread clock (ns)
        self.t_first = t0
        self.ext = 0  # External id
        self.corr = 0  # correlation id
        self.seq = 17 + rng.randrange(1000)
        self.evidx = 0
        self.fwdbwd = 0
        self.sfree = dict.fromkeys(STREAMS, t0)
        self.allocated = 2_400_000_000
        self.reserved = 4_000_000_000
        self.live: list[tuple[int, int]] = []  # (addr, bytes) of this step's allocations
        self.addr = 0x7F3A00000000
        self.counts = {
            "kernel": 0,
            "gpu_memcpy": 0,
            "gpu_memset": 0,
            "cuda_runtime": 0,
            "cpu_op": 0,
            "user_annotation": 0,
            "module_scopes": 0,
            "memory": 0,
            "ac2g_pairs": 0,
            "fwdbwd_pairs": 0,
        }
        # (module, is a kernel) -> attributed GPU ns
        self.fwd_ns: dict[tuple[str, bool], int] = {}
        self.bwd_ns: dict[tuple[str, bool], int] = {}
        self.cpu: list[Event] = []
        self.gpu: list[Event] = []
        # the autograd nodes of this step's forward: (sequence number, node, fwdbwd flow id, module)
        self.grads: list[tuple[int, Grad, int, str | None]] = []
        self.attr: str | None = None  # the innermost module scope
        self.step_k7: list[int] | None = None  # first/last stream-7 activity of the step
        # an injected straggler (generate_job): the kernels of one module run slow_factor times
        # longer on the slow rank; the other ranks wait that long in their next all-reduce
        self.slow_module: str | None = None
        self.slow_factor = 1.0
        self.is_slow = False
        self.pending_wait = 0

    # -- helpers --
    def _ev_idx(self) -> int:
        self.evidx += 1
        return self.evidx - 1

    def _alloc(self, tid: int, t: int, nbytes: int) -> None:
        self.addr += (nbytes + 511) // 512 * 512 + 512
        self.allocated += nbytes
        if self.allocated > self.reserved:
            self.reserved = (self.allocated // (2 << 20) + 8) * (2 << 20)
        self.live.append((self.addr, nbytes))
        self._mem(tid, t, nbytes, self.addr)

    def _mem(self, tid: int, t: int, nbytes: int, addr: int) -> None:
        self.counts["memory"] += 1
        self.cpu.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": PID,
                "tid": tid,
                "ts": us(t),
                "args": {
                    "Total Reserved": self.reserved,
                    "Total Allocated": self.allocated,
                    "Bytes": nbytes,
                    "Addr": addr,
                    "Device Id": 0,
                    "Device Type": 1,
                    "Ev Idx": self._ev_idx(),
                },
            }
        )

    def _free(self, tid: int, t: int, n: int) -> None:
        for _ in range(min(n, len(self.live))):
            addr, nbytes = self.live.pop()
            self.allocated -= nbytes
            self._mem(tid, t, -nbytes, addr)

    def _jit(self, ns: float, spread: float = 0.4) -> int:
        return int(ns * (1 - spread / 2 + spread * self.rng.random()))

    def _open_cpu(self, cat: str, name: str, tid: int, t: int, args: dict[str, Any]) -> Event:
        """Write an open slice on a CPU thread (its ``dur`` is set when it closes)."""
        ev = slice_event(cat, name, PID, tid, t, 0, args)
        self.cpu.append(ev)
        return ev

    def _annotation(self, name: str, tid: int, t: int) -> tuple[Event, int]:
        """Open a user_annotation at t; returns it and its External id."""
        self.ext += 1
        eid = self.ext
        ev = self._open_cpu(
            "user_annotation",
            name,
            tid,
            t,
            {"External id": eid, "Record function id": 0, "Ev Idx": self._ev_idx()},
        )
        self.counts["user_annotation"] += 1
        return ev, eid

    def _runtime(self, name: str, tid: int, t: int, dur: int, eid: int, cbid: int, corr: int) -> None:
        """A CUDA runtime call of ``dur`` ns on a CPU thread."""
        args = {"External id": eid, "cbid": cbid, "correlation": corr}
        self.cpu.append(slice_event("cuda_runtime", name, PID, tid, t, dur, args))
        self.counts["cuda_runtime"] += 1

    # -- the recursive replay: each returns the thread's clock after the node --
    def run(self, node: Node, tid: int, t: int, eid: int, bwd: bool = False) -> int:
        """Replay node on thread tid from time t; eid: the External id of the enclosing op or scope
        (what a runtime call inside it carries); bwd: inside an autograd node."""
        if isinstance(node, Op):
            return self._op(node, tid, t, bwd)
        if isinstance(node, Launch):
            return self._launch(node, tid, t, eid, bwd)
        if isinstance(node, Scope):
            return self._scope(node, tid, t, bwd)
        if isinstance(node, Alloc):
            t += 150
            self._alloc(tid, t, node.nbytes)
            return t + 100
        if isinstance(node, Api):
            return self._api(node, tid, t, eid)
        if isinstance(node, Sync):
            return self._sync(node, tid, t, eid)
        raise TypeError(node)

    def _op(self, node: Op, tid: int, t: int, bwd: bool) -> int:
        rng = self.rng
        t += 300 + int(900 * rng.random())
        self.ext += 1
        my = self.ext
        args: dict[str, Any] = {"External id": my, "Record function id": 0}
        seq = node.seq
        if seq is not None and not bwd:
            args["Sequence number"] = self.seq
            args["Fwd thread id"] = 0
        args.update(node.args)
        args["Ev Idx"] = self._ev_idx()
        ev = self._open_cpu("cpu_op", node.name, tid, t, args)
        self.counts["cpu_op"] += 1
        start = t
        if seq == TAKE and not bwd:
            s = self.seq
            self.seq += 1
            if node.grad is not None:
                self.fwdbwd += 1
                self.cpu.append(flow_event("s", self.fwdbwd, PID, tid, t, "fwdbwd"))
                self.grads.append((s, node.grad, self.fwdbwd, self.attr))
        t += 200 + int(400 * rng.random())
        for c in node.children:
            t = self.run(c, tid, t, my, bwd)
        t += self._jit(node.cost)
        ev["dur"] = us(t - start)
        return t

    def _launch(self, node: Launch, tid: int, t: int, eid: int, bwd: bool) -> int:
        rng = self.rng
        t += 200 + int(600 * rng.random())
        self.corr += 1
        c = self.corr
        rdur = self._jit(5200 if node.cat == "kernel" else 6500)
        self._runtime(node.api, tid, t, rdur, eid, node.cbid, c)
        self.cpu.append(flow_event("s", c, PID, tid, t, "ac2g"))
        s = node.stream
        ks = max(t + 2500 + int(3000 * rng.random()), self.sfree[s])
        kd = self._gpu_duration(node)
        self.sfree[s] = ks + kd + 700 + int(900 * rng.random())
        if s == S_COMPUTE:
            if self.step_k7 is None:
                self.step_k7 = [ks, ks + kd]
            self.step_k7[1] = ks + kd
        self._gpu_work(node, ks, kd, eid, c)
        if self.attr is not None:
            d = self.bwd_ns if bwd else self.fwd_ns
            key = (self.attr, node.cat == "kernel")
            d[key] = d.get(key, 0) + kd
        return t + rdur

    def _gpu_duration(self, node: Launch) -> int:
        """How long the GPU work of a launch runs: its duration with jitter, longer in the slow
        module on the slow rank, and an all-reduce longer by what the other ranks waited for."""
        kd = self._jit(node.dur, 0.06)
        if self.slow_module is not None and self.attr == self.slow_module and node.cat == "kernel":
            extra = int(kd * (self.slow_factor - 1))
            if self.is_slow:
                kd += extra
            else:
                self.pending_wait += extra
        if node.kname == K["nccl"] and self.pending_wait:
            kd += self.pending_wait  # waiting for the slow rank
            self.pending_wait = 0
        return kd

    def _gpu_work(self, node: Launch, ks: int, kd: int, eid: int, corr: int) -> None:
        """The kernel, memcpy or memset event of a launch on its stream, and its flow's end."""
        s = node.stream
        kargs: dict[str, Any] = {"External id": eid}
        if node.cat == "kernel":
            kargs["queued"] = 0
        kargs.update({"device": DEVICE, "context": 1, "stream": s, "correlation": corr})
        kargs.update(node.kargs)
        self.gpu.append(slice_event(node.cat, node.kname, DEVICE, s, ks, kd, kargs))
        self.gpu.append(flow_event("f", corr, DEVICE, s, ks, "ac2g"))
        self.counts[node.cat] += 1
        self.counts["ac2g_pairs"] += 1

    def _scope(self, node: Scope, tid: int, t: int, bwd: bool) -> int:
        rng = self.rng
        t += 400 + int(800 * rng.random())
        ev, my = self._annotation(node.name, tid, t)
        start = t
        outer = self.attr
        if node.qual is not None:
            self.counts["module_scopes"] += 1
            self.attr = node.qual
        t += 1500 + int(2500 * rng.random())  # Python forward() overhead
        for c in node.children:
            t = self.run(c, tid, t, my, bwd)
        t += 1200 + int(2000 * rng.random())
        self.attr = outer
        ev["dur"] = us(t - start)
        return t

    def _api(self, node: Api, tid: int, t: int, eid: int) -> int:
        t += 300
        self.corr += 1
        d = self._jit(node.cost)
        self._runtime(node.name, tid, t, d, eid, node.cbid, self.corr)
        if node.wait:
            dst, src = node.wait
            self.sfree[dst] = max(self.sfree[dst], self.sfree[src])
        return t + d

    def _sync(self, node: Sync, tid: int, t: int, eid: int) -> int:
        t += 400
        end = max(t + 3000, self.sfree[node.stream] + 2000)
        self.corr += 1
        self._runtime("cudaStreamSynchronize", tid, t, end - t, eid, CBID["cudaStreamSynchronize"], self.corr)
        return end + 500

    # -- one training step --
    def step(self, number: int) -> list[Event]:
        m, rng = self.m, self.rng
        self.cpu, self.gpu, self.grads, self.step_k7 = [], [], [], None
        t = t_step = self.t
        step_ev, step_eid = self._annotation(f"ProfilerStep#{number}", MAIN_TID, t)
        t += 20_000 + int(30_000 * rng.random())  # dataloader next()
        for inp in m.batch_inputs:  # x, y = x.to(dev, non_blocking=True)
            t = self.run(_input_copy(inp), MAIN_TID, t, step_eid)
        t = self.run(Api("cudaEventRecord"), MAIN_TID, t, step_eid)
        t = self.run(Api("cudaStreamWaitEvent", wait=(S_COMPUTE, S_COPY)), MAIN_TID, t, step_eid)

        t = self.run(m.forward, MAIN_TID, t, step_eid)
        # loss.backward(): the seed gradient on the main thread, the graph on the autograd thread
        t = self.run(_seed_gradient(), MAIN_TID, t, step_eid)
        t = self.backward(t + 12_000 + int(8000 * rng.random()))
        t += 15_000 + int(10_000 * rng.random())
        t = self.run(m.optimizer, MAIN_TID, t, step_eid)
        t = self.run(Scope("Optimizer.zero_grad#AdamW.zero_grad", []), MAIN_TID, t + 5000, step_eid)
        t = self.run(_loss_item(), MAIN_TID, t, step_eid)
        self._free(MAIN_TID, t + 200, len(self.live))
        t += 8_000 + int(6000 * rng.random())
        step_ev["dur"] = us(t - t_step)
        if self.step_k7:  # Kineto's GPU-side span of the step
            a, b = self.step_k7
            span = slice_event(
                "gpu_user_annotation",
                f"ProfilerStep#{number}",
                DEVICE,
                S_COMPUTE,
                a,
                b - a,
                {"External id": step_eid},
            )
            self.gpu.append(span)
        self.t = t + 1500 + int(2000 * rng.random())
        return self.cpu + self.gpu

    def backward(self, tb: int) -> int:
        """Run the recorded autograd nodes, latest first, on the autograd thread."""
        bucket = 0
        for seq, g, flow, attr in reversed(self.grads):
            self.attr = attr
            tb, eid = self._autograd_node(seq, g, flow, tb)
            self.attr = None
            for p in g.params:  # AccumulateGrad for leaf params
                tb = self.run(_accumulate_grad(p), BWD_TID, tb, eid, bwd=True)
                bucket += p.nbytes
                if bucket >= BUCKET_CAP:
                    tb = self.allreduce(tb, bucket)
                    bucket = 0
        if bucket:
            tb = self.allreduce(tb, bucket)
        # DDP finalize: the compute stream waits for the last all-reduce
        tb = self.run(Api("cudaStreamWaitEvent", wait=(S_COMPUTE, S_NCCL)), BWD_TID, tb + 2000, self.ext)
        return tb

    def _autograd_node(self, seq: int, g: Grad, flow: int, tb: int) -> tuple[int, int]:
        """Run one autograd node from tb: the engine's evaluate_function slice around the node's
        op, the end of its fwdbwd flow, its children, and the memory it frees. Returns the clock
        after it and the External id of the node's op."""
        rng = self.rng
        tb += 1500 + int(2500 * rng.random())
        self.ext += 1
        outer = self._open_cpu(
            "cpu_op",
            f"autograd::engine::evaluate_function: {g.name}",
            BWD_TID,
            tb,
            {
                "External id": self.ext,
                "Record function id": 0,
                "Sequence number": seq,
                "Fwd thread id": 1,
                "Ev Idx": self._ev_idx(),
            },
        )
        start = tb
        tb += 400 + int(600 * rng.random())
        self.ext += 1
        my = self.ext
        args = {"External id": my, "Sequence number": seq, "Fwd thread id": 1, "Record function id": 0}
        args.update(g.args)
        args["Ev Idx"] = self._ev_idx()
        inner = self._open_cpu("cpu_op", g.name, BWD_TID, tb, args)
        self.cpu.append(flow_event("f", flow, PID, BWD_TID, tb, "fwdbwd"))
        self.counts["cpu_op"] += 2
        self.counts["fwdbwd_pairs"] += 1
        istart = tb
        tb += 1500 + int(2000 * rng.random())
        for c in g.children:
            tb = self.run(c, BWD_TID, tb, my, bwd=True)
        tb += 1000 + int(1500 * rng.random())
        inner["dur"] = us(tb - istart)
        tb += 2000 + int(3000 * rng.random())  # engine: validate outputs, queue next
        outer["dur"] = us(tb - start)
        self._free(BWD_TID, tb + 200, 2)
        return tb + 400, my

    def allreduce(self, tb: int, nbytes: int) -> int:
        dur = 12_000 + 2 * 7 / 8 * nbytes / NCCL_BYTES_PER_NS
        node = Scope(
            "nccl:all_reduce",
            [
                Op(
                    "record_param_comms",
                    ins(Tn(nbytes // 2), 0, 0, 8),
                    [
                        Api("cudaEventRecord"),
                        Api("cudaStreamWaitEvent", wait=(S_NCCL, S_COMPUTE)),
                        Launch(K["nccl"], dur, stream=S_NCCL, grid=(16, 1, 1), block=(640, 1, 1), regs=94),
                    ],
                    cost=9000,
                )
            ],
        )
        return self.run(node, BWD_TID, tb, self.ext, bwd=True)
