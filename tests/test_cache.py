"""The cache of decoded traces and analyses (traceprof/read/cache.py): a cached look gives every
field of the uncached one, and an entry that cannot be trusted is never used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import msgspec
import numpy as np
import pytest

import traceprof
from traceprof.read import cache
from traceprof.read.build import load_trace

from .conftest import REPO, SAMPLE_TRACES, SHARED_TRACES

SAMPLE = SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"
EVERY_TRACE = sorted(p for p in SHARED_TRACES.glob("*/*") if p.name.endswith((".json", ".json.gz"))) + sorted(
    SAMPLE_TRACES.glob("*.json.gz")
)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A fresh, empty cache for the test."""
    directory = tmp_path / "cache"
    monkeypatch.setenv(cache.DIR_ENV, str(directory))
    monkeypatch.delenv(cache.SIZE_ENV, raising=False)
    return directory


def assert_same(a, b, where: str = "") -> None:
    """Every field of ``a`` and ``b`` equal, of the same types (arrays: same dtype and shape)."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, msgspec.Struct):
        assert type(a) is type(b), where
        for f in a.__struct_fields__:
            assert_same(getattr(a, f), getattr(b, f), f"{where}.{f}")
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert type(b) is dict and list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, float) and a != a:
        assert isinstance(b, float) and b != b, where
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


def entries(directory: Path, kind: str | None = None) -> list[Path]:
    found = sorted(directory.glob(f"*{cache.SUFFIX}")) if directory.exists() else []
    return [p for p in found if kind is None or p.name.split("-")[1] == kind]


def cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]


# ---- every field, on every real trace ---------------------------------------------------------


@pytest.mark.parametrize("path", EVERY_TRACE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cached_trace_and_analysis_equal_uncached(path, cache_dir):
    uncached = load_trace(path, cache=False)
    assert not entries(cache_dir)
    load_trace(path)  # decodes and writes the entry
    assert len(entries(cache_dir, "trace")) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        hit = load_trace(path)
    assert_same(uncached, hit, "trace")

    expected = traceprof.analyze(uncached)
    written = traceprof.analyze(path)  # from the cached trace: analysis over mapped columns
    assert len(entries(cache_dir, "profile")) == 1
    read_back = traceprof.analyze(path)
    assert_same(expected, written, "profile")
    assert_same(expected, read_back, "profile")


def test_cached_entry_answers_to_the_path_given(cache_dir, tmp_path):
    copy = tmp_path / "elsewhere.json.gz"
    shutil.copyfile(SAMPLE, copy)
    first = traceprof.analyze(SAMPLE)
    second = traceprof.analyze(copy)  # same content: the same entries, under its own name
    assert len(entries(cache_dir, "profile")) == 1
    assert first.metadata.path == str(SAMPLE) and second.metadata.path == str(copy)
    assert load_trace(copy).metadata.path == str(copy)


def test_options_are_part_of_the_key(cache_dir):
    whole = traceprof.analyze(SAMPLE)
    one = traceprof.analyze(SAMPLE, step=whole.selection.numbers[0])
    assert len(entries(cache_dir, "profile")) == 2
    assert one.selection.numbers == whole.selection.numbers[:1] and len(whole.selection.numbers) > 1
    assert_same(traceprof.analyze(SAMPLE, step=whole.selection.numbers[0], cache=False), one)


# ---- entries that cannot be trusted -----------------------------------------------------------


def _damaged(cache_dir, damage) -> list[str]:
    """Analyze SAMPLE, damage its trace and profile entries, analyze again: the warnings."""
    expected = traceprof.analyze(SAMPLE, cache=False)
    traceprof.analyze(SAMPLE)
    damaged = entries(cache_dir)
    assert len(damaged) == 2
    for p in damaged:
        damage(p)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again = traceprof.analyze(SAMPLE)
        load_trace(SAMPLE)
    assert_same(expected, again)
    # rebuilt: whole entries again, read without a word
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        assert_same(expected, traceprof.analyze(SAMPLE))
    return cache_warnings(record)


def _flip_byte(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) * 2 // 3] ^= 0x40
    p.write_bytes(bytes(data))


def test_corrupt_entry_is_ignored_and_rebuilt(cache_dir):
    said = _damaged(cache_dir, _flip_byte)
    assert said and all("corrupt (checksum mismatch); ignored and rebuilt" in w for w in said)


def test_truncated_entry_is_ignored_and_rebuilt(cache_dir):
    said = _damaged(cache_dir, lambda p: os.truncate(p, p.stat().st_size // 2))
    assert said and all("is truncated" in w for w in said)
    said = _damaged(cache_dir, lambda p: os.truncate(p, 5))
    assert said and all("is truncated" in w for w in said)


def test_entry_of_another_format_version_is_ignored(cache_dir):
    def older(p: Path) -> None:
        data = bytearray(p.read_bytes())
        data[8:12] = (cache.FORMAT_VERSION + 1).to_bytes(4, "little")
        p.write_bytes(bytes(data))

    said = _damaged(cache_dir, older)
    assert said and all("of another cache format" in w for w in said)


def test_entry_of_another_file_is_ignored(cache_dir, tmp_path):
    other = SAMPLE_TRACES / "lenet5_infer_cpu.pt.trace.json.gz"
    traceprof.analyze(other)
    (foreign,) = entries(cache_dir, "trace")

    def swapped(p: Path) -> None:
        if p.name.split("-")[1] == "trace":
            shutil.copyfile(foreign, p)

    cache_dir_entries = entries(cache_dir)
    for p in cache_dir_entries:
        p.unlink()
    expected = load_trace(SAMPLE, cache=False)
    load_trace(SAMPLE)
    (mine,) = entries(cache_dir, "trace")
    traceprof.analyze(other)  # its entry back
    theirs = next(p for p in entries(cache_dir, "trace") if p != mine)
    shutil.copyfile(theirs, mine)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = load_trace(SAMPLE)
    assert_same(expected, got)
    (said,) = cache_warnings(record)
    assert "holds another entry" in said


def test_not_a_cache_entry(cache_dir):
    said = _damaged(cache_dir, lambda p: p.write_bytes(b'{"traceEvents": []}' * 10))
    assert said and all("is not a traceprof cache entry" in w for w in said)


def test_file_rewritten_in_place_with_size_and_time_kept(cache_dir, tmp_path):
    """Same size, same mtime, other content: another entry, the new numbers."""
    from .tracebuilder import TraceBuilder

    def trace(kernel_us: int) -> bytes:
        b = TraceBuilder()
        b.step(1, 0, 1000)
        b.scope("", "Net", 10, 500)
        b.scope("fc", "Linear", 20, 50)
        b.op("aten::mm", 21, 10, seq=1)
        b.launch(22, 100, kernel_us)
        b.write(tmp_path / "built.json")
        return (tmp_path / "built.json").read_bytes()

    first, second = trace(100), trace(300)
    assert len(first) == len(second) and first != second
    path = tmp_path / "t.json"
    path.write_bytes(first)
    stamp = path.stat()
    before = traceprof.analyze(path)
    path.write_bytes(second)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_mtime_ns == stamp.st_mtime_ns and path.stat().st_size == stamp.st_size
    after = traceprof.analyze(path)
    assert_same(traceprof.analyze(path, cache=False), after)
    assert after.selection.gpu_busy_us == pytest.approx(3 * before.selection.gpu_busy_us)


# ---- where the cache cannot be written ----------------------------------------------------------


def test_unwritable_directory_means_no_cache_with_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(cache.DIR_ENV, str(blocker / "cache"))
    expected = traceprof.analyze(SAMPLE, cache=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = traceprof.analyze(SAMPLE)
    assert_same(expected, got)
    said = cache_warnings(record)
    assert said and all("cannot write to the cache" in w and "analyzing without it" in w for w in said)


def test_read_only_directory(tmp_path, monkeypatch):
    """A directory this process may not write to (as root, /proc is one)."""
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o500)
    target = directory if os.geteuid() != 0 else Path("/proc/traceprof-cache")
    monkeypatch.setenv(cache.DIR_ENV, str(target))
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got = traceprof.analyze(SAMPLE)
    finally:
        directory.chmod(0o700)
    assert_same(traceprof.analyze(SAMPLE, cache=False), got)
    assert any("cannot write to the cache" in w for w in cache_warnings(record))


def test_size_limit_too_small_for_an_entry(cache_dir, monkeypatch):
    """A full cache (a tiny limit): nothing written, a warning, the same numbers."""
    monkeypatch.setenv(cache.SIZE_ENV, "1K")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = traceprof.analyze(SAMPLE)
    assert_same(traceprof.analyze(SAMPLE, cache=False), got)
    said = cache_warnings(record)
    assert said and all("not cached" in w and "larger than the cache's limit (0.0 MB" in w for w in said)
    assert not entries(cache_dir)


def test_least_recently_used_entries_go_first(cache_dir, monkeypatch, tmp_path):
    a, b, c = (
        SAMPLE_TRACES / f"{n}.pt.trace.json.gz"
        for n in ("lenet5_train_cpu", "lenet5_infer_cpu", "gpt_infer_cpu")
    )
    monkeypatch.setenv(cache.DIR_ENV, str(tmp_path / "sizes"))
    load_trace(c)
    (size_c,) = [p.stat().st_size for p in entries(tmp_path / "sizes")]
    monkeypatch.setenv(cache.DIR_ENV, str(cache_dir))
    for t in (a, b):
        load_trace(t)

    def entry_of(t: Path) -> Path:
        (e,) = [p for p in entries(cache_dir) if p.name.startswith(cache.content_hash(t) or "?")]
        return e

    entry_a, entry_b = entry_of(a), entry_of(b)
    os.utime(entry_a, ns=(1, 1))  # a written long ago ...
    os.utime(entry_b, ns=(2, 2))
    load_trace(a)  # ... but used just now
    assert entry_a.stat().st_mtime_ns > entry_b.stat().st_mtime_ns
    touched = entry_a.stat().st_mtime_ns
    load_trace(a)  # used again within the minute: its mark stands (no write per read)
    assert entry_a.stat().st_mtime_ns == touched
    room = entry_a.stat().st_size + max(entry_b.stat().st_size, size_c)
    monkeypatch.setenv(cache.SIZE_ENV, str(room))
    load_trace(c)  # room for two: b, the least recently used, goes
    left = entries(cache_dir)
    assert entry_a in left and entry_b not in left and entry_of(c) in left
    assert sum(p.stat().st_size for p in left) <= room


def test_concurrent_writers_of_one_entry(cache_dir):
    """Four processes analyzing the same trace at once into an empty cache: every output is
    the uncached one, and one whole entry of each kind is left, no temporary file."""
    expected = subprocess.run(
        [sys.executable, "-m", "traceprof", "analyze", "--no-cache", str(SAMPLE), "-f", "json"],
        capture_output=True,
        check=True,
        cwd=REPO,
    ).stdout
    env = dict(os.environ, **{cache.DIR_ENV: str(cache_dir)})
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "traceprof", "analyze", str(SAMPLE), "-f", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env=env,
        )
        for _ in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and not err, err
        assert out == expected
    assert [p.name.split("-")[1] for p in entries(cache_dir)] == sorted(["profile", "trace"])
    assert not list(cache_dir.glob(".tmp-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        load_trace(SAMPLE)


# ---- every path uses it -----------------------------------------------------------------------


def test_job_ranks_are_cached_where_they_are_read(cache_dir):
    ranks = sorted((SHARED_TRACES / "multi_rank_t4").glob("*.json.gz"))
    first = traceprof.analyze_job(ranks, jobs=1)
    assert len(entries(cache_dir, "rank")) == len(ranks)
    second = traceprof.analyze_job(ranks, jobs=1)
    assert_same(first, second)
    # every rank in this machine's cache: no worker is needed, not even a scheduler's
    served = traceprof.analyze_job(ranks, engine="dask", scheduler="tcp://127.0.0.1:1", scheduler_timeout=1)
    assert served.engine == "dask"
    assert_same(first, msgspec.structs.replace(served, engine=first.engine))
    assert_same(first, traceprof.analyze_job(ranks, jobs=1, cache=False))


def test_diff_sides_come_from_the_cache(cache_dir):
    """A diff keeps each side (the CI baseline is analyzed once) and its decoded trace; the
    cached diff is the uncached one, field by field."""
    base, new = (SAMPLE_TRACES / f"gpt_diff_{n}_cpu.pt.trace.json.gz" for n in ("base", "wide_mlp"))
    uncached = traceprof.diff(base, new, parallel=False, cache=False)
    assert not entries(cache_dir)
    first = traceprof.diff(base, new, parallel=False)
    assert len(entries(cache_dir, "side")) == 2 and len(entries(cache_dir, "trace")) == 2
    second = traceprof.diff(base, new, parallel=False)
    assert_same(uncached, first)
    assert_same(uncached, second)


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "traceprof", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def test_cli_no_cache_info_and_clear(cache_dir):
    env = dict(os.environ, **{cache.DIR_ENV: str(cache_dir)})
    assert _cli("analyze", "--no-cache", str(SAMPLE), env=env).returncode == 0
    assert not entries(cache_dir)
    assert _cli("analyze", str(SAMPLE), "--depth", "1", env=env).returncode == 0
    info = _cli("cache", "info", env=env)
    assert info.returncode == 0
    assert f"directory: {cache_dir}" in info.stdout and "1 profile, 1 trace" in info.stdout
    cleared = _cli("cache", "clear", env=env)
    assert cleared.returncode == 0 and cleared.stdout.startswith("removed 2 entries")
    assert not entries(cache_dir)
    assert "entries:   none" in _cli("cache", "info", env=env).stdout


def test_cli_bad_size_limit_and_cache_turned_off(cache_dir):
    bad = _cli("analyze", str(SAMPLE), env=dict(os.environ, **{cache.SIZE_ENV: "lots"}))
    assert bad.returncode == 3
    assert (
        bad.stderr.strip()
        == "traceprof: error: $TRACEPROF_CACHE_SIZE: not a size: 'lots' (expected e.g. 8G, 500M, 1.5GB)"
    )
    off = _cli("cache", "info", env=dict(os.environ, **{cache.DIR_ENV: "off"}))
    assert (
        off.returncode == 3
        and off.stderr.strip() == "traceprof: error: the cache is turned off ($TRACEPROF_CACHE is 'off')"
    )


def test_cli_cache_warning_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = _cli("analyze", str(SAMPLE), "--depth", "0", env=dict(os.environ, **{cache.DIR_ENV: str(blocker)}))
    assert run.returncode == 0
    lines = run.stderr.splitlines()
    assert lines and all(line.startswith("traceprof: warning: ") for line in lines), run.stderr
    assert "cannot write to the cache" in lines[0]


def test_a_look_served_by_the_cache_imports_no_analysis_stage(cache_dir):
    """The second look runs none of the analysis and decodes no JSON: their modules (and the FLOP
    formulas and the capture helper) are not even imported, a good part of start-up."""
    trace = str(SAMPLE_TRACES / "gpt_train_cpu.pt.trace.json.gz")
    code = (
        "import sys, traceprof; traceprof.analyze(sys.argv[1]);"
        "print(sorted(m for m in sys.modules if m.startswith("
        "('traceprof.analysis.attribution', 'traceprof.flops', 'traceprof.capture',"
        " 'traceprof.read.build', 'traceprof.read.document'))))"
    )
    env = {**os.environ, cache.DIR_ENV: str(cache_dir)}
    first = subprocess.run([sys.executable, "-c", code, trace], env=env, capture_output=True, text=True)
    assert "traceprof.analysis.attribution" in first.stdout, first.stderr  # the first look ran it
    second = subprocess.run([sys.executable, "-c", code, trace], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "fmt, job",
    [("tree", False), ("table", False), ("json", False), ("csv", False), ("html", False), ("html", True)],
)
def test_a_cached_look_needs_no_numpy(cache_dir, tmp_path, fmt, job):
    """A look served by the cache, in every format but Parquet (pyarrow's), at a trace or at a
    job, runs with numpy out of reach (its import is most of a bare start-up) and writes what
    the first look wrote: the profile holds no arrays (its timeline's columns are tuples), and
    the modules it reads import numpy only where an array is made. The trace has a memory curve
    with blocks."""
    trace = str(
        SHARED_TRACES / "multi_rank" if job else SAMPLE_TRACES / "gpt_train_memory_cpu.pt.trace.json.gz"
    )
    first, second = tmp_path / f"first.{fmt}", tmp_path / f"second.{fmt}"
    env = {**os.environ, cache.DIR_ENV: str(cache_dir)}
    run = _cli("analyze", trace, "-f", fmt, "-o", str(first), env=env)
    assert run.returncode == 0, run.stderr
    no_numpy = "import sys; sys.modules['numpy'] = None; from traceprof.cli import run; run()"
    args = ["analyze", trace, "-f", fmt, "-o", str(second)]
    run = subprocess.run([sys.executable, "-c", no_numpy, *args], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert second.read_bytes() == first.read_bytes()


@pytest.mark.parametrize("fmt", ["tree", "html"])
def test_a_cached_diff_needs_no_numpy(cache_dir, tmp_path, fmt):
    """A diff whose sides are in the cache runs with numpy out of reach too (computing a side
    needs it, reading one does not) and writes what the first diff wrote."""
    base, new = (str(SAMPLE_TRACES / f"gpt_diff_{n}_cpu.pt.trace.json.gz") for n in ("base", "wide_mlp"))
    first, second = tmp_path / f"first.{fmt}", tmp_path / f"second.{fmt}"
    env = {**os.environ, cache.DIR_ENV: str(cache_dir)}
    run = _cli("diff", base, new, "-f", fmt, "-o", str(first), env=env)
    assert run.returncode == 0, run.stderr
    no_numpy = "import sys; sys.modules['numpy'] = None; from traceprof.cli import run; run()"
    args = ["diff", base, new, "-f", fmt, "-o", str(second)]
    run = subprocess.run([sys.executable, "-c", no_numpy, *args], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert second.read_bytes() == first.read_bytes()


def test_decoded_results_are_not_tracked_by_the_cycle_collector(cache_dir):
    """A profile's nodes, times and op rows hold no cycles: they are left out of the cyclic
    garbage collector, whose passes over the many objects a job's ranks decode to cost more
    than the decoding."""
    import gc

    path = SAMPLE_TRACES / "gpt_train_cpu.pt.trace.json.gz"
    traceprof.analyze(path)
    profile = traceprof.analyze(path)
    node = next(n for n in profile.nodes if n.ops)
    for obj in (node, node.forward, node.forward.total, node.ops[0]):
        assert not gc.is_tracked(obj), type(obj).__name__
