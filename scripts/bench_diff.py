#!/usr/bin/env python3
"""Benchmark ``traceprof diff A B`` against one ``traceprof analyze A``; target: at most 2.2x.

Not a test. For two large synthetic traces (``scripts/gen_large_trace.py``, seeds 0 and 1:
the same model, different kernel times; generated when missing) it runs, alternating, after one
untimed read of both files to warm the page cache:

* analyze: a fresh ``python -m traceprof analyze A -f json -o /dev/null``;
* diff: a fresh ``python -m traceprof diff A B -f json -o /dev/null`` (both traces analyzed in
  two worker processes at once when the machine has two CPUs or more);

``--repeat`` times each. Each child's wall time (start to exit, interpreter start-up included)
and peak RSS (``os.wait4``) are recorded; the table shows best and median of each and the
diff/analyze ratio of the medians, against the target. Exit status 1 when the ratio is over it
(or a command fails).

Usage::

    python scripts/bench_diff.py                                  # /work/bench_data, 520 MB each
    python scripts/bench_diff.py --data /tmp/bench --size-mb 20 --repeat 1   # a quick sanity run
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_RATIO = 2.2


def ensure_trace(path: str, size_mb: float, seed: int) -> None:
    if os.path.exists(path):
        return
    print(f"generating {path} ({size_mb:g} MB, seed {seed}) ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "gen_large_trace.py"),
            "--out",
            path,
            "--target-mb",
            str(size_mb),
            "--seed",
            str(seed),
        ],
        check=True,
    )


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run(cmd: list[str], timeout: float) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in MB, exit status, stderr tail) of one child."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TRACEPROF_PROGRESS": "never"},
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    wall = time.perf_counter() - t
    # the child has been reaped by communicate(); its rusage is in RUSAGE_CHILDREN (max so far)
    import resource

    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, rss_mb, proc.returncode, err.decode(errors="replace")[-500:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default="/work/bench_data", help="where the traces are (made)")
    ap.add_argument("--size-mb", type=float, default=520.0, help="size of each trace (default 520)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (default 3)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    os.makedirs(a.data, exist_ok=True)
    tag = f"{a.size_mb:g}mb"
    base = os.path.join(a.data, f"diff_base_{tag}.json")
    new = os.path.join(a.data, f"diff_new_{tag}.json")
    ensure_trace(base, a.size_mb, 0)
    ensure_trace(new, a.size_mb, 1)
    for p in (base, new):
        warm(p)
    commands = {
        "analyze A": [a.python, "-m", "traceprof", "analyze", base, "-f", "json", "-o", os.devnull],
        "diff A B": [a.python, "-m", "traceprof", "diff", base, new, "-f", "json", "-o", os.devnull],
    }
    times: dict[str, list[float]] = {k: [] for k in commands}
    failed = False
    for i in range(a.repeat):
        for name, cmd in commands.items():
            wall, _, status, err = run(cmd, a.timeout)
            print(
                f"  run {i + 1}/{a.repeat} {name}: {wall:.2f} s"
                + (f"  FAILED (exit {status}): {err.strip()}" if status else ""),
                flush=True,
            )
            failed |= status != 0
            times[name].append(wall)
    sizes = " + ".join(f"{os.path.getsize(p) / 1e6:.0f} MB" for p in (base, new))
    print()
    print(f"traces: {base} + {new} ({sizes}); {os.cpu_count()} CPUs; repeat {a.repeat}")
    print(f"{'command':<12} {'best s':>8} {'median s':>9}")
    for name, ts in times.items():
        print(f"{name:<12} {min(ts):>8.2f} {statistics.median(ts):>9.2f}")
    ratio = statistics.median(times["diff A B"]) / statistics.median(times["analyze A"])
    ok = ratio <= TARGET_RATIO and not failed
    print(
        f"{'ratio':<12} {'':>8} {ratio:>8.2f}x  (diff / analyze, medians; target <= "
        f"{TARGET_RATIO}x: {'met' if ok else 'NOT met'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
