"""The trace file: the header, the steps as the emitter produces them, the trailer, and the
sidecar ``<out>.expect.json`` with what an analysis of the trace should find; and a job's traces,
one per rank.

The file is written step by step (never the whole event list in memory), one compact JSON event
per line, in Kineto's key order (``traceEvents`` followed by ``traceName``, ``displayTimeUnit``,
``baseTimeNanoseconds``), so that traces of 500 MB and more take little memory to write.
"""

from __future__ import annotations

import gzip
import os
import random
import sys
import time
from typing import Any, BinaryIO

import orjson

from traceprof.testing.emitter import Emitter, us
from traceprof.testing.gpt import Model
from traceprof.testing.program import (
    BASE_TIME_NS,
    BWD_TID,
    DEVICE,
    MAIN_TID,
    PID,
    STREAMS,
    Event,
)


def _header(model: Model, seed: int, rank: int = 0, world_size: int = 8) -> bytes:
    """The top-level keys before ``traceEvents``: an H100 node of up to 8 GPUs, the job's
    distributedInfo, and a trace id drawn from the seed."""
    dev = {
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85029158912,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472,
    }
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": i, **dev} for i in range(min(world_size, 8))],
        "cupti_version": 24,
        "cuda_runtime_version": 12040,
        "cuda_driver_version": 12080,
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world_size,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": world_size,
                    "ranks": list(range(world_size)),
                }
            ],
            "nccl_version": "2.21.5",
        },
        "record_shapes": 1,
        "profile_memory": 1,
        "trace_id": f"{random.Random(seed).getrandbits(128):032X}",
    }
    return (
        b"{\n"
        + b"".join(b'  "%s": %s,\n' % (k.encode(), orjson.dumps(v)) for k, v in head.items())
        + b'  "traceEvents": [\n'
    )


def _trailer_events(em: Emitter, t_start: int, t_end: int) -> list[Event]:
    """The process/thread metadata and the profiler's own span events, written after the steps."""
    cpu_threads = {MAIN_TID: "python3", BWD_TID: "pt_autograd_0"}
    ts = us(t_start + 100_000)
    ev: list[Event] = []

    def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> None:
        ev.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

    meta("process_name", PID, 0, {"name": "python3"})
    meta("process_labels", PID, 0, {"labels": "CPU"})
    meta("process_sort_index", PID, 0, {"sort_index": PID})
    meta("process_name", DEVICE, 0, {"name": "python3"})
    meta("process_labels", DEVICE, 0, {"labels": f"GPU {DEVICE}"})
    meta("process_sort_index", DEVICE, 0, {"sort_index": 5000000 + DEVICE})
    for s in STREAMS:
        meta("thread_name", DEVICE, s, {"name": f"stream {s} "})
        meta("thread_sort_index", DEVICE, s, {"sort_index": s})
    for tid, name in cpu_threads.items():
        meta("thread_name", PID, tid, {"name": f"thread {tid} ({name})"})
        meta("thread_sort_index", PID, tid, {"sort_index": tid})
    ev.append(
        {
            "ph": "X",
            "cat": "Trace",
            "ts": us(t_start),
            "dur": us(t_end - t_start),
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        }
    )
    ev.append(
        {
            "name": "process_sort_index",
            "ph": "M",
            "ts": us(t_start),
            "pid": "Spans",
            "tid": 0,
            "args": {"sort_index": 536870912},
        }
    )
    ev.append(
        {
            "name": "Iteration Start: PyTorch Profiler",
            "ph": "i",
            "s": "g",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": us(t_start),
        }
    )
    ev.append(
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": us(t_end + 50_000)}
    )
    return ev


def _open_out(path: str, gz: bool) -> gzip.GzipFile | BinaryIO:
    """The output file, gzip-compressed (level 3: fast) when gz."""
    if gz:
        return gzip.open(path, "wb", compresslevel=3)
    return open(path, "wb", buffering=1 << 22)


def _write_steps(
    f: gzip.GzipFile | BinaryIO,
    em: Emitter,
    steps: int | None,
    target: int,
    first_step: int,
    quiet: bool,
    written: int,
) -> tuple[int, int, int]:
    """Write steps after the header (``written`` bytes so far): ``steps`` of them, or when None,
    until the file holds ``target`` bytes (2 steps at least). Returns the bytes written in all,
    the steps and their events."""
    n_steps = n_events = 0
    while (steps is None and (written < target or n_steps < 2)) or (steps is not None and n_steps < steps):
        events = em.step(first_step + n_steps)
        chunk = b",\n".join(map(orjson.dumps, events))
        if n_steps:
            chunk = b",\n" + chunk
        f.write(chunk)
        written += len(chunk)
        n_steps += 1
        n_events += len(events)
        if not quiet and n_steps % 20 == 0:
            print(f"  step {n_steps}: {written / 1e6:.0f} MB", file=sys.stderr)
    return written, n_steps, n_events


def _tail(em: Emitter, t0: int, out: str) -> tuple[bytes, int]:
    """What ends the file: the trailer events after the steps, and the keys after
    ``traceEvents``; and the number of those events."""
    events = _trailer_events(em, t0, em.t)
    tail = (
        b",\n"
        + b",\n".join(map(orjson.dumps, events))
        + b"\n  ],\n"
        + b'  "traceName": "%s",\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d\n}\n'
        % (os.path.basename(out).encode(), BASE_TIME_NS)
    )
    return tail, len(events)


def _module_kernel_us(em: Emitter, model: Model) -> dict[str, dict[str, Any]]:
    """The sidecar's GPU time of each module (microseconds, summed over the steps), by pass."""

    def module_us(d: dict[tuple[str, bool], int], q: str, kernel: bool) -> float:
        return round(d.get((q, kernel), 0) / 1000, 3)

    return {
        q: {
            "class": cls,
            "fwd": module_us(em.fwd_ns, q, True),
            "bwd": module_us(em.bwd_ns, q, True),
            "fwd_gpu": module_us(em.fwd_ns, q, True) + module_us(em.fwd_ns, q, False),
            "bwd_gpu": module_us(em.bwd_ns, q, True) + module_us(em.bwd_ns, q, False),
        }
        for q, cls in model.modules
    }


def _counts(em: Emitter, model: Model, n_steps: int) -> dict[str, Any]:
    """The sidecar's counts of events, scopes, flows, streams and threads, and the module times."""
    c = em.counts
    return {
        "kernels": c["kernel"],
        "kernels_per_step": c["kernel"] // n_steps,
        "module_scopes_per_step": model.scopes_per_step,
        "module_scopes": c["module_scopes"],
        "modules": len(model.modules),
        "gpu_memcpy": c["gpu_memcpy"],
        "gpu_memset": c["gpu_memset"],
        "cuda_runtime": c["cuda_runtime"],
        "cpu_ops": c["cpu_op"],
        "user_annotations": c["user_annotation"],
        "memory_events": c["memory"],
        "ac2g_flow_pairs": c["ac2g_pairs"],
        "fwdbwd_flow_pairs": c["fwdbwd_pairs"],
        "streams": list(STREAMS),
        "threads": {"main": MAIN_TID, "backward": BWD_TID},
        "module_kernel_us": _module_kernel_us(em, model),
        "module_kernel_us_note": "summed over all steps; self time of the innermost module scope "
        "(forward: GPU work launched inside it; backward: GPU work of backward "
        "nodes whose Sequence number is a forward op inside it). fwd/bwd: "
        "'kernel' events only; fwd_gpu/bwd_gpu: kernels + gpu_memcpy + "
        "gpu_memset. GPU work outside module scopes (optimizer, NCCL, input "
        "copies, ones_like, loss.item) is not included.",
    }


def generate(
    out: str,
    target_mb: float = 520.0,
    steps: int | None = None,
    layers: int = 24,
    seed: int = 0,
    n_embd: int = 1024,
    n_head: int = 16,
    batch: int = 8,
    seq_len: int = 1024,
    first_step: int = 5,
    quiet: bool = False,
    rank: int = 0,
    world_size: int = 8,
    slow_module: str | None = None,
    slow_factor: float = 1.0,
    slow: bool = False,
) -> dict[str, Any]:
    """Write the trace to out; returns the expectation dict (also written to out.expect.json).
    ``rank``/``world_size``: the distributedInfo; ``slow_module``: the qualified name of a module
    whose kernels take ``slow_factor`` times longer when ``slow`` (the other ranks wait for it in
    their next all-reduce)."""
    t_wall = time.perf_counter()
    rng = random.Random(seed)
    model = Model(layers, n_embd, n_head, batch, seq_len)
    t0 = 1_900_000_000_000_000 + rng.randrange(10**12)  # ns, ~1.9e12 us like real traces
    em = Emitter(model, rng, t0 + 300_000)
    em.slow_module, em.slow_factor, em.is_slow = slow_module, slow_factor, slow
    tmp = out + ".tmp"
    with _open_out(tmp, gz=out.endswith(".gz")) as f:  # by out's name: tmp ends in .tmp
        head = _header(model, seed, rank, world_size)
        f.write(head)
        written, n_steps, n_events = _write_steps(
            f, em, steps, int(target_mb * 1e6), first_step, quiet, len(head)
        )
        tail, n_tail = _tail(em, t0, out)
        f.write(tail)
    os.replace(tmp, out)
    expect: dict[str, Any] = {
        "generator": "scripts/gen_large_trace.py",
        "args": {"layers": layers, "seed": seed, "target_mb": target_mb, "steps": steps, **model.cfg},
        "uncompressed_bytes": written + len(tail),
        "events": n_events + n_tail,
        "steps": n_steps,
        "first_step": first_step,
        **_counts(em, model, n_steps),
        "generation_seconds": round(time.perf_counter() - t_wall, 2),
    }
    with open(out + ".expect.json", "wb") as f:
        f.write(orjson.dumps(expect, option=orjson.OPT_INDENT_2))
    return expect


def generate_job(
    out_dir: str | os.PathLike[str],
    ranks: int = 8,
    slow_rank: int | None = None,
    slow_module: str = "transformer.h.1.mlp.c_fc",
    slow_factor: float = 3.0,
    name: str = "gpt",
    gz: bool = False,
    seed: int = 0,
    **kwargs: Any,
) -> list[str]:
    """Write the traces of one ``ranks``-rank job into ``out_dir``, one per rank
    (``<name>_rank<R>.<ms>.pt.trace.json[.gz]``, with distributedInfo), all with the same steps;
    on ``slow_rank`` the kernels of ``slow_module`` run ``slow_factor`` times longer (forward and
    backward), and the other ranks wait that long in their all-reduce. ``kwargs`` go to
    :func:`generate` (``steps``, ``layers``, ``target_mb``, ``quiet``, ...). Returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths: list[str] = []
    for r in range(ranks):
        path = os.path.join(
            out_dir, f"{name}_rank{r}.{1767225600000 + r}.pt.trace.json" + (".gz" if gz else "")
        )
        generate(
            path,
            seed=seed * 1000 + r,
            rank=r,
            world_size=ranks,
            slow_module=slow_module if slow_rank is not None else None,
            slow_factor=slow_factor,
            slow=r == slow_rank,
            **kwargs,
        )
        os.remove(path + ".expect.json")
        paths.append(path)
    return paths
