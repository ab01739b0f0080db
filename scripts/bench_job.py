#!/usr/bin/env python3
"""Benchmark of job analysis (docs/jobs.md): a job of N generated ranks (default 16 traces of at
least 50 MB of JSON each, scripts/gen_large_trace.py --ranks), analyzed by the command line

1. one trace alone (``traceprof analyze RANK0 --jobs 1``: decoded and analyzed by one process,
   as each worker of a job does): the reference for wall time and memory;
2. the job with ``--jobs 1`` (one trace after the other, in the command's process);
3. the job with ``--jobs 2`` (a local pool of 2 worker processes);
4. the job with ``--engine dask --jobs 2`` (a Dask LocalCluster of 2 worker processes, started
   and stopped by the command: its start-up is counted).

Each run is a fresh process; its peak memory is the largest sum of the proportional set size
(PSS: resident memory with each shared page divided among the processes that map it, so that
libraries mapped by every worker count once) of the command and all its child processes
(workers), sampled every 100 ms with psutil. Every run is
repeated ``--repeat`` times and the fastest is kept (its memory is the largest seen). The job
report of every engine is checked to be identical. The table ends with the issue's targets:
``--jobs 2`` / ``--jobs 1`` wall <= 0.6 on 2 cores, peak memory <= 2.5x one trace's analysis,
Dask within 1.3x of the local pool.

Usage::

    python scripts/bench_job.py                                  # 16 x 50 MB in /work/bench_data/job16
    python scripts/bench_job.py --data DIR --ranks 16 --target-mb 50 --repeat 1

The traces are generated once into ``--data`` (kept for the next run; ``--regenerate`` writes
them again). Needs psutil (installed with Dask) and the dask extra for the Dask row.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import psutil

# the checkout's package (traceprof.testing generates the traces), also when it is not installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def generate(data: str, ranks: int, target_mb: float, layers: int) -> list[str]:
    """The job's traces, generated unless a previous run left them (same parameters)."""
    from traceprof.testing import generate_job

    marker = os.path.join(data, "bench_job.params")
    params = {
        "ranks": ranks,
        "target_mb": target_mb,
        "layers": layers,
        "slow_rank": ranks // 2,
        "slow_module": "transformer.h.1.mlp.c_fc",
    }
    if os.path.exists(marker):
        with open(marker) as f:
            saved = json.load(f)
        if saved.get("params") == params and all(os.path.exists(p) for p in saved["paths"]):
            return saved["paths"]
    print(f"generating {ranks} traces of {target_mb:g} MB into {data} ...", file=sys.stderr)
    t = time.perf_counter()
    paths = generate_job(
        data,
        ranks=ranks,
        slow_rank=params["slow_rank"],
        slow_module=params["slow_module"],
        slow_factor=3.0,
        target_mb=target_mb,
        layers=layers,
        quiet=True,
    )
    with open(marker, "w") as f:
        json.dump({"params": params, "paths": paths}, f)
    print(f"  done in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return paths


def run(cmd: list[str]) -> tuple[float, int, bytes]:
    """Wall seconds, peak memory (PSS) of the process tree in bytes, standard output."""
    env = {**os.environ, "TRACEPROF_PROGRESS": "never"}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = 0
    done = threading.Event()
    out: list[bytes] = []

    def read():
        out.append(proc.stdout.read())
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            total = 0
            for p in tree:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            peak = max(peak, total)
        except psutil.Error:
            pass
        time.sleep(0.1)
    wall = time.perf_counter() - t
    done.wait()
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err}")
    return wall, peak, out[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data",
        default="/work/bench_data/job16",
        help="directory of the generated job (outside the repository)",
    )
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--target-mb", type=float, default=50.0, help="JSON MB per trace (>= 50)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2, help="runs per row; the fastest is kept")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--no-dask", action="store_true", help="leave out the Dask row")
    a = ap.parse_args(argv)
    if a.regenerate and os.path.exists(os.path.join(a.data, "bench_job.params")):
        os.remove(os.path.join(a.data, "bench_job.params"))
    paths = generate(a.data, a.ranks, a.target_mb, a.layers)
    sizes = [os.path.getsize(p) for p in paths]
    cli = [sys.executable, "-m", "traceprof", "analyze"]
    rows = [
        ("one trace (rank 0)", cli + [paths[0], "--jobs", "1"]),
        ("job --jobs 1", cli + [a.data, "--jobs", "1"]),
        ("job --jobs 2", cli + [a.data, "--jobs", "2"]),
    ]
    if not a.no_dask:
        rows.append(("job --engine dask --jobs 2", cli + [a.data, "--engine", "dask", "--jobs", "2"]))
    results = {}
    reports = {}
    for name, cmd in rows:
        best = None
        for _ in range(a.repeat):
            wall, peak, out = run(cmd)
            best = (wall, peak) if best is None else (min(best[0], wall), max(best[1], peak))
        results[name] = best
        # the job reports must be identical but for the engine's name
        text = out.decode().replace("analyzed by the dask engine", "analyzed by the local engine")
        reports[name] = hashlib.sha256(text.encode()).hexdigest()[:12]
        print(f"  {name}: {best[0]:.2f} s, {best[1] / 1e6:.0f} MB", file=sys.stderr)

    one_wall, one_mem = results["one trace (rank 0)"]
    j1_wall, _ = results["job --jobs 1"]
    j2_wall, j2_mem = results["job --jobs 2"]
    print()
    print(
        f"job: {len(paths)} ranks in {a.data}, {min(sizes) / 1e6:.0f} to {max(sizes) / 1e6:.0f} MB "
        f"of JSON each ({sum(sizes) / 1e9:.2f} GB in all); CPUs available: "
        f"{len(os.sched_getaffinity(0))}; best of {a.repeat}"
    )
    print()
    print(f"{'run':<30} {'wall s':>8} {'vs --jobs 1':>12} {'peak MB':>9} {'vs one trace':>13}  report")
    for name, (wall, peak) in results.items():
        print(
            f"{name:<30} {wall:>8.2f} {wall / j1_wall:>11.2f}x {peak / 1e6:>9.0f} "
            f"{peak / one_mem:>12.2f}x  {reports[name] if name.startswith('job') else ''}"
        )
    print()
    checks = [
        ("--jobs 2 / --jobs 1 wall <= 0.6", j2_wall / j1_wall, 0.6),
        ("--jobs 2 peak memory / one trace's <= 2.5", j2_mem / one_mem, 2.5),
    ]
    if "job --engine dask --jobs 2" in results:
        checks.append(
            (
                "Dask LocalCluster / local pool wall <= 1.3",
                results["job --engine dask --jobs 2"][0] / j2_wall,
                1.3,
            )
        )
    same = len({v for k, v in reports.items() if k.startswith("job")}) == 1
    for text, value, limit in checks:
        print(f"{text:<45} {value:6.2f}  {'met' if value <= limit else 'NOT met'}")
    print(f"{'job reports identical across engines':<45} {'yes' if same else 'NO'}")
    print(f"(one trace: {one_wall:.2f} s, {one_mem / 1e6:.0f} MB)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
