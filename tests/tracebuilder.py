"""Tiny Kineto traces built in code, one rule at a time."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


class TraceBuilder:
    """Builds a modern (2024-style) Kineto trace; ``era="2021"`` uses the 2021 spellings."""

    def __init__(self, era: str = "modern", pid: int = 100):
        self.era = era
        self.pid = pid
        self.events: list[dict] = []
        self._corr = 1000
        self._ext = 1
        self.top: dict = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}]}

    def cpu_rank(self, rank: int, world_size: int = 2, backend: str = "gloo") -> TraceBuilder:
        """This trace as rank ``rank`` of a CPU job (no devices, ``distributedInfo``)."""
        self.top = {
            "schemaVersion": 1,
            "deviceProperties": [],
            "distributedInfo": {"backend": backend, "rank": rank, "world_size": world_size},
        }
        return self

    # --- CPU side
    def _tid(self, tid):
        return str(tid) if self.era == "2021" else tid

    def op(self, name, ts, dur, tid=1, seq=None, fwd_tid=None, cat=None, **args):
        cat = cat or ("Operator" if self.era == "2021" else "cpu_op")
        a = {"External id": self._ext, **args}
        self._ext += 1
        if seq is not None:
            a["Sequence number"] = seq
            a["Fwd thread id"] = fwd_tid if fwd_tid is not None else 0
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": self._tid(tid),
            "ts": ts,
            "dur": dur,
            "args": a,
        }
        self.events.append(ev)
        return ev

    def shaped_op(self, name, ts, dur, dims, types, concrete=None, tid=1, seq=None, fwd_tid=None):
        """An op recorded with record_shapes=True (``concrete=None``: no "Concrete Inputs",
        as in 2021 traces)."""
        args = {"Input Dims": dims, "Input type": types}
        if concrete is not None:
            args["Concrete Inputs"] = concrete
        return self.op(name, ts, dur, tid=tid, seq=seq, fwd_tid=fwd_tid, **args)

    def annotation(self, name, ts, dur, tid=1):
        cat = "Operator" if self.era == "2021" else "user_annotation"
        return self.op(name, ts, dur, tid=tid, cat=cat)

    def step(self, n, ts, dur, tid=1):
        return self.annotation(f"ProfilerStep#{n}", ts, dur, tid)

    def scope(self, qualname, cls, ts, dur, tid=1):
        return self.annotation(f"[traceprof:1]{cls}: {qualname}", ts, dur, tid)

    def py_module(self, cls, n, ts, dur, tid=1):
        ev = {
            "ph": "X",
            "cat": "python_function",
            "name": f"nn.Module: {cls}_{n}",
            "pid": self.pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"Python id": len(self.events), "Python parent id": None},
        }
        self.events.append(ev)
        return ev

    def memory(self, ts, nbytes, total=None, device_type=1, device_id=0, tid=1, addr=None):
        """A ``[memory]`` instant (profile_memory=True); ``total=None``: no "Total Allocated",
        as in 2021 traces; ``addr``: the block's address ("Addr"; None: not written, as in 2021
        traces), which pairs an allocation with its free."""
        args = {"Device Type": device_type, "Device Id": device_id, "Bytes": nbytes}
        if total is not None:
            args["Total Allocated"] = total
        if addr is not None:
            args["Addr"] = addr
        ev = {
            "ph": "i",
            "s": "t",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": self.pid,
            "tid": self._tid(tid),
            "ts": ts,
            "args": args,
        }
        self.events.append(ev)
        return ev

    # --- GPU side
    def launch(
        self,
        ts,
        kernel_ts,
        kernel_dur,
        tid=1,
        stream=7,
        name="kernel",
        kind="kernel",
        with_runtime=True,
        external_id=None,
    ):
        self._corr += 1
        corr = self._corr
        if with_runtime:
            cat = "Runtime" if self.era == "2021" else "cuda_runtime"
            self.events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": "cudaLaunchKernel",
                    "pid": self.pid,
                    "tid": self._tid(tid),
                    "ts": ts,
                    "dur": 1,
                    "args": {"correlation": corr},
                }
            )
        cats = {
            "kernel": "Kernel" if self.era == "2021" else "kernel",
            "memcpy": "Memcpy" if self.era == "2021" else "gpu_memcpy",
            "memset": "Memset" if self.era == "2021" else "gpu_memset",
        }
        args = {"correlation": corr, "stream": stream, "device": 0}
        if external_id is not None:
            args["external id" if self.era == "2021" else "External id"] = external_id
        ev = {
            "ph": "X",
            "cat": cats[kind],
            "name": name,
            "pid": 0,
            "tid": f"stream {stream}" if self.era == "2021" else stream,
            "ts": kernel_ts,
            "dur": kernel_dur,
            "args": args,
        }
        self.events.append(ev)
        return ev

    # --- output
    def document(self) -> dict:
        return {**self.top, "traceEvents": self.events}

    def write(self, path: Path, gz: bool = False) -> Path:
        data = json.dumps(self.document()).encode()
        path = Path(path)
        if gz:
            path.write_bytes(gzip.compress(data))
        else:
            path.write_bytes(data)
        return path
