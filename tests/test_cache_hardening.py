"""The cache against an attacker and against bad luck (issue 33): an entry is keyed by the bytes
that were decoded, never by a hash taken before the file changed; the directory is private and
only this tool's entries in it are read, counted or removed; a forged entry is refused as
untrusted input; temporary files never outlive their writer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import traceprof
from traceprof.compare.side import side_of
from traceprof.job.analyze import RankOptions, analyze_rank
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
