#!/usr/bin/env python3
"""Benchmark ``traceprof analyze`` against a bare ``orjson.loads`` of the same trace.

Not a test: it measures, side by side and in one run, for every trace file

* reference: a fresh Python that reads the file (``gzip.decompress`` when it is gzip, detected
  by its magic bytes like traceprof does) and ``orjson.loads`` it (``--ref-gc off`` runs it with
  ``gc.disable()``: on large traces the cyclic GC dominates a plain ``orjson.loads``);
* traceprof: a fresh ``python -m traceprof analyze PATH`` (stdout to /dev/null), run from the
  repository root;

``--repeat`` times each, alternating (ref, traceprof, ref, traceprof, ...), after one untimed
read of the file to warm the page cache (and with the package's bytecode written, as an
install writes it). For each child it records the wall time (process start
to exit, interpreter start-up included) and its peak RSS, taken from ``os.wait4`` on that very
child (``ru_maxrss``), so every child is measured separately. It prints best and median time,
median peak RSS and the traceprof/orjson ratios. When ``traceprof analyze`` fails (exit status
not 0), the failure and the tail of its stderr are reported and the run goes on.

With ``--ingest`` it takes instead the figures of streaming, parallel ingest (docs/performance.md),
each a median of alternated runs, on traces it generates under ``--data-dir`` when missing
(``scripts/gen_large_trace.py``): a 1 GB trace against ``orjson.loads`` (wall and peak memory),
the 35 MB 2021 ResNet-50 trace against ``orjson.loads``, the whole ``traceprof analyze`` command
on a 1 MB trace against a bare ``python -c "import orjson"``, ``--jobs 2`` against ``--jobs 1``
on the 1 GB trace, and a 4 GB trace (wall, MB/s, peak memory; ``orjson.loads`` cannot hold it).
Peak memory there is the largest sum, over the process and its workers, of their proportional
set sizes (``Pss`` of /proc/PID/smaps_rollup, sampled every 20 ms): shared pages count once.

With ``--cache`` it takes the figures of the cache of decoded traces and analyses (first and
second looks at the 1 GB trace, at a real trace and a generated 58 MB one with a 2,000-node
module tree, a diff of two 1 GB traces with the baseline cached, a job of 64 ranks); see
:func:`cache_figures`.

Usage::

    python scripts/bench_analyze.py --cache --repeat 3                # the cache figures
    python scripts/bench_analyze.py --ingest --repeat 5              # the ingest figures
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
SHARED = REPO.parent / "shared" / "traces"

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


def run_child(cmd, timeout, capture_stdout, env=None):
    """Run cmd; return wall seconds, peak RSS (MB) of that child, exit code, stdout, stderr tail."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out if capture_stdout else subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = rc = os.waitstatus_to_exitcode(status)  # already reaped
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace") if capture_stdout else ""
        stderr = err.read().decode(errors="replace")
    return {
        "wall_s": wall,
        "peak_mb": usage.ru_maxrss / 1024,
        "rc": rc,
        "stdout": stdout,
        "stderr_tail": stderr[-2000:],
        "timed_out": rc == -9 and wall >= timeout,
    }


def warm_cache(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def ensure_large(path, target_mb):
    if Path(path).exists():
        return
    print(f"{path} missing: generating it ({target_mb} MB) with scripts/gen_large_trace.py ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "gen_large_trace.py"),
            "--out",
            str(path),
            "--target-mb",
            str(target_mb),
        ],
        check=True,
    )
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
            print(
                f"  [{i + 1}/{repeat}] traceprof {t['wall_s']:8.2f} s  {t['peak_mb']:8.0f} MB  {state}",
                flush=True,
            )
            if t["rc"] != 0:
                tp_failed = t  # no point repeating a failing command
    sizes = orjson.loads(ref[0]["stdout"])
    res = {
        "file": path,
        "disk_bytes": os.path.getsize(path),
        **sizes,
        "orjson": summarize(ref),
        "traceprof": summarize(tp) if tp_failed is None else None,
        "traceprof_error": None
        if tp_failed is None
        else {
            "rc": tp_failed["rc"],
            "timed_out": tp_failed["timed_out"],
            "stderr_tail": tp_failed["stderr_tail"],
        },
        "samples": {"orjson": [strip(s) for s in ref], "traceprof": [strip(s) for s in tp]},
    }
    if res["traceprof"]:
        res["time_ratio"] = res["traceprof"]["best_s"] / res["orjson"]["best_s"]
        res["peak_ratio"] = res["traceprof"]["peak_mb"] / res["orjson"]["peak_mb"]
    return res


def summarize(samples):
    walls = [s["wall_s"] for s in samples]
    return {
        "best_s": min(walls),
        "median_s": statistics.median(walls),
        "peak_mb": statistics.median(s["peak_mb"] for s in samples),
        "peak_mb_max": max(s["peak_mb"] for s in samples),
        "runs": len(samples),
    }


def strip(s):
    return {k: s[k] for k in ("wall_s", "peak_mb", "rc")}


def print_table(results, ref_gc="on"):
    ref = "orjson" if ref_gc == "on" else "orjson gc-off"
    head = (
        "file",
        "JSON MB",
        f"{ref} s (best/med)",
        "traceprof s (best/med)",
        "t ratio",
        f"{ref} peak MB",
        "traceprof peak MB",
        "mem ratio",
    )
    rows = []
    for r in results:
        o, t = r["orjson"], r["traceprof"]
        rows.append(
            (
                os.path.basename(r["file"]),
                f"{r['json_bytes'] / 1e6:.1f}",
                f"{o['best_s']:.2f} / {o['median_s']:.2f}",
                f"{t['best_s']:.2f} / {t['median_s']:.2f}" if t else "FAILED",
                f"{r['time_ratio']:.2f}x" if t else "-",
                f"{o['peak_mb']:.0f}",
                f"{t['peak_mb']:.0f}" if t else "-",
                f"{r['peak_ratio']:.2f}x" if t else "-",
            )
        )
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]

    def line(cells: list) -> str:
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

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


# -- ingest figures (--ingest) -------------------------------------------------------------------

IMPORT_ONLY = "import orjson"
#: children may write bytecode caches, as an installed package has them (the warm-up run writes
#: them): PYTHONDONTWRITEBYTECODE would have every run compile traceprof's sources again
#: the children's environment: the cache off unless a figure gives it a directory of its own
#: (the ingest figures are of a first look; served by the user's cache they timed its hits)
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
    "TRACEPROF_CACHE": "off"
}


def _tree_pss_kb(pid):
    """Proportional set size (kB) of a process and all its descendants."""
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_tree(cmd, timeout, env=None):
    """Run cmd; wall seconds and the peak of the summed PSS of its process tree (MB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env or CHILD_ENV,
    )
    peak = 0
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_pss_kb(proc.pid))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(map(str, cmd))} failed (exit {proc.returncode}):\n"
            f"{err.decode(errors='replace')[-2000:]}"
        )
    return wall, peak / 1024


def alternate(commands, repeat, timeout, label):
    """Each of ``commands`` (name -> argv) ``repeat`` times, alternated; medians per name."""
    walls = {name: [] for name in commands}
    peaks = {name: [] for name in commands}
    for i in range(repeat):
        for name, cmd in commands.items():
            w, m = run_tree(cmd, timeout)
            walls[name].append(w)
            peaks[name].append(m)
            print(f"  {label} [{i + 1}/{repeat}] {name:<18} {w:8.2f} s {m:9.0f} MB", flush=True)
    return {name: (statistics.median(walls[name]), statistics.median(peaks[name])) for name in commands}


def ensure_trace(path, mb):
    if path.exists():
        return
    print(f"generating {path} ({mb} MB) with scripts/gen_large_trace.py ...", flush=True)
    t0 = time.perf_counter()
    # one step of a 5-layer model is about 1 MB; larger ones by target size
    size = ["--steps", "1", "--layers", "5"] if mb <= 1 else ["--target-mb", str(mb)]
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_large_trace.py"), "--out", str(path), *size],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"  generated in {time.perf_counter() - t0:.0f} s", flush=True)


def ingest_figures(a):
    data = Path(a.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    py = a.python
    one_mb = data / "gpt_1mb.json"
    one_gb, four_gb = data / f"gpt_{a.gb_mb:g}mb.json", data / f"gpt_{a.four_gb_mb:g}mb.json"
    resnet = Path(DEFAULT_TRACES[0])
    sizes = {"1mb": 1, "1gb": a.gb_mb, "4gb": a.four_gb_mb}
    for path, key in ((one_mb, "1mb"), (one_gb, "1gb"), (four_gb, "4gb")):
        if key not in a.skip:
            ensure_trace(path, sizes[key])

    def tp(path, *extra):
        return [py, "-m", "traceprof", "analyze", str(path), *extra]

    def ref(path):
        return [py, "-c", REFERENCE, str(path), a.ref_gc]

    subprocess.run(
        [py, "-m", "traceprof", "--help"], cwd=REPO, env=CHILD_ENV, stdout=subprocess.DEVNULL, check=True
    )  # writes the bytecode caches
    rows = []  # (figure, measured, target, met)
    t = a.timeout
    if "1gb" not in a.skip:
        warm_cache(one_gb)
        r = alternate({"orjson.loads": ref(one_gb), "traceprof": tp(one_gb)}, a.repeat, t, "1 GB")
        (ow, om), (tw, tm) = r["orjson.loads"], r["traceprof"]
        mb = one_gb.stat().st_size / 1e6
        rows += [
            (
                f"{one_gb.name}: wall vs orjson.loads",
                f"{tw:.2f} s / {ow:.2f} s = {tw / ow:.2f}x ({mb / tw:.0f} MB/s)",
                "<= 0.35x",
                tw / ow <= 0.35,
            ),
            (
                f"{one_gb.name}: peak memory vs orjson.loads",
                f"{tm:.0f} MB / {om:.0f} MB = {tm / om:.2f}x",
                "<= 0.25x",
                tm / om <= 0.25,
            ),
        ]
        r = alternate(
            {"--jobs 1": tp(one_gb, "--jobs", "1"), "--jobs 2": tp(one_gb, "--jobs", "2")},
            a.repeat,
            t,
            "1 GB jobs",
        )
        (w1, _), (w2, _) = r["--jobs 1"], r["--jobs 2"]
        rows.append(
            (
                f"{one_gb.name}: --jobs 2 vs --jobs 1 wall",
                f"{w2:.2f} s / {w1:.2f} s = {w2 / w1:.2f}",
                "<= 0.65",
                w2 / w1 <= 0.65,
            )
        )
    if "resnet" not in a.skip:
        warm_cache(resnet)
        r = alternate({"orjson.loads": ref(resnet), "traceprof": tp(resnet)}, a.repeat, t, "resnet50 2021")
        (ow, _), (tw, _) = r["orjson.loads"], r["traceprof"]
        rows.append(
            (
                "35 MB resnet50_v100_2021: wall vs orjson.loads",
                f"{tw:.2f} s / {ow:.2f} s = {tw / ow:.2f}x",
                "<= 0.8x",
                tw / ow <= 0.8,
            )
        )
    if "1mb" not in a.skip:
        warm_cache(one_mb)
        run_tree(tp(one_mb), t)  # warm-up: bytecode caches, page cache
        r = alternate(
            {"python -c 'import orjson'": [py, "-c", IMPORT_ONLY], "traceprof analyze": tp(one_mb)},
            max(a.repeat, 5),
            t,
            "1 MB",
        )
        (sw, _), (tw, _) = r["python -c 'import orjson'"], r["traceprof analyze"]
        rows.append(
            (
                "1 MB: whole traceprof analyze command",
                f"{tw:.3f} s (bare start {sw:.3f} s)",
                "<= 0.35 s",
                tw <= 0.35,
            )
        )
    if "4gb" not in a.skip:
        r = alternate({"traceprof": tp(four_gb)}, max(1, min(a.repeat, 2)), t, "4 GB")
        tw, tm = r["traceprof"]
        mb = four_gb.stat().st_size / 1e6
        rows += [
            (f"{four_gb.name}: peak memory", f"{tm / 1024:.2f} GiB", "< 3 GiB", tm / 1024 < 3),
            (f"{four_gb.name}: wall, throughput", f"{tw:.1f} s, {mb / tw:.0f} MB/s", "(reported)", True),
        ]
    widths = [
        max(len(str(x[i])) for x in rows + [("figure", "measured (medians)", "target")]) for i in range(3)
    ]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(("figure", "measured (medians)", "target"), widths)) + "  met")
    print("  ".join("-" * w for w in widths) + "  ---")
    for fig, measured, target, met in rows:
        print(
            "  ".join(str(c).ljust(w) for c, w in zip((fig, measured, target), widths))
            + ("  yes" if met else "  NO")
        )
    return 0


def cache_figures(a):
    """The figures of the trace cache (docs/performance.md "The cache"): first and second looks,
    each the median of alternated runs; a "first" look starts from an empty cache directory (or
    one holding only what the figure says), a "second" from one the first filled."""
    import shutil

    data = Path(a.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    py, t = a.python, a.timeout
    scratch = Path(tempfile.mkdtemp(prefix="traceprof-bench-cache-"))
    one_gb, other_gb = data / f"gpt_{a.gb_mb:g}mb.json", data / f"gpt_{a.gb_mb:g}mb_seed2.json"
    deep = data / "gpt_deep_2000_modules.json"
    job = data / "job_64x5mb"
    resnet = SHARED / "module_tree" / "mi300_resnet_activation_checkpoint_training.json.gz"
    ensure_trace(one_gb, a.gb_mb)
    _generate(other_gb, "--target-mb", str(a.gb_mb), "--seed", "2")
    # 2 steps of a 165-block GPT: about 58 MB, 1,997 module nodes
    _generate(deep, "--steps", "2", "--layers", "165")
    _generate(job, "--ranks", "64", "--steps", "3", "--layers", "8", "--slow-rank", "5")  # 4.6 MB each
    subprocess.run(
        [py, "-m", "traceprof", "--help"], cwd=REPO, env=CHILD_ENV, stdout=subprocess.DEVNULL, check=True
    )

    runs = iter(range(10**9))

    def env_with(directory):
        return {**CHILD_ENV, "TRACEPROF_CACHE": str(directory)}

    def fresh(prefill=()):
        d = scratch / f"c{next(runs)}"
        d.mkdir()
        for entry in prefill:
            shutil.copy(entry, d)
        return d

    def analyze(*args):
        return [py, "-m", "traceprof", "analyze", *map(str, args)]

    def measure(label, commands):
        """commands: name -> () -> (argv, env), called before each run (a fresh directory)."""
        walls = {n: [] for n in commands}
        peaks = {n: [] for n in commands}
        for i in range(a.repeat):
            for name, make in commands.items():
                cmd, env = make()
                w, m = run_tree(cmd, t, env)
                walls[name].append(w)
                peaks[name].append(m)
                print(f"  {label} [{i + 1}/{a.repeat}] {name:<22} {w:8.3f} s {m:9.0f} MB", flush=True)
        return {n: (statistics.median(walls[n]), statistics.median(peaks[n])) for n in commands}

    def warmed(*traces_and_args):
        d = fresh()
        run_tree(analyze(*traces_and_args), t, env_with(d))
        return d

    rows = []
    want = set(a.cache_figures)
    if "1gb" in want:  # 1 GB: first look (empty cache), second look, orjson.loads
        warm_cache(one_gb)
        w1 = warmed(one_gb)
        r = measure(
            "1 GB",
            {
                "orjson.loads": lambda: ([py, "-c", REFERENCE, str(one_gb), a.ref_gc], None),
                "first (empty cache)": lambda: (analyze(one_gb), env_with(fresh())),
                "second (cache warm)": lambda: (analyze(one_gb), env_with(w1)),
            },
        )
        (ow, om), (fw, _), (sw, sm) = r["orjson.loads"], r["first (empty cache)"], r["second (cache warm)"]
        rows += [
            (
                "1 GB: second look vs first",
                f"{sw:.3f} s / {fw:.2f} s = {sw / fw:.3f}x",
                "<= 0.05x",
                sw / fw <= 0.05,
            ),
            (
                "1 GB: second look vs orjson.loads",
                f"{sw:.3f} s / {ow:.2f} s = {sw / ow:.3f}x",
                "<= 0.05x",
                sw / ow <= 0.05,
            ),
            (
                "1 GB: second look peak memory vs orjson.loads",
                f"{sm:.0f} MB / {om:.0f} MB = {sm / om:.3f}x",
                "<= 0.1x",
                sm / om <= 0.1,
            ),
        ]
    # second looks of a real trace and of the deep generated one; the deep one's first look
    for name, path in (
        (("mi300 resnet (real)", resnet), ("deep tree, 58 MB", deep)) if "second" in want else ()
    ):
        warm_cache(path)
        d = warmed(path)
        cmds = {"second (cache warm)": lambda path=path, d=d: (analyze(path), env_with(d))}
        if path == deep:
            cmds["first (empty cache)"] = lambda: (analyze(deep), env_with(fresh()))
            cmds["orjson.loads"] = lambda: ([py, "-c", REFERENCE, str(deep), a.ref_gc], None)
        r = measure(name, cmds)
        sw, _ = r["second (cache warm)"]
        rows.append((f"{name}: second look, whole command", f"{sw:.3f} s", "<= 0.25 s", sw <= 0.25))
        if path == deep:
            (fw, _), (ow, _) = r["first (empty cache)"], r["orjson.loads"]
            rows.append(
                (
                    f"{name}: first look vs orjson.loads",
                    f"{fw:.3f} s / {ow:.3f} s = {fw / ow:.2f}x",
                    "<= 0.8x",
                    fw / ow <= 0.8,
                )
            )
    if "diff" in want:
        # diff of two 1 GB traces: none cached, against the baseline's entries in the cache (what
        # an earlier diff against the same baseline leaves there)
        base_only = fresh()
        run_tree([py, "-m", "traceprof", "diff", str(one_gb), str(one_gb)], t, env_with(base_only))
        base_entries = list(base_only.glob("*.tpc"))
        warm_cache(other_gb)
        r = measure(
            "diff 2 x 1 GB",
            {
                "uncached": lambda: (
                    [py, "-m", "traceprof", "diff", str(one_gb), str(other_gb), "--no-cache"],
                    None,
                ),
                "baseline cached": lambda: (
                    [py, "-m", "traceprof", "diff", str(one_gb), str(other_gb)],
                    env_with(fresh(base_entries)),
                ),
            },
        )
        (uw, _), (cw, _) = r["uncached"], r["baseline cached"]
        rows.append(
            (
                "diff of two 1 GB traces: baseline cached vs uncached",
                f"{cw:.2f} s / {uw:.2f} s = {cw / uw:.2f}x",
                "<= 0.55x",
                cw / uw <= 0.55,
            )
        )
    if "job" in want:  # a job of 64 ranks
        wj = warmed(job)
        r = measure(
            "job 64 x 5 MB",
            {
                "first (empty cache)": lambda: (analyze(job), env_with(fresh())),
                "second (cache warm)": lambda: (analyze(job), env_with(wj)),
            },
        )
        (fw, _), (sw, _) = r["first (empty cache)"], r["second (cache warm)"]
        rows.append(
            (
                "job of 64 ranks: second look vs first",
                f"{sw:.3f} s / {fw:.2f} s = {sw / fw:.3f}x",
                "<= 0.1x",
                sw / fw <= 0.1,
            )
        )
    shutil.rmtree(scratch, ignore_errors=True)
    _print_rows(rows)
    return 0


# -- start-up, cached looks and first looks at real traces (--startup) ---------------------------

#: the reference of the first looks beside orjson.loads: simdjson's parse of the same text
#: (pysimdjson; a lazy document, no Python objects), in the same kind of script
REFERENCE_SIMDJSON = r"""
import gzip, sys
import simdjson
with open(sys.argv[1], "rb") as f:
    data = f.read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
doc = simdjson.Parser().parse(data)
"""
#: the real trace with the deepest module tree (../shared/traces/SOURCES.md)
DEEP_REAL = SHARED / "speed" / "mi300_owlv2_inference.json.gz"
#: the shared traces whose JSON is over this size get a first-look figure
FIRST_LOOK_MB = 10


def _json_mb(path):
    """MB of JSON of a trace file: its size, or a gzip file's trailer (size modulo 4 GiB)."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return os.path.getsize(path) / 1e6
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little") / 1e6


def _paired(label, commands, repeat, timeout, exits=(0,)):
    """Each of ``commands`` (name -> (argv, env)) run ``repeat`` times, in turn (A B A B ...),
    after one untimed run of each; wall seconds per run. A command that exits with a status not
    in ``exits`` stops the figure with its stderr."""
    walls = {name: [] for name in commands}
    for cmd, env in commands.values():
        run_child(cmd, timeout, capture_stdout=False, env=env)  # bytecode, page and trace caches
    for i in range(repeat):
        for name, (cmd, env) in commands.items():
            r = run_child(cmd, timeout, capture_stdout=False, env=env)
            if r["rc"] not in exits:
                raise SystemExit(f"{label}: {name} failed (exit {r['rc']}):\n{r['stderr_tail']}")
            walls[name].append(r["wall_s"])
        print(
            f"  {label} [{i + 1}/{repeat}] "
            + "  ".join(f"{name} {walls[name][-1]:.3f} s" for name in commands),
            flush=True,
        )
    return walls


def _ratio_row(figure, walls, a, b, target, extra=""):
    """A row: the median of the pairs' ratios a/b, their spread and the medians of each."""
    ratios = [x / y for x, y in zip(walls[a], walls[b])]
    median = statistics.median(ratios)
    measured = (
        f"{statistics.median(walls[a]):.3f} s / {statistics.median(walls[b]):.3f} s: "
        f"{median:.2f}x (pairs {min(ratios):.2f}-{max(ratios):.2f}x, {len(ratios)} runs){extra}"
    )
    return (figure, measured, f"<= {target}x", median <= target)


def startup_figures(a):
    """The figures of start-up (docs/performance.md "Start-up"), each the median of the ratios
    of alternated pairs of whole processes:

    * ``help``: ``traceprof --help``, ``--version`` and usage errors against
      ``python -c "import numpy"`` (target 0.6x);
    * ``cached``: looks served by the cache (every format of the real owlv2 trace, the Python
      API's profile, a job of 8 real ranks, a diff of two traces) against
      ``python -c "import numpy, msgspec"`` (target 1.5x);
    * ``first``: the first look (no cache) at every shared trace of more than 10 MB of JSON
      against ``orjson.loads`` of the same file (target 1.0x), and the ratio to simdjson's parse
      (pysimdjson, when installed)."""
    import shutil

    py, t, repeat = a.python, a.timeout, a.repeat
    tp = str(Path(py).with_name("traceprof"))  # the console script, as users run it
    if not Path(tp).exists():
        tp_cmd = [py, "-m", "traceprof"]
    else:
        tp_cmd = [tp]
    subprocess.run([*tp_cmd, "--help"], cwd=REPO, env=CHILD_ENV, stdout=subprocess.DEVNULL, check=True)
    want = set(a.startup_figures)
    rows = []
    if "help" in want:
        numpy_only = ([py, "-c", "import numpy"], CHILD_ENV)
        for name, argv in (
            ("traceprof --help", ["--help"]),
            ("traceprof --version", ["--version"]),
            ("usage error: unknown option", ["analyze", "--bogus"]),
            ("usage error: unknown format", ["analyze", "t.json", "--format", "nope"]),
            ("usage error: no such command", ["nope"]),
        ):
            walls = _paired(
                name,
                {"traceprof": ([*tp_cmd, *argv], CHILD_ENV), "numpy": numpy_only},
                repeat,
                t,
                exits=(0, 2, 3),  # a usage error exits 3 (click's own missing-command help: 2)
            )
            rows.append(_ratio_row(f"{name} vs import numpy", walls, "traceprof", "numpy", 0.6))
    if "cached" in want:
        scratch = Path(tempfile.mkdtemp(prefix="traceprof-bench-startup-"))
        env = {**CHILD_ENV, "TRACEPROF_CACHE": str(scratch)}
        reference = ([py, "-c", "import numpy, msgspec"], CHILD_ENV)
        deep = str(DEEP_REAL)
        job = str(SHARED / "multi_rank")
        base, new = (
            str(REPO / "sample_traces" / f"gpt_diff_{n}_cpu.pt.trace.json.gz") for n in ("base", "wide_mlp")
        )
        looks = [
            (f"owlv2 --format {fmt}", [*tp_cmd, "analyze", deep, "--format", fmt, "-o", "-"])
            for fmt in a.formats
        ]
        looks += [
            (
                "owlv2 profile (traceprof.analyze)",
                [py, "-c", "import sys, traceprof; traceprof.analyze(sys.argv[1])", deep],
            ),
            ("job of 8 real ranks", [*tp_cmd, "analyze", job]),
            ("diff of two traces", [*tp_cmd, "diff", base, new]),
        ]
        for name, cmd in looks:
            walls = _paired(name, {"cached look": (cmd, env), "numpy+msgspec": reference}, repeat, t)
            rows.append(
                _ratio_row(
                    f"cached: {name} vs import numpy, msgspec", walls, "cached look", "numpy+msgspec", 1.5
                )
            )
        shutil.rmtree(scratch, ignore_errors=True)
    if "first" in want:
        try:
            import simdjson  # noqa: F401 - only whether the reference can run
        except ImportError:
            simd = False
            print("pysimdjson is not installed: no ratio to simdjson's parse", flush=True)
        else:
            simd = True
        env = {**CHILD_ENV, "TRACEPROF_CACHE": "off"}
        traces = sorted(p for p in SHARED.rglob("*.json*") if _json_mb(p) > FIRST_LOOK_MB)
        for path in traces:
            warm_cache(path)
            commands = {
                "traceprof": ([*tp_cmd, "analyze", str(path)], env),
                "orjson.loads": ([py, "-c", REFERENCE, str(path), a.ref_gc], CHILD_ENV),
            }
            if simd:
                commands["simdjson"] = ([py, "-c", REFERENCE_SIMDJSON, str(path)], CHILD_ENV)
            walls = _paired(path.name, commands, repeat, t)
            extra = ""
            if simd:
                vs = [x / y for x, y in zip(walls["traceprof"], walls["simdjson"])]
                extra = f"; {statistics.median(vs):.1f}x simdjson's parse ({statistics.median(walls['simdjson']):.3f} s)"
            rows.append(
                _ratio_row(
                    f"first look: {path.name} ({_json_mb(path):.0f} MB) vs orjson.loads",
                    walls,
                    "traceprof",
                    "orjson.loads",
                    1.0,
                    extra,
                )
            )
    _print_rows(rows)
    return 0


def _generate(path, *args):
    if path.exists():
        return
    print(f"generating {path} ({' '.join(args)}) ...", flush=True)
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_large_trace.py"), "--out", str(path), *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _print_rows(rows):
    heads = ("figure", "measured (medians)", "target")
    widths = [max(len(str(x[i])) for x in [*rows, heads]) for i in range(3)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  met")
    print("  ".join("-" * w for w in widths) + "  ---")
    for fig, measured, target, met in rows:
        print(
            "  ".join(str(c).ljust(w) for c, w in zip((fig, measured, target), widths))
            + ("  yes" if met else "  NO")
        )


def compile_package():
    """Write the package's bytecode, as installing it does: with PYTHONDONTWRITEBYTECODE set
    (or a read-only checkout), a module edited since its .pyc was written would otherwise be
    compiled again by every traceprof child, and only by them."""
    import compileall

    compileall.compile_dir(str(REPO / "traceprof"), quiet=1)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("traces", nargs="*", help=f"trace files (default: {' '.join(DEFAULT_TRACES)})")
    ap.add_argument(
        "--large",
        default=str(DEFAULT_LARGE),
        help="large synthetic trace, generated when missing (default: %(default)s)",
    )
    ap.add_argument("--large-mb", type=float, default=520.0, help="size to generate it at (default 520)")
    ap.add_argument("--no-large", action="store_true", help="leave the large trace out")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command per file (default 3)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before a child is killed")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the children")
    ap.add_argument(
        "--ref-gc",
        choices=("on", "off"),
        default="on",
        help="Python's cyclic GC in the reference child (default on, as a plain script "
        "has it; with it, orjson.loads of a large trace spends most of its time in "
        "GC passes)",
    )
    ap.add_argument("--json", metavar="OUT", help="save the results as JSON")
    ap.add_argument(
        "--ingest",
        action="store_true",
        help="the ingest figures instead (see above); traces under --data-dir",
    )
    ap.add_argument(
        "--data-dir",
        default="/work/bench_data",
        help="--ingest: where the generated traces are kept (default %(default)s)",
    )
    ap.add_argument(
        "--gb-mb",
        type=float,
        default=1000.0,
        help="--ingest: size of the '1 GB' trace in MB (default 1000; 200 for a quick look)",
    )
    ap.add_argument(
        "--four-gb-mb",
        type=float,
        default=4000.0,
        help="--ingest: size of the '4 GB' trace in MB (default 4000)",
    )
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=("1mb", "1gb", "resnet", "4gb"),
        help="--ingest: figures left out",
    )
    ap.add_argument(
        "--cache",
        action="store_true",
        help="the cache figures instead (see cache_figures); traces under --data-dir",
    )
    ap.add_argument(
        "--cache-figures",
        nargs="*",
        default=["1gb", "second", "diff", "job"],
        choices=("1gb", "second", "diff", "job"),
        help="--cache: the figures to take (default: all)",
    )
    ap.add_argument(
        "--startup",
        action="store_true",
        help="the start-up figures instead (see startup_figures): --help, cached looks, first looks",
    )
    ap.add_argument(
        "--startup-figures",
        nargs="*",
        default=["help", "cached", "first"],
        choices=("help", "cached", "first"),
        help="--startup: the figures to take (default: all)",
    )
    ap.add_argument(
        "--formats",
        nargs="*",
        default=["tree", "table", "json", "csv", "html", "parquet"],
        help="--startup: the formats of the cached looks (default: all)",
    )
    a = ap.parse_args(argv)
    compile_package()
    if a.startup:
        return startup_figures(a)
    if a.ingest:
        return ingest_figures(a)
    if a.cache:
        return cache_figures(a)

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
        meta = {
            "python": a.python,
            "repeat": a.repeat,
            "reference_gc": a.ref_gc,
            "cpu_count": os.cpu_count(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        Path(a.json).write_bytes(orjson.dumps({"meta": meta, "results": results}, option=orjson.OPT_INDENT_2))
        print(f"\nresults saved to {a.json}")
    return 1 if any(r["traceprof_error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
