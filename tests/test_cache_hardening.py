"""The cache against an attacker and against bad luck (issue 33): an entry is keyed by the bytes
that were decoded, never by a hash taken before the file changed; the directory is private and
only this tool's entries in it are read, counted or removed; a forged entry is refused as
untrusted input; temporary files never outlive their writer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceprof
from traceprof.cli import main
from traceprof.compare.side import side_of
from traceprof.job.rank import RankOptions, analyze_rank
from traceprof.read import cache
from traceprof.read.build import load_keyed, load_trace

from .conftest import SAMPLE_TRACES
from .test_cache import assert_same, entries

A = SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"
B = SAMPLE_TRACES / "lenet5_infer_cpu.pt.trace.json.gz"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv(cache.DIR_ENV, str(directory))
    monkeypatch.delenv(cache.SIZE_ENV, raising=False)
    return directory


# ---- 1: the key is the hash of the bytes decoded -------------------------------------------------


def _swapped_after_the_hash(monkeypatch, path: Path, replacement: Path) -> None:
    """The file at ``path`` replaced (an atomic rename, as a training job writes its next trace)
    right after the cache hashed it, once."""
    hashed = cache.content_hash

    def hash_then_swap(p):
        value = hashed(p)
        if Path(p) == path and replacement.exists():
            os.replace(replacement, path)
        return value

    monkeypatch.setattr(cache, "content_hash", hash_then_swap)


def _look(what: str, path: Path, cache_on: bool = True):
    """What each path through the cache gives for ``path``, its path spelled alike."""
    use = None if cache_on else False
    if what == "profile":
        return traceprof.analyze(path, cache=use).with_path("t")
    if what == "trace":
        return load_trace(path, cache=use).with_path("t")
    if what == "rank":
        return analyze_rank((str(path), RankOptions(cache=use))).profile.with_path("t")
    return side_of(path, cache=use).profile.with_path("t")


@pytest.mark.parametrize("what", ["profile", "trace", "rank", "side"])
def test_a_file_replaced_between_the_hash_and_the_read_is_cached_as_what_was_read(
    cache_dir, tmp_path, monkeypatch, what
):
    path, incoming, copy_of_a = (
        tmp_path / "latest.json.gz",
        tmp_path / ".next.json.gz",
        tmp_path / "a.json.gz",
    )
    shutil.copyfile(A, path)
    shutil.copyfile(B, incoming)
    shutil.copyfile(A, copy_of_a)
    _swapped_after_the_hash(monkeypatch, path, incoming)
    assert_same(_look(what, B, cache_on=False), _look(what, path))  # hashed as A, read as B
    # before: B's analysis was stored under A's hash (15 of 25 runs of a real race), and every
    # later look at A showed B's numbers
    assert_same(_look(what, A, cache_on=False), _look(what, copy_of_a))


def test_the_key_is_the_hash_of_the_bytes_read_whole_or_run_by_run(cache_dir, tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_bytes(__import__("gzip").decompress(A.read_bytes()))
    for path in (A, plain):
        for chunk_bytes in (None, 1 << 16):  # whole, and decoded run by run
            _, read = load_keyed(path, cache=True, content="0" * 32, jobs=1, chunk_bytes=chunk_bytes)
            assert read == cache.content_hash(path)
    assert {p.name.split("-")[0] for p in entries(cache_dir)} == {
        cache.content_hash(A),
        cache.content_hash(plain),
    }


# ---- 6: a private directory; an entry that is not ours is not ours ---------------------------------


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_directory_is_private_whatever_the_umask(cache_dir):
    old = os.umask(0)
    try:
        traceprof.analyze(A)  # before: 0777 under umask 000
    finally:
        os.umask(old)
    assert _mode(cache_dir) == 0o700
    assert entries(cache_dir) and all(_mode(p) == 0o600 for p in entries(cache_dir))


def test_a_cache_left_open_by_an_earlier_traceprof_is_made_private_and_used(cache_dir):
    traceprof.analyze(A)
    os.chmod(cache_dir, 0o777)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        traceprof.analyze(A)  # a hit
    assert _mode(cache_dir) == 0o700


def test_a_directory_open_to_others_that_holds_other_files_is_not_used(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    (shared / "notes.txt").write_text("mine")
    monkeypatch.setenv(cache.DIR_ENV, str(shared))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert_same(traceprof.analyze(A, cache=False), traceprof.analyze(A))
    said = [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]
    assert len(said) == 1 and "is open to other users (mode 777) and holds other files" in said[0]
    assert sorted(p.name for p in shared.iterdir()) == ["notes.txt"] and _mode(shared) == 0o777


needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")


@needs_root
def test_an_entry_of_another_user_is_neither_read_nor_removed(cache_dir):
    expected = traceprof.analyze(A, cache=False)
    traceprof.analyze(A)
    for p in entries(cache_dir):
        os.chown(p, 12345, 12345)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert_same(expected, traceprof.analyze(A))
    said = [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]
    assert said and all("not a cache entry of yours" in w for w in said)
    assert all(p.stat().st_uid == 12345 for p in entries(cache_dir))  # left alone


@needs_root
def test_a_directory_of_another_user_is_not_used(cache_dir):
    cache_dir.mkdir(mode=0o700)
    os.chown(cache_dir, 12345, 12345)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traceprof.analyze(A)
    said = [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]
    assert len(said) == 1 and "belongs to another user" in said[0]
    assert not list(cache_dir.iterdir())


# ---- 7: only entries this tool wrote are removed ---------------------------------------------------


def _others(directory: Path) -> dict[str, bytes]:
    """Files of the user's own in ``directory``, some with names like an entry's."""
    files = {
        "project.tpc": b"my project",
        "thesis.tpc": b"x" * 100_000,
        f"{'0' * 32}-trace-{'0' * 16}.tpc": b"looks like an entry by its name only",
        ".tmp-draft.tpc": b"",
    }
    directory.mkdir(mode=0o700, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


def test_clear_removes_only_entries_of_traceprof(cache_dir):
    others = _others(cache_dir)
    traceprof.analyze(A)
    written = [p for p in entries(cache_dir) if p.name not in others]
    assert len(written) == 2
    result = CliRunner().invoke(main, ["cache", "clear"])
    assert result.exit_code == 0 and result.output.startswith("removed 2 entries"), result.output
    assert {p.name: p.read_bytes() for p in cache_dir.iterdir()} == others  # before: every *.tpc gone
    info = CliRunner().invoke(main, ["cache", "info"])
    assert "entries:   none" in info.output, info.output


def test_eviction_removes_only_entries_of_traceprof(cache_dir, monkeypatch):
    others = _others(cache_dir)
    traceprof.analyze(A)
    first = sum(p.stat().st_size for p in entries(cache_dir) if p.name not in others)
    monkeypatch.setenv(cache.SIZE_ENV, str(first + 1000))
    traceprof.analyze(B)  # evicts A's entries, and only them
    assert {p.name: p.read_bytes() for p in cache_dir.iterdir() if p.name in others} == others


# ---- 8: a forged entry is refused as untrusted input -----------------------------------------------


def _forge(path: Path, edit, swap_data: tuple[int, int] | None = None) -> None:
    """Rewrite entry ``path`` with its header changed by ``edit(header)`` (a dict) and a valid
    checksum: what someone who can write the directory could do."""
    import msgspec
    import xxhash

    data = path.read_bytes()
    magic, version, header_len, _, _ = cache._PREFIX.unpack_from(data, 0)
    body = data[cache._PREFIX.size :]
    header = msgspec.msgpack.decode(body[:header_len])
    payload = body[header_len : header_len + header["payload"]]
    base = -(-(cache._PREFIX.size + header_len + header["payload"]) // cache._ALIGN) * cache._ALIGN
    arrays = [
        body[base - cache._PREFIX.size + off : base - cache._PREFIX.size + off + n]
        for _, _, off, n in header["arrays"]
    ]
    edit(header)
    if swap_data is not None:  # two arrays of one type and size trade their contents
        i, j = swap_data
        arrays[i], arrays[j] = arrays[j], arrays[i]
    new_header = msgspec.msgpack.encode(header)
    start = len(new_header) + len(payload)
    new_base = -(-(cache._PREFIX.size + start) // cache._ALIGN) * cache._ALIGN - cache._PREFIX.size
    out = bytearray(new_header + payload + b"\0" * (new_base - start))
    for (_, _, off, _), array in zip(header["arrays"], arrays):
        at = new_base + off
        if 0 <= off < len(body):  # an offset out of bounds places nothing
            out[len(out) :] = b"\0" * max(0, at - len(out))
            out[at : at + len(array)] = array
    digest = xxhash.xxh3_128_digest(bytes(out))
    path.write_bytes(cache._PREFIX.pack(magic, version, len(new_header), len(out), digest) + bytes(out))


def _swap(header, i: int, j: int) -> None:
    a = header["arrays"]
    a[i], a[j] = a[j], a[i]


def _swap_columns(header) -> None:
    """Two columns trade places in the table (each field gets the other's array)."""
    a = header["arrays"]
    i = next(k for k, t in enumerate(a) if t[0] == "|i1")
    j = next(k for k, t in enumerate(a) if t[0] == "<f8")
    a[i], a[j] = a[j], a[i]


def _retype(dtype: str):
    def edit(header) -> None:
        header["arrays"][0][0] = dtype  # the kind column (int8), read as another type of its size

    return edit


FORGERIES = {
    "bad dtype": lambda h: h["arrays"][0].__setitem__(0, "|O"),
    "unknown dtype": lambda h: h["arrays"][0].__setitem__(0, "garbage"),
    "void dtype": lambda h: h["arrays"][0].__setitem__(0, "|V8"),
    "huge shape": lambda h: h["arrays"][0].__setitem__(1, [2**40, 2**40]),
    "negative shape": lambda h: h["arrays"][0].__setitem__(1, [-1]),
    "negative offset": lambda h: h["arrays"][-1].__setitem__(2, -64),
    "offset past the end": lambda h: h["arrays"][-1].__setitem__(2, 2**40),
    "overlapping arrays": lambda h: h["arrays"][1].__setitem__(2, h["arrays"][0][2]),
    "swapped arrays": _swap_columns,
    "retyped array": _retype("|u1"),
    "bools for integers": _retype("|b1"),
    "payload past the end": lambda h: h.__setitem__("payload", 2**40),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_entry_with_a_valid_checksum_gives_a_fresh_analysis_and_one_warning(cache_dir, forgery):
    expected = traceprof.analyze(A, cache=False)
    load_trace(A)  # the trace entry: the one with many arrays
    (entry,) = entries(cache_dir)
    _forge(entry, FORGERIES[forgery])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = traceprof.analyze(A)  # before: TypeError, OverflowError, IndexError, ValueError
    assert_same(expected, got)
    said = [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]
    assert len(said) == 1 and "ignored and rebuilt" in said[0], said
    assert_same(load_trace(A, cache=False), load_trace(A))  # rebuilt


def test_columns_that_trade_contents_are_refused_by_what_they_hold(cache_dir):
    """A forgery that keeps every array's type, size and place: the event names' codes and the
    input shapes' codes trade contents, and the names column points past the names."""
    expected = traceprof.analyze(A, cache=False)
    load_trace(A)
    (entry,) = entries(cache_dir)
    _forge(entry, lambda h: None, swap_data=(1, 12))  # EventTable.name <-> EventTable.input_dims
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = traceprof.analyze(A)
    assert_same(expected, got)
    said = [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]
    assert len(said) == 1 and "column name holds values outside" in said[0], said


def test_a_forged_profile_entry_with_links_out_of_place_gives_a_fresh_analysis(cache_dir):
    import msgspec

    expected = traceprof.analyze(A, cache=False)
    traceprof.analyze(A)
    (entry,) = entries(cache_dir, "profile")
    name = entry.name
    forged = msgspec.structs.replace(
        expected, nodes=(msgspec.structs.replace(expected.nodes[0], children=(10**6,)), *expected.nodes[1:])
    )
    entry.unlink()
    cache.Store(cache_dir, 10**9).put(name, "profile", forged)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = traceprof.analyze(A)
    assert_same(expected, got)
    assert any("node 0 has a child out of place" in str(w.message) for w in record)


# ---- 9: temporary files do not outlive their writer -------------------------------------------------


def test_a_write_stopped_by_sigterm_leaves_no_temporary_file(cache_dir, monkeypatch):
    from traceprof.cli.common import Terminated

    def terminated(*args):
        raise Terminated()

    monkeypatch.setattr(cache.os, "replace", terminated)  # SIGTERM while the entry is written
    with pytest.raises(Terminated):
        traceprof.analyze(A)
    monkeypatch.undo()
    assert not list(cache_dir.iterdir())  # before: a .tmp-*.tpc of the entry's size


def test_temporary_files_of_dead_writers_are_counted_and_removed_live_ones_are_not(cache_dir):
    import fcntl

    traceprof.analyze(A)
    dead = cache_dir / ".tmp-k1ll3d_x.tpc"
    dead.write_bytes(cache.MAGIC + b"x" * 3_600_000)  # a writer SIGKILLed mid-write
    live = cache_dir / ".tmp-writing1.tpc"
    live.write_bytes(cache.MAGIC + b"y" * 1000)
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a writer at work holds it
        info = CliRunner().invoke(main, ["cache", "info"])
        assert "1 left by a writer that died" in info.output, info.output  # before: not counted
        assert "3.6 MB" in info.output or "3.7 MB" in info.output, info.output
        traceprof.analyze(B)  # a write removes it (before: never evicted)
        assert not dead.exists() and live.exists()
        dead.write_bytes(b"")  # killed before it wrote anything
        result = CliRunner().invoke(main, ["cache", "clear"])
        assert result.exit_code == 0, result.output
        assert not dead.exists() and live.exists()
    assert sorted(p.name for p in cache_dir.iterdir()) == [live.name]


# ---- 13: a FIFO where an entry should be; clear where nothing can be removed -------------------------


def test_a_fifo_in_place_of_an_entry_does_not_block(cache_dir):
    code = (  # one process: the entries' names hold a fingerprint of the code it runs
        "import os, pathlib, traceprof\n"
        f"traceprof.analyze({str(A)!r})\n"
        f"for p in pathlib.Path({str(cache_dir)!r}).glob('*.tpc'):\n"
        "    p.unlink()\n"
        "    os.mkfifo(p)\n"
        f"traceprof.analyze({str(A)!r})\n"
        "print('done')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)  # a hang
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr  # before: blocked in open()
    assert "not a cache entry of yours" in proc.stderr


def test_clear_says_what_it_could_not_remove(cache_dir, monkeypatch):
    traceprof.analyze(A)

    def refused(self, missing_ok=False):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "unlink", refused)  # a read-only directory
    result = CliRunner().invoke(main, ["cache", "clear"])
    assert result.exit_code == 4, result.output  # before: "removed 0 entries", exit 0
    lines = result.output.strip().splitlines()
    assert lines == [
        f"traceprof: error: {cache_dir}: cannot remove 2 of 2 entries (Permission denied); removed 0 (0.0 MB)"
    ]
