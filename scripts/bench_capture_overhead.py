#!/usr/bin/env python
"""Step-time overhead of traceprof's module scopes, on CPU.

For each model and mode it alternates, ``--repeats`` times, three runs of ``--active`` profiled
steps each (after ``wait=1, warmup=1``):

- ``none``: no profiler at all (reference);
- ``torch``: ``torch.profiler.profile`` with the flags traceprof uses (CPU activity,
  ``record_shapes``, ``with_flops``), no scopes;
- ``traceprof``: ``traceprof.capture.profile`` (same flags + one scope per module call and the
  shape capture of the first active step).

The time of a step is the time of the training (forward, loss, backward, optimizer step) or
inference (forward under ``no_grad``) function only: ``prof.step()`` is left out, since the last
one exports the trace. The printed ratio is median(traceprof) / median(torch). A second table
gives the cost of one scope (enter + exit) for each scope implementation under an active
profiler.

    python scripts/bench_capture_overhead.py
    python scripts/bench_capture_overhead.py --models gpt --modes train --repeats 3
    python scripts/bench_capture_overhead.py --size small    # per-call stress test
    python scripts/bench_capture_overhead.py --memory --modes train   # what profile_memory=True adds

``--compiled`` benchmarks ``torch.compile(model)`` instead (CPU: Inductor's C++ backend, so it
needs a C++ compiler), in two parts:

- step time: ``torch`` runs a copy compiled without traceprof under ``torch.profiler`` with the
  same flags; ``traceprof`` runs a copy compiled inside a ``traceprof.capture.profile`` session
  (its graphs recorded, its C++ kernels emitting one profiler record each) under the session.
  The two copies have their own ``forward`` code objects, so Dynamo compiles each (it would
  otherwise reuse one's graphs for the other). Ratio as above; ``none`` is the plain-compiled
  copy without a profiler.
- compile time: the first training/inference step (compiles the forward and backward graphs)
  minus the second, in a fresh process per run, ``plain`` (no profiler) against ``traceprof``
  (the first, wait, step of a session), alternated. ``cold``: an empty Inductor cache
  (``TORCHINDUCTOR_CACHE_DIR`` a new directory); ``warm``: the same directory again, as a rerun
  of the same script finds it (a plain compile then hits the FX/AOTAutograd caches; the session
  salts the cache keys and compiles for real, reusing only the compiled C++ kernels).

    python scripts/bench_capture_overhead.py --compiled --size small --models gpt resnet18 --modes train
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import traceprof.capture as capture
from traceprof.capture import sample_models as sm

# Input sizes per ``--size``: "standard" is what the models are built for (ImageNet images, the
# GPT-2 small configuration at batch 1); "small" shrinks the work per module call so that the
# fixed cost of a scope weighs most: a stress test of the per-call overhead.
SIZES = {
    "standard": {"resnet18": (1, 224), "gpt": (1, 256)},
    "small": {"resnet18": (2, 64), "gpt": (2, 128)},
}


def _own_forward(model: torch.nn.Module, tag: str) -> None:
    """Give ``model`` a subclass whose ``forward`` is a new code object (its own Dynamo cache)."""
    cls = type(model)
    f = cls.forward
    code = f.__code__.replace(co_name=f"{f.__code__.co_name}_{tag}")
    forward = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    model.__class__ = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__})


def make_step(
    name: str, mode: str, size: str = "standard", compile_as: str | None = None
) -> tuple[torch.nn.Module, Callable[[], None]]:
    """``(model to profile, step function)``; ``compile_as``: ``torch.compile(model)`` with a
    ``forward`` of its own, tagged ``compile_as``."""
    torch.manual_seed(0)
    batch, extent = SIZES[size][name]
    model: torch.nn.Module
    runner: torch.nn.Module
    if name == "resnet18":
        model = runner = sm.ResNet18(num_classes=1000)
        x = torch.randn(batch, 3, extent, extent)
        y = torch.randint(0, 1000, (batch,))

        def forward():
            return runner(x)

        def loss_of(out):
            return F.cross_entropy(out, y)
    elif name == "gpt":
        config = sm.GPTConfig.gpt2_small() if size == "standard" else sm.GPTConfig()
        model = runner = sm.GPT(config)
        idx = torch.randint(0, config.vocab_size, (batch, extent))
        targets = torch.roll(idx, -1, dims=1)

        def forward():
            return runner(idx)

        def loss_of(out):
            return F.cross_entropy(out.flatten(0, 1), targets.flatten())
    else:
        raise ValueError(name)
    if compile_as is not None:
        _own_forward(model, compile_as)
        runner = torch.compile(model)

    if mode == "infer":
        model.eval()

        def step() -> None:
            with torch.no_grad():
                forward()

        return runner, step

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> None:
        loss_of(forward()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return runner, step


def timed_steps(
    kind: str,
    model: torch.nn.Module,
    step: Callable[[], None],
    active: int,
    logdir: str,
    compiled_check: list[bool] | None = None,
) -> list[tuple[float, float]]:
    """``(wall, thread CPU)`` seconds of each active step (step function only)."""
    from torch.profiler import ProfilerActivity, schedule

    times: list[tuple[float, float]] = []
    total = 2 + active  # wait 1, warmup 1, active

    def loop(prof) -> None:
        for i in range(total):
            t0, c0 = time.perf_counter(), time.thread_time()
            step()
            t1, c1 = time.perf_counter(), time.thread_time()
            if i >= 2:
                times.append((t1 - t0, c1 - c0))
            if prof is not None:
                prof.step()

    if kind == "none":
        loop(None)
    elif kind == "torch":
        with torch.profiler.profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
            on_trace_ready=lambda p: None,
            record_shapes=True,
            with_flops=True,
        ) as prof:
            loop(prof)
    elif kind in ("traceprof", "memory"):  # memory: profile_memory=True as well
        with capture.profile(
            model, logdir=logdir, wait=1, warmup=1, active=active, profile_memory=kind == "memory"
        ) as prof:
            loop(prof)
        for path in prof.trace_paths:
            if compiled_check is not None:
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    compiled_check.append("traceprof_compiled" in json.load(f))
            os.remove(path)
    else:
        raise ValueError(kind)
    return times


def bench_model(
    name: str, mode: str, size: str, repeats: int, active: int, logdir: str, memory: bool = False
) -> dict:
    """Per clock (wall, cpu): median step time per kind and traceprof/torch ratios per repeat;
    ``memory``: also ``traceprof.capture.profile(..., profile_memory=True)`` and its ratios to
    traceprof without it (``memory_ratios``)."""
    model, step = make_step(name, mode, size)
    kinds = ["none", "torch", "traceprof"] + (["memory"] if memory else [])
    for kind in kinds:  # warm up every path once (allocator, profiler init, hooks)
        timed_steps(kind, model, step, 2, logdir)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    ratios: dict[int, list[float]] = {0: [], 1: []}
    memory_ratios: dict[int, list[float]] = {0: [], 1: []}
    for r in range(repeats):
        order = kinds if r % 2 == 0 else kinds[::-1]
        run = {kind: timed_steps(kind, model, step, active, logdir) for kind in order}
        for kind in kinds:
            samples[kind].extend(run[kind])
        for clock in (0, 1):
            traced = statistics.median(t[clock] for t in run["traceprof"])
            ratios[clock].append(traced / statistics.median(t[clock] for t in run["torch"]))
            if memory:
                memory_ratios[clock].append(statistics.median(t[clock] for t in run["memory"]) / traced)
    return {
        "median": {(k, c): statistics.median(t[c] for t in v) for k, v in samples.items() for c in (0, 1)},
        "ratios": ratios,
        "memory_ratios": memory_ratios,
        "calls": _calls_per_step(model, step),
    }


def bench_compiled_model(name: str, mode: str, size: str, repeats: int, active: int, logdir: str) -> dict:
    """Like :func:`bench_model` for ``torch.compile(model)``: two copies with their own graphs,
    ``none`` and ``torch`` running the plain-compiled one, ``traceprof`` the one compiled inside
    a session (its first session, the warm-up run, compiles and records it)."""
    plain = make_step(name, mode, size, compile_as="plain")
    traced = make_step(name, mode, size, compile_as="traceprof")
    runs = {"none": plain, "torch": plain, "traceprof": traced}
    kinds = list(runs)
    recorded: list[bool] = []
    for kind in kinds:  # compiles both copies; warms up every path
        timed_steps(kind, *runs[kind], 2, logdir, recorded)
    if recorded != [True]:
        raise RuntimeError(f"the session did not embed the compiled table: {recorded}")
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    ratios: dict[int, list[float]] = {0: [], 1: []}
    for r in range(repeats):
        order = kinds if r % 2 == 0 else kinds[::-1]
        run = {kind: timed_steps(kind, *runs[kind], active, logdir) for kind in order}
        for kind in kinds:
            samples[kind].extend(run[kind])
        for clock in (0, 1):
            ratios[clock].append(
                statistics.median(t[clock] for t in run["traceprof"])
                / statistics.median(t[clock] for t in run["torch"])
            )
    return {
        "median": {(k, c): statistics.median(t[c] for t in v) for k, v in samples.items() for c in (0, 1)},
        "ratios": ratios,
    }


def compile_child(kind: str, name: str, mode: str, size: str) -> dict[str, float]:
    """In a fresh process: seconds of the first and the second step of ``torch.compile(model)``,
    plain (``kind="plain"``) or as the first (wait) steps of a traceprof session."""
    model, step = make_step(name, mode, size, compile_as=kind)
    times = []
    with tempfile.TemporaryDirectory(prefix="traceprof-bench-") as logdir:
        if kind == "traceprof":
            with capture.profile(model, logdir=logdir, wait=2, warmup=0, active=1) as prof:
                for _ in range(2):
                    t0 = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - t0)
                    prof.step()
                table = prof.compiled_table()
                if not table or not table["graphs"]:
                    raise RuntimeError("nothing recorded")
                step()  # the active step: writes the trace
                prof.step()
        else:
            for _ in range(2):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
    return {"first": times[0], "second": times[1]}


def bench_compile_time(name: str, mode: str, size: str, repeats: int, threads: int) -> dict[str, list[float]]:
    """Compile seconds (first step - second step) per ``<kind>/<cold|warm>``, one process each."""
    result: dict[str, list[float]] = {}
    kinds = ["plain", "traceprof"]
    for r in range(repeats):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            with tempfile.TemporaryDirectory(prefix="traceprof-inductor-") as cache:
                for state in ("cold", "warm"):  # the same cache directory, first empty
                    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
                    out = subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--compile-child", kind]
                        + ["--models", name, "--modes", mode, "--size", size, "--threads", str(threads)],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                    times = json.loads(out.strip().splitlines()[-1])
                    result.setdefault(f"{kind}/{state}", []).append(times["first"] - times["second"])
    return result


def main_compiled(args: argparse.Namespace) -> int:
    print(f"torch.compile(model), size {args.size}: {SIZES[args.size]}; torch {torch.__version__},")
    print(
        f"{torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs; step time: {args.repeats} repeats x"
        f" {args.active} active steps per kind, kinds alternated; ratio = traceprof/torch, median over"
        " repeats [min..max]"
    )
    print(f"{'model':9} {'mode':5} {'clock':5} {'none':>8} {'torch':>8} {'traceprof':>9} {'ratio':>21}")
    with tempfile.TemporaryDirectory(prefix="traceprof-bench-") as logdir:
        for name in args.models:
            for mode in args.modes:
                r = bench_compiled_model(name, mode, args.size, args.repeats, args.active, logdir)
                med = r["median"]
                for clock, label in ((0, "wall"), (1, "cpu")):
                    ratios = r["ratios"][clock]
                    print(
                        f"{name:9} {mode:5} {label:5} {med['none', clock] * 1e3:8.2f}"
                        f" {med['torch', clock] * 1e3:8.2f} {med['traceprof', clock] * 1e3:9.2f}"
                        f" {statistics.median(ratios):6.3f} [{min(ratios):.3f}..{max(ratios):.3f}]",
                        flush=True,
                    )
    if args.compile_repeats <= 0:
        return 0
    print(
        f"\ncompile time, s (first step - second step), median of {args.compile_repeats} fresh processes"
        " per kind [min..max]; ratio = traceprof/plain of the medians"
    )
    print(f"{'model':9} {'mode':5} {'cache':5} {'plain':>17} {'traceprof':>17} {'ratio':>6}")
    for name in args.models:
        for mode in args.modes:
            t = bench_compile_time(name, mode, args.size, args.compile_repeats, args.threads)
            for state in ("cold", "warm"):
                plain, traced = t[f"plain/{state}"], t[f"traceprof/{state}"]

                def cell(v: list[float]) -> str:
                    return f"{statistics.median(v):5.1f} [{min(v):.1f}..{max(v):.1f}]"

                print(
                    f"{name:9} {mode:5} {state:5} {cell(plain):>17} {cell(traced):>17}"
                    f" {statistics.median(traced) / statistics.median(plain):6.2f}",
                    flush=True,
                )
    return 0


def _calls_per_step(model: torch.nn.Module, step: Callable[[], None]) -> int:
    count = [0]

    def hook(*_):
        count[0] += 1

    handles = [m.register_forward_pre_hook(hook) for m in model.modules()]
    try:
        step()
    finally:
        for h in handles:
            h.remove()
    return count[0]


def bench_scope_kinds(n: int = 20000) -> dict[str, float]:
    """Microseconds per scope (enter + exit) under an active CPU profiler."""
    from torch.profiler import ProfilerActivity

    from traceprof.capture.scopes import _OpsRecord

    kinds: dict[str, Callable[[str], object]] = {
        "record_function (torch.profiler)": torch.profiler.record_function,
        "record_function ops (traceprof fallback)": _OpsRecord,
    }
    fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    if fast is not None:
        kinds["_RecordFunctionFast (traceprof default)"] = fast
    result: dict[str, float] = {}
    name = "[traceprof:1]Linear: transformer.h.0.attn.c_attn"
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True):
        for label, make in kinds.items():
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(n):
                    rec = make(name)
                    rec.__enter__()
                    rec.__exit__(None, None, None)
                best = min(best, (time.perf_counter() - t0) / n * 1e6)
            result[label] = best
    return result


def bench_call_cost(n_modules: int = 200, iters: int = 200) -> dict[str, float]:
    """Microseconds per module call of a chain of ``nn.Identity``, best of ``iters`` forwards.

    Isolates the per-call cost of the hooks (Python hook dispatch in ``Module.__call__`` plus one
    scope) from the model's own work; best-of is robust to a busy machine.
    """
    from torch.profiler import ProfilerActivity, schedule

    model = torch.nn.Sequential(*(torch.nn.Identity() for _ in range(n_modules)))
    x = torch.zeros(1)
    result: dict[str, float] = {}

    def best(prof) -> float:
        low = float("inf")
        for _ in range(iters):
            t0 = time.perf_counter()
            model(x)
            low = min(low, time.perf_counter() - t0)
        if prof is not None:
            prof.step()
        return low / (n_modules + 1) * 1e6

    result["no profiler"] = best(None)
    with torch.profiler.profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=1),
        on_trace_ready=lambda p: None,
        record_shapes=True,
        with_flops=True,
    ) as prof:
        prof.step()  # into the active step
        result["torch.profiler, no scopes"] = best(prof)
    with tempfile.TemporaryDirectory(prefix="traceprof-bench-") as logdir:
        with capture.profile(model, logdir=logdir, wait=0, warmup=1, active=1) as prof:
            prof.step()
            model(x)  # the first active call records shapes; not timed
            result["traceprof.capture.profile"] = best(prof)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "gpt"], choices=("resnet18", "gpt"))
    parser.add_argument("--modes", nargs="+", default=["train", "infer"], choices=("train", "infer"))
    parser.add_argument(
        "--size",
        choices=tuple(SIZES),
        default="standard",
        help="standard: ResNet-18 on 1x3x224x224, GPT-2 small (124M) on 1x256"
        " tokens; small: ResNet-18 on 2x3x64x64, a 4-layer 256-wide GPT on"
        " 2x128 tokens (stresses the per-call cost)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--active", type=int, default=8)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1 is steadier on a busy machine)"
    )
    parser.add_argument(
        "--compiled", action="store_true", help="torch.compile(model): step time and compile time"
    )
    parser.add_argument(
        "--compile-repeats", type=int, default=3, help="--compiled: fresh processes per kind for compile time"
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also traceprof with profile_memory=True: its step time and ratio to traceprof without",
    )
    parser.add_argument("--compile-child", choices=("plain", "traceprof"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    torch.set_num_threads(args.threads)
    if args.compile_child:
        print(json.dumps(compile_child(args.compile_child, args.models[0], args.modes[0], args.size)))
        return 0
    if args.compiled:
        return main_compiled(args)
    print(f"size {args.size}: {SIZES[args.size]} (batch, image side or tokens)")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs,"
        f" {args.repeats} repeats x {args.active} active steps per kind, kinds alternated"
    )
    print(
        "median step time of the step function in ms, by wall clock and by the CPU time of the"
        " calling thread\n(steadier on a shared machine; with 1 thread it holds forward and"
        " backward); ratio = traceprof/torch,\nmedian over repeats [min..max];"
        " us/call = extra per module call from the medians"
    )
    if args.memory:
        print(
            "memory = traceprof with profile_memory=True; mem ratio = memory/traceprof, median over repeats"
        )
    print(
        f"{'model':9} {'mode':5} {'calls':>5} {'clock':5} {'none':>8} {'torch':>8}"
        f" {'traceprof':>9} {'ratio':>21} {'us/call':>7}"
        + (f" {'memory':>9} {'mem ratio':>21}" if args.memory else "")
    )
    with tempfile.TemporaryDirectory(prefix="traceprof-bench-") as logdir:
        for name in args.models:
            for mode in args.modes:
                r = bench_model(name, mode, args.size, args.repeats, args.active, logdir, args.memory)
                med = r["median"]
                for clock, label in ((0, "wall"), (1, "cpu")):
                    ratios = r["ratios"][clock]
                    per_call = (med["traceprof", clock] - med["torch", clock]) / r["calls"] * 1e6
                    memory = ""
                    if args.memory:  # traceprof with profile_memory=True, and its ratio to without
                        m = r["memory_ratios"][clock]
                        memory = (
                            f" {med['memory', clock] * 1e3:9.2f} {statistics.median(m):6.3f}"
                            f" [{min(m):.3f}..{max(m):.3f}]"
                        )
                    print(
                        f"{name:9} {mode:5} {r['calls']:5d} {label:5} "
                        f"{med['none', clock] * 1e3:8.2f} {med['torch', clock] * 1e3:8.2f} "
                        f"{med['traceprof', clock] * 1e3:9.2f} {statistics.median(ratios):6.3f}"
                        f" [{min(ratios):.3f}..{max(ratios):.3f}] {per_call:7.1f}{memory}",
                        flush=True,
                    )
    print("\ncost per module call, chain of nn.Identity, best of 200 forwards, us")
    for label, us in bench_call_cost().items():
        print(f"  {label:42} {us:6.2f}")
    print("\ncost of one scope (enter + exit) under an active profiler, best of 3, us")
    for label, us in bench_scope_kinds().items():
        print(f"  {label:42} {us:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
