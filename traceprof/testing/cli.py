"""The generator's command line (``python scripts/gen_large_trace.py``): one trace, or with
``--ranks`` a job of one trace per rank; options in ``--help`` and the package's docstring."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

from traceprof.testing.assembly import generate, generate_job
from traceprof.testing.checks import validate

#: the first line of ``--help``
DESCRIPTION = "Generate a large, realistic synthetic Kineto trace of GPT training, for benchmarks and tests."


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (1: --validate found problems)."""
    ap = argparse.ArgumentParser(
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", required=True, help="output path, .json or .json.gz")
    ap.add_argument(
        "--target-mb",
        type=float,
        default=520.0,
        help="uncompressed size to reach, in MB (10^6 bytes); default 520",
    )
    ap.add_argument("--steps", type=int, default=None, help="exact number of steps (overrides --target-mb)")
    ap.add_argument("--layers", type=int, default=24, help="transformer blocks (default 24)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--validate", action="store_true", help="re-read the file and check its invariants")
    ap.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="write a job of N ranks (distributedInfo) into the directory --out",
    )
    ap.add_argument("--slow-rank", type=int, default=None, help="job: the straggler rank")
    ap.add_argument(
        "--slow-module",
        default="transformer.h.1.mlp.c_fc",
        help="job: the module that is slow on --slow-rank",
    )
    ap.add_argument(
        "--slow-factor",
        type=float,
        default=3.0,
        help="job: how much longer its kernels run there (default 3)",
    )
    ap.add_argument("--gz", action="store_true", help="job: gzip the traces")
    a = ap.parse_args(argv)
    if a.ranks:
        t = time.perf_counter()
        paths = generate_job(
            a.out,
            ranks=a.ranks,
            slow_rank=a.slow_rank,
            slow_module=a.slow_module,
            slow_factor=a.slow_factor,
            gz=a.gz,
            seed=a.seed,
            target_mb=a.target_mb,
            steps=a.steps,
            layers=a.layers,
            quiet=True,
        )
        size = sum(os.path.getsize(p) for p in paths)
        print(
            f"wrote {len(paths)} ranks to {a.out}: {size / 1e6:.1f} MB on disk in "
            f"{time.perf_counter() - t:.1f} s"
        )
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    exp = generate(a.out, target_mb=a.target_mb, steps=a.steps, layers=a.layers, seed=a.seed)
    size = os.path.getsize(a.out)
    print(
        f"wrote {a.out}: {size / 1e6:.1f} MB on disk, {exp['uncompressed_bytes'] / 1e6:.1f} MB JSON, "
        f"{exp['events']} events in {exp['generation_seconds']} s"
    )
    print(
        f"  steps {exp['steps']}, kernels {exp['kernels']} ({exp['kernels_per_step']}/step), "
        f"module scopes {exp['module_scopes']} ({exp['module_scopes_per_step']}/step), "
        f"memcpy {exp['gpu_memcpy']}, memset {exp['gpu_memset']}, cpu_ops {exp['cpu_ops']}"
    )
    print(f"  expectations: {a.out}.expect.json")
    if a.validate:
        problems = validate(a.out, exp)
        for p in problems[:20]:
            print("PROBLEM:", p)
        if problems:
            return 1
        print("validation OK")
    return 0
