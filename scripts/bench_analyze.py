#!/usr/bin/env python3
"""Benchmark ``traceprof analyze`` against a bare ``orjson.loads`` of the same trace.

Not a test: it measures, side by side and in one run, for every trace file

* reference: a fresh Python that reads the file (``gzip.decompress`` when it is gzip, detected
  by its magic bytes like traceprof does) and ``orjson.loads`` it (``--ref-gc off`` runs it with
  ``gc.disable()``: on large traces the cyclic GC dominates a plain ``orjson.loads``);
* traceprof: a fresh ``python -m traceprof analyze PATH`` (stdout to /dev/null), run from the
  repository root;

``--repeat`` times each, alternating (ref, traceprof, ref, traceprof, ...), after one untimed
read of the file to warm the page cache. For each child it records the wall time (process start
to exit, interpreter start-up included) and its peak RSS, taken from ``os.wait4`` on that very
child (``ru_maxrss``), so every child is measured separately. It prints best and median time,
median peak RSS and the traceprof/orjson ratios. When ``traceprof analyze`` fails (exit status
not 0), the failure and the tail of its stderr are reported and the run goes on.

Usage::

    python scripts/bench_analyze.py                                  # default traces
    python scripts/bench_analyze.py --large /work/bench_out/large_trace.json --repeat 3
    python scripts/bench_analyze.py some.json.gz other.json --no-large --json results.json

Defaults: the 2021 ResNet-50 trace (/work/shared/traces/legacy_2021/...) and the large synthetic
trace given by ``--large`` (default ``bench_out/large_trace.json`` in the repository, ignored by
git), generated with ``scripts/gen_large_trace.py`` (``--large-mb``, default 520) when missing.
Only the standard library and orjson are used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = ["/work/shared/traces/legacy_2021/resnet50_v100_2021.pt.trace.json.gz"]
DEFAULT_LARGE = REPO / "bench_out" / "large_trace.json"

# The reference child: read, decompress when gzip, parse. Prints sizes as one JSON line.
REFERENCE = r"""
import gc, gzip, sys
import orjson
if sys.argv[2] == "off":
    gc.disable()
with open(sys.argv[1], "rb") as f:
    data = f.read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
doc = orjson.loads(data)
events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
sys.stdout.write(orjson.dumps({"json_bytes": len(data), "events": len(events)}).decode())
"""


def run_child(cmd, timeout, capture_stdout):
    """Run cmd; return wall seconds, peak RSS (MB) of that child, exit code, stdout, stderr tail."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=out if capture_stdout else subprocess.DEVNULL, stderr=err)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = rc = os.waitstatus_to_exitcode(status)   # already reaped
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace") if capture_stdout else ""
        stderr = err.read().decode(errors="replace")
    return {"wall_s": wall, "peak_mb": usage.ru_maxrss / 1024, "rc": rc,
            "stdout": stdout, "stderr_tail": stderr[-2000:], "timed_out": rc == -9 and wall >= timeout}


def warm_cache(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def ensure_large(path, target_mb):
    if Path(path).exists():
        return
    print(f"{path} missing: generating it ({target_mb} MB) with scripts/gen_large_trace.py ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_large_trace.py"), "--out", str(path),
                    "--target-mb", str(target_mb)], check=True)
    print(f"generated in {time.perf_counter() - t0:.1f} s", flush=True)


def bench_file(path, repeat, python, timeout, ref_gc="on"):
    warm_cache(path)
    ref_cmd = [python, "-c", REFERENCE, path, ref_gc]
    tp_cmd = [python, "-m", "traceprof", "analyze", path]
    ref, tp = [], []
    tp_failed = None
    for i in range(repeat):
        r = run_child(ref_cmd, timeout, capture_stdout=True)
        if r["rc"] != 0:
            raise SystemExit(f"reference parse of {path} failed (rc={r['rc']}):\n{r['stderr_tail']}")
        ref.append(r)
        print(f"  [{i + 1}/{repeat}] orjson    {r['wall_s']:8.2f} s  {r['peak_mb']:8.0f} MB", flush=True)
        if tp_failed is None:
            t = run_child(tp_cmd, timeout, capture_stdout=False)
            tp.append(t)
            state = "ok" if t["rc"] == 0 else ("TIMEOUT" if t["timed_out"] else f"FAILED rc={t['rc']}")
            print(f"  [{i + 1}/{repeat}] traceprof {t['wall_s']:8.2f} s  {t['peak_mb']:8.0f} MB  {state}",
                  flush=True)
            if t["rc"] != 0:
                tp_failed = t          # no point repeating a failing command
    sizes = orjson.loads(ref[0]["stdout"])
    res = {
        "file": path, "disk_bytes": os.path.getsize(path), **sizes,
        "orjson": summarize(ref),
        "traceprof": summarize(tp) if tp_failed is None else None,
        "traceprof_error": None if tp_failed is None else {
            "rc": tp_failed["rc"], "timed_out": tp_failed["timed_out"],
            "stderr_tail": tp_failed["stderr_tail"]},
        "samples": {"orjson": [strip(s) for s in ref], "traceprof": [strip(s) for s in tp]},
    }
    if res["traceprof"]:
        res["time_ratio"] = res["traceprof"]["best_s"] / res["orjson"]["best_s"]
        res["peak_ratio"] = res["traceprof"]["peak_mb"] / res["orjson"]["peak_mb"]
    return res


def summarize(samples):
    walls = [s["wall_s"] for s in samples]
    return {"best_s": min(walls), "median_s": statistics.median(walls),
            "peak_mb": statistics.median(s["peak_mb"] for s in samples),
            "peak_mb_max": max(s["peak_mb"] for s in samples), "runs": len(samples)}


def strip(s):
    return {k: s[k] for k in ("wall_s", "peak_mb", "rc")}


def print_table(results, ref_gc="on"):
    ref = "orjson" if ref_gc == "on" else "orjson gc-off"
    head = ("file", "JSON MB", f"{ref} s (best/med)", "traceprof s (best/med)", "t ratio",
            f"{ref} peak MB", "traceprof peak MB", "mem ratio")
    rows = []
    for r in results:
        o, t = r["orjson"], r["traceprof"]
        rows.append((
            os.path.basename(r["file"]), f"{r['json_bytes'] / 1e6:.1f}",
            f"{o['best_s']:.2f} / {o['median_s']:.2f}",
            f"{t['best_s']:.2f} / {t['median_s']:.2f}" if t else "FAILED",
            f"{r['time_ratio']:.2f}x" if t else "-",
            f"{o['peak_mb']:.0f}", f"{t['peak_mb']:.0f}" if t else "-",
            f"{r['peak_ratio']:.2f}x" if t else "-"))
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    line = lambda cells: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)   # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print()
    print(line(head))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
    for r in results:
        e = r["traceprof_error"]
        if e:
            why = "timed out" if e["timed_out"] else f"exit status {e['rc']}"
            print(f"\ntraceprof analyze {r['file']}: {why}; stderr tail:\n{e['stderr_tail'].rstrip()}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help=f"trace files (default: {' '.join(DEFAULT_TRACES)})")
    ap.add_argument("--large", default=str(DEFAULT_LARGE),
                    help="large synthetic trace, generated when missing (default: %(default)s)")
    ap.add_argument("--large-mb", type=float, default=520.0, help="size to generate it at (default 520)")
    ap.add_argument("--no-large", action="store_true", help="leave the large trace out")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command per file (default 3)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before a child is killed")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the children")
    ap.add_argument("--ref-gc", choices=("on", "off"), default="on",
                    help="Python's cyclic GC in the reference child (default on, as a plain script "
                         "has it; with it, orjson.loads of a large trace spends most of its time in "
                         "GC passes)")
    ap.add_argument("--json", metavar="OUT", help="save the results as JSON")
    a = ap.parse_args(argv)

    paths = list(a.traces or DEFAULT_TRACES)
    if not a.no_large:
        ensure_large(a.large, a.large_mb)
        paths.append(a.large)
    results = []
    for p in paths:
        print(f"{p} ({os.path.getsize(p) / 1e6:.1f} MB on disk)", flush=True)
        results.append(bench_file(p, a.repeat, a.python, a.timeout, a.ref_gc))
    print_table(results, a.ref_gc)
    if a.json:
        meta = {"python": a.python, "repeat": a.repeat, "reference_gc": a.ref_gc, "cpu_count": os.cpu_count(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        Path(a.json).write_bytes(orjson.dumps({"meta": meta, "results": results},
                                              option=orjson.OPT_INDENT_2))
        print(f"\nresults saved to {a.json}")
    return 1 if any(r["traceprof_error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
