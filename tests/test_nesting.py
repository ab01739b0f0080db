"""CPU nesting (``traceprof.analysis.link._nest``) resolves conflicts (a slice that outlives its
parent) in windows of the thread, not the whole thread again and again: the result must be the
whole thread's, resolved pass after pass, for any slices (docs/performance.md "Start-up")."""

from __future__ import annotations

import numpy as np
import pytest

from traceprof.analysis import link

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def nest_sorted(s, e):
    """Depth, parent position and has-parent of slices sorted by (start, -end), by plain binary
    searches (the reference of link._nest_sorted)."""
    m = len(s)
    closes = np.sort(2 * e + (e == s))
    d = np.maximum(np.arange(m) - np.searchsorted(closes, 2 * s, side="right"), 0)
    key = d * m + np.arange(m)
    by_key = np.argsort(key, kind="stable")
    pos = np.searchsorted(key[by_key], (d - 1) * m + np.arange(m), side="right") - 1
    has = (d > 0) & (pos >= 0)
    cand = np.where(has, by_key[np.clip(pos, 0, m - 1)], 0)
    has &= d[cand] == d - 1
    return d, np.where(has, cand, 0), has


def whole_thread_nesting(thread, ts, dur, cpu, n):
    """The nesting as it was computed before windows: every thread resolved whole, up to 32
    passes (the reference)."""
    parent = np.full(n, -1, link.index_dtype(n))
    depth = np.full(n, -1, np.int32)
    nest_end = ts + dur
    if len(cpu) == 0:
        return parent, depth, nest_end, 0
    t0 = ts[cpu].min()
    start, end = link._rounded_ns(ts[cpu] - t0), link._rounded_ns(dur[cpu])
    end += start
    thr = thread[cpu]
    order = np.lexsort((-end, start, thr))
    start, end, thr, idx = start[order], end[order], thr[order], cpu[order]
    bounds = np.flatnonzero(np.diff(thr)) + 1
    conflicts = 0
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(idx)]):
        s, e, ids = start[lo:hi], end[lo:hi].copy(), idx[lo:hi]
        for attempt in range(32):
            d, p, has = nest_sorted(s, e)
            bad = has & (e > e[p])
            if attempt == 0:
                conflicts += int(np.count_nonzero(bad))
            if not bad.any():
                break
            small = bad & (e - e[p] <= link._CLIP_TOLERANCE_NS)
            e[small] = e[p[small]]
            big = bad & ~small
            np.minimum.at(e, p[big], s[big])
            o = np.lexsort((-e, s))
            s, e, ids = s[o], e[o], ids[o]
        parent[ids] = np.where(has, ids[p], -1)
        depth[ids] = d
        nest_end[ids] = t0 + e / 1000.0
    return parent, depth, nest_end, conflicts


SLICES = st.lists(
    st.tuples(
        st.integers(0, 2),  # thread
        st.integers(0, 60),  # start (µs, a coarse grid: ties are common)
        st.integers(0, 40),  # duration
        st.sampled_from([0.0, 0.0004, 0.3]),  # a fraction: rounding-error overlaps too
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(SLICES, st.sampled_from([1.0, 1000.0]))
def test_windows_give_the_whole_threads_nesting(slices, scale):
    thread = np.array([t for t, _, _, _ in slices], np.int32)
    ts = np.array([s * scale for _, s, _, _ in slices], np.float64)
    dur = np.array([d * scale + f for _, _, d, f in slices], np.float64)
    n = len(slices) + 2  # and events that are not CPU slices
    thread, ts, dur = (np.concatenate([a, np.zeros(2, a.dtype)]) for a in (thread, ts, dur))
    cpu = np.arange(len(slices))
    got = link._nest(thread, ts.copy(), dur.copy(), cpu, n)
    want = whole_thread_nesting(thread, ts.copy(), dur.copy(), cpu, n)
    for a, b in zip(got[:3], want[:3]):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert got[3] == want[3]


def test_a_long_frame_that_outlives_its_ancestors_climbs_as_before():
    """A Python frame that never closes (it ends at the end of the trace) inside a deep stack:
    it is cut out of each ancestor in turn, one pass each, in a window of the whole thread."""
    starts = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    ends = [100, 90, 80, 70, 60, 50, 40, 30, 20, 10_000, 15, 14, 13]
    ts = np.array(starts, np.float64)
    dur = np.array(ends, np.float64) - ts
    thread = np.zeros(len(ts), np.int32)
    cpu = np.arange(len(ts))
    got = link._nest(thread, ts.copy(), dur.copy(), cpu, len(ts))
    want = whole_thread_nesting(thread, ts.copy(), dur.copy(), cpu, len(ts))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert got[3] == 1
