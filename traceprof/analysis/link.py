"""Links between events: CPU nesting, GPU work -> launch, backward op -> forward op.

Everything is computed with numpy over whole columns; Python loops run over threads and nesting
depth levels only, never over events.

- **Nesting.** CPU slices (ops, annotations, Python functions, runtime calls) nest by time on
  their thread. Sorting a thread's slices by (start, -end), the depth of a slice is the number of
  earlier slices still open at its start, and its parent is the last earlier slice one level up.
- **Launches.** GPU work (kernel, memcpy, memset) joins the runtime call that launched it through
  ``correlation``; work whose launch is missing falls back to the op with its ``External id``.
  The CPU event found is the work's *anchor*: scopes, pass and step come from the anchor.
- **Backward.** A backward node op (``Fwd thread id`` > 0, or a ``...Backward`` name where the
  trace lacks that field) carries the ``Sequence number`` of the forward op that created it. The
  forward op is the last-started op with that number on the forward thread; ``Fwd thread id`` is
  an index, not an OS thread id, so the index -> thread mapping is learnt by majority vote.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.trace import schema
from traceprof.trace.columns import Trace, index_dtype
from traceprof.trace.schema import Kind


class Links(msgspec.Struct, frozen=True):
    """Per-event link arrays (length = number of events; -1 = none). Event indices are of
    :func:`~traceprof.trace.columns.index_dtype` (int32 below 2**31 events), depths int32."""

    parent: np.ndarray  # enclosing CPU slice on the same thread
    depth: np.ndarray  # nesting depth of CPU slices (0 = top level); -1 for other events
    nest_end: np.ndarray  # end (µs) of each slice as used for nesting (see _nest)
    levels: tuple[np.ndarray, ...]  # CPU slice indices grouped by depth (levels[d])
    gpu_work: np.ndarray  # indices of kernel/memcpy/memset events
    launch: np.ndarray  # per gpu_work item: launching runtime call
    anchor: np.ndarray  # per gpu_work item: CPU event it is attributed through
    backward_node: np.ndarray  # nearest enclosing-or-self backward node op
    backward_region: np.ndarray  # nearest enclosing-or-self backward node op or engine wrapper
    forward_op: np.ndarray  # for backward node ops: the forward op that created them
    nesting_conflicts: int  # slices that overlapped their parent without being inside it

    def nearest(self, mask: np.ndarray, include_self: bool = True) -> np.ndarray:
        """For every event, the innermost enclosing CPU slice where ``mask`` is true."""
        return _nearest(self.parent, self.levels, mask, include_self)

    def outermost(self, skip: np.ndarray) -> np.ndarray:
        """For every CPU slice, its top-level ancestor (or itself), looking through ``skip``
        slices (such as ProfilerStep#N) as if they were not there."""
        n = len(self.parent)
        out = np.full(n, -1, self.parent.dtype)
        if self.levels:
            out[self.levels[0]] = self.levels[0]
        for level in self.levels[1:]:
            p = self.parent[level]
            out[level] = np.where(skip[p], level, out[p])
        return out


def link(trace: Trace) -> Links:
    ev = trace.events
    n = len(ev)
    index = index_dtype(n)
    kind = ev.kind
    cpu_mask = np.isin(kind, schema.CPU_SLICE_KINDS) & np.isfinite(ev.ts)
    parent, depth, nest_end, conflicts = _nest(ev.thread, ev.ts, ev.dur, np.flatnonzero(cpu_mask), n)
    del cpu_mask
    levels = _levels(depth)

    gpu_work = np.flatnonzero(np.isin(kind, schema.GPU_WORK_KINDS) & np.isfinite(ev.ts))
    gpu_work = gpu_work.astype(index)
    launch = _join(
        ev.correlation[gpu_work],
        np.flatnonzero((kind == Kind.RUNTIME) & (ev.correlation >= 0)),
        ev.correlation,
        index,
    )
    by_external = _join(
        ev.external_id[gpu_work],
        np.flatnonzero(np.isin(kind, (Kind.CPU_OP, Kind.ANNOTATION)) & (ev.external_id >= 0)),
        ev.external_id,
        index,
    )
    anchor = np.where(launch >= 0, launch, by_external)

    is_bwd_node = _backward_node_mask(trace)
    backward_node = _nearest(parent, levels, is_bwd_node)
    # work under the autograd engine's wrapper is backward even without a sequence number
    # (AccumulateGrad, DDP's gradient hooks)
    wrapper = (kind == Kind.CPU_OP) & trace.events.named(
        lambda s: s.startswith(schema.BACKWARD_WRAPPER_PREFIX)
    )
    backward_region = _nearest(parent, levels, is_bwd_node | wrapper)
    forward_op = _forward_ops(trace, is_bwd_node)
    return Links(
        parent=parent,
        depth=depth,
        nest_end=nest_end,
        levels=levels,
        gpu_work=gpu_work,
        launch=launch,
        anchor=anchor,
        backward_node=backward_node,
        backward_region=backward_region,
        forward_op=forward_op,
        nesting_conflicts=conflicts,
    )


#: a child that outlives its parent by at most this much (ns) is clipped to the parent's end
_CLIP_TOLERANCE_NS = 1000
#: largest offset or duration (ns, about 36 years) the integer nesting arithmetic takes
_MAX_NS = float(2**60)


def _nest(
    thread: np.ndarray, ts: np.ndarray, dur: np.ndarray, cpu: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Parent and depth of every CPU slice, and the effective end (µs) used for nesting.

    Real traces are not always properly nested: a Python frame may open before a
    ``record_function`` and close inside it, or a child may end a rounding error after its
    parent. A child that outlives its parent by a rounding error is clipped to the parent's end;
    otherwise the parent is cut at the child's start, so that the two become siblings. The
    nesting is recomputed until no conflict remains; the number of conflicts is reported.
    """
    parent = np.full(n, -1, index_dtype(n))
    depth = np.full(n, -1, np.int32)
    nest_end = ts + dur
    if len(cpu) == 0:
        return parent, depth, nest_end, 0
    # integer nanoseconds: exact ties, and a half-step trick for zero-length slices below
    t0 = ts[cpu].min()
    # Clipped so that corrupt values (a slice thousands of years long) cannot overflow int64
    # here or in _nest_sorted (2 * end); casting an out-of-range float is undefined.
    start, end = _rounded_ns(ts[cpu] - t0), _rounded_ns(dur[cpu])
    end += start
    thr = thread[cpu]
    order = _by_thread_start_longest(thr, start, end)
    # one array re-ordered at a time: the old one is freed before the next is copied
    start = start[order]
    end = end[order]
    thr = thr[order]
    idx = cpu[order]
    del order
    bounds = np.flatnonzero(np.diff(thr)) + 1
    conflicts = 0
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(idx)]):
        s, e, ids = start[lo:hi], end[lo:hi].copy(), idx[lo:hi]
        d, p, has = _nest_sorted(s, e)
        bad = has & (e > e[p])
        if bad.any():
            # Resolving a conflict only shortens slices, and only those around it change:
            # each window of slices that holds conflicts is resolved apart (a few hundred
            # slices, where resolving the whole thread again and again took most of the time
            # of a real trace's analysis: nine passes over 99,000 slices for 31 conflicts).
            conflicts += int(np.count_nonzero(bad))
            for lo, hi in _conflict_windows(s, e, p, has, bad):
                w = slice(lo, hi)
                e_w, ids_w, d_w, p_w, has_w = _resolved(s[w], e[w].copy(), ids[w].copy())
                # the window's first slice keeps its depth and parent (see _conflict_windows)
                top = ~has_w
                e[w], ids[w], d[w] = e_w, ids_w, d_w + d[lo]
                p[w] = np.where(top, p[lo], p_w + lo)
                has[w] = np.where(top, has[lo], has_w)
        parent[ids] = np.where(has, ids[p], -1)
        depth[ids] = d
        nest_end[ids] = t0 + e / 1000.0
    return parent, depth, nest_end, conflicts


def _conflict_windows(
    s: np.ndarray, e: np.ndarray, p: np.ndarray, has: np.ndarray, bad: np.ndarray
) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of positions (slices sorted by (start, -end), nested once: local
    parent positions ``p``) that hold every conflict (a slice ``bad`` that outlives its parent)
    and that resolving conflicts changes apart from the rest of the thread, disjoint.

    A window starts at a slice (``lo``) and holds every later slice that starts before the
    window's slices have all ended (it is closed: the slice at ``hi`` starts after them). The
    slices open when it starts (its frame: ``lo``'s ancestors) end after each of its slices
    and are open at its last start, so that its slices stay inside them whatever resolving
    does: ends only get shorter. Then resolving the window apart gives what resolving the whole
    thread gives: the frame's slices are the same number of levels above every slice of the
    window, its slices at its first level keep ``lo``'s parent, the slices after it are neither
    deeper nor children of its slices, and slices keep their places (starts do not change).
    A window starts at the parent of a conflicting slice, or further up until its frame holds."""
    closes = 2 * e + (e == s)  # as _nest_sorted: a zero-length slice ends after its start
    starts2 = 2 * s
    windows: list[tuple[int, int]] = []
    for b in np.flatnonzero(bad).tolist():
        if windows and b < windows[-1][1]:
            continue  # in the last window (bad slices come in order; windows do not cross)
        lo = int(p[b])
        while True:
            close, hi = int(closes[lo]), lo + 1
            while True:  # the slices that start before the window's have all ended
                nxt = int(np.searchsorted(starts2, close, side="left"))
                if nxt <= hi:
                    break
                close = max(close, int(closes[hi:nxt].max()))
                hi = nxt
            end = int(e[lo:hi].max())
            last_start = int(starts2[hi - 1])
            f, holds = lo, True
            while has[f]:
                f = int(p[f])
                if e[f] < end or closes[f] <= last_start:
                    holds = False
                    break
            if holds:
                break
            lo = int(p[lo])  # the frame fails further up: start the window at lo's parent
        while windows and windows[-1][1] > lo:  # windows nest or follow each other
            windows.pop()
        windows.append((lo, hi))
    return windows


def _resolved(
    s: np.ndarray, e: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Slices sorted by (start, -end) nested again and again until none overlaps its parent
    without being inside it (at most 32 times): the ends, the event indices in their new order,
    and the depth, local parent position and has-parent mask of the last nesting."""
    for _attempt in range(32):
        d, p, has = _nest_sorted(s, e)
        bad = has & (e > e[p])
        if not bad.any():
            break
        small = bad & (e - e[p] <= _CLIP_TOLERANCE_NS)
        big = bad & ~small
        if not small.any() and not (s[big] < e[p[big]]).any():
            # nothing changes (a child that starts where its zero-length parent is): every
            # pass left would find the same conflicts and change nothing either (one trace
            # spent 23 of its 33 passes so)
            break
        e[small] = e[p[small]]
        np.minimum.at(e, p[big], s[big])
        if not _in_nesting_order(s, e):  # only ties of start whose ends changed move
            o = np.lexsort((-e, s))
            s, e, ids = s[o], e[o], ids[o]
    return e, ids, d, p, has


def _in_nesting_order(s: np.ndarray, e: np.ndarray) -> bool:
    """Whether slices are in the order ``np.lexsort((-e, s))`` gives (by start, longest first;
    a stable sort leaves them where they are when they already are)."""
    later = s[1:] > s[:-1]
    return bool((later | ((s[1:] == s[:-1]) & (e[1:] <= e[:-1]))).all())


def _by_thread_start_longest(thr: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The order of ``np.lexsort((-end, start, thr))`` (by thread, start, then longest first;
    ties by position), sorted the way trace columns make cheap: a stable sort by start (the
    events come nearly in time order, which the stable sort runs through), then by end only
    within runs of equal starts, then a stable sort by thread (a radix sort of codes)."""
    order = np.argsort(start, kind="stable")
    s = start[order]
    tied = np.zeros(len(s), bool)  # in a run of two or more equal starts
    same = s[1:] == s[:-1]
    tied[1:] |= same
    tied[:-1] |= same
    if tied.any():
        at = np.flatnonzero(tied)
        run = np.cumsum(~same[at[1:] - 1])  # runs are contiguous: a new run where the start changes
        run = np.concatenate([[0], run])
        order[at] = order[at][np.lexsort((-end[order[at]], run))]
    codes = thr[order]
    if len(codes) and codes.min() >= np.iinfo(np.int16).min and codes.max() <= np.iinfo(np.int16).max:
        codes = codes.astype(np.int16)  # a stable sort of 16-bit integers is a radix sort
    ordered: np.ndarray = order[np.argsort(codes, kind="stable")]
    return ordered


def _rounded_ns(us: np.ndarray) -> np.ndarray:
    """Microseconds (a temporary array, changed in place) as int64 nanoseconds, clipped to
    [0, _MAX_NS]."""
    with np.errstate(over="ignore", invalid="ignore"):
        us *= 1000.0
        np.clip(us, 0.0, _MAX_NS, out=us)
    np.rint(us, out=us)
    return us.astype(np.int64)


def _nest_sorted(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth, local parent position and has-parent mask of slices sorted by (start, -end)."""
    m = len(s)
    # A slice j closes before slice i starts when end_j <= start_i; a zero-length slice is
    # treated as ending half a nanosecond after its start, so it never closes itself.
    closes = np.sort(2 * e + (e == s))
    d = np.maximum(np.arange(m) - _sorted_search(closes, 2 * s), 0)
    # parent: the last earlier slice one level up
    key = d * m + np.arange(m)
    # the slices by (depth, position): a stable sort by depth, a radix sort where depths fit
    # 16 bits
    by_key = np.argsort(d.astype(np.int16) if m and d.max() < 2**15 else key, kind="stable")
    # searched in the order of the keys, where the searches come sorted too (a binary search
    # in a random order of 99,000 searches took 40% of the nesting)
    ordered = key[by_key]
    pos = np.empty(m, np.int64)
    pos[by_key] = np.searchsorted(ordered, ordered - m, side="right") - 1
    del ordered
    has = (d > 0) & (pos >= 0)
    cand = np.where(has, by_key[np.clip(pos, 0, m - 1)], 0)
    has &= d[cand] == d - 1
    return d, np.where(has, cand, 0), has


#: the most values (both arrays together) :func:`_sorted_search` merges: its merge holds three
#: arrays of that length at once (6 MB here), where a binary search needs its result only; past
#: it (a thread of more than 131,000 slices) the binary search keeps the memory that a large
#: trace's nesting takes as it was
_MERGE_MAX = 1 << 18


def _sorted_search(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``np.searchsorted(a, v, side="right")`` for ``a`` and ``v`` both sorted: one stable merge
    of the two (a sort that finds two sorted runs), where a binary search per value jumps
    about ``a`` (four times slower on a thread of 99,000 slices)."""
    if not len(a) or not len(v) or len(a) + len(v) > _MERGE_MAX:
        return np.searchsorted(a, v, side="right")
    merged = np.argsort(np.concatenate([a, v]), kind="stable")  # equal values of a come first
    found: np.ndarray = np.flatnonzero(merged >= len(a)) - np.arange(len(v))
    return found


def _nearest(
    parent: np.ndarray, levels: tuple[np.ndarray, ...], mask: np.ndarray, include_self: bool = True
) -> np.ndarray:
    out = np.full(len(parent), -1, parent.dtype)
    for level in levels[1:]:
        p = parent[level]
        out[level] = np.where(mask[p], p, out[p])
    if include_self:
        itself = np.flatnonzero(mask)  # in place: no second array of every event
        out[itself] = itself
    return out


def _levels(depth: np.ndarray) -> tuple[np.ndarray, ...]:
    cpu = np.flatnonzero(depth >= 0)
    if len(cpu) == 0:
        return ()
    d = depth[cpu]
    order = np.argsort(d, kind="stable")
    cpu, d = cpu[order].astype(index_dtype(len(depth))), d[order]
    cuts = np.searchsorted(d, np.arange(d[-1] + 2))
    return tuple(cpu[cuts[k] : cuts[k + 1]] for k in range(d[-1] + 1))


def _join(
    keys: np.ndarray, candidates: np.ndarray, column: np.ndarray, index: type[np.signedinteger]
) -> np.ndarray:
    """For each key, the first candidate event whose ``column`` equals it (-1 if none), as
    ``index`` integers."""
    out = np.full(len(keys), -1, index)
    if len(candidates) == 0 or len(keys) == 0:
        return out
    cand_keys = column[candidates]
    order = np.argsort(cand_keys, kind="stable")
    sk = cand_keys[order]
    pos = np.searchsorted(sk, keys)
    ok = (keys >= 0) & (pos < len(sk))
    ok[ok] &= sk[pos[ok]] == keys[ok]
    out[ok] = candidates[order[pos[ok]]]
    return out


def _backward_node_mask(trace: Trace) -> np.ndarray:
    ev = trace.events
    op = (ev.kind == Kind.CPU_OP) & (ev.sequence_number >= 0)
    by_name = trace.events.named(
        lambda s: s.startswith(schema.BACKWARD_WRAPPER_PREFIX) or schema.BACKWARD_NODE_RE.match(s),
    )
    mask: np.ndarray = op & ((ev.fwd_thread_id > 0) | ((ev.fwd_thread_id < 0) & by_name))
    return mask


def _forward_ops(trace: Trace, is_bwd_node: np.ndarray) -> np.ndarray:
    """For each backward node op, the last-started forward op with its sequence number on the
    forward thread that its ``Fwd thread id`` names."""
    ev = trace.events
    n = len(ev)
    out = np.full(n, -1, index_dtype(n))
    bwd = np.flatnonzero(is_bwd_node)
    fwd = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.sequence_number >= 0) & ~is_bwd_node)
    if len(bwd) == 0 or len(fwd) == 0:
        return out
    # forward ops ordered by (sequence number, start): the last of a run is the innermost
    order = np.lexsort((ev.ts[fwd], ev.sequence_number[fwd]))
    fwd = fwd[order]
    fseq = ev.sequence_number[fwd]
    last_of_seq = np.searchsorted(fseq, ev.sequence_number[bwd], side="right") - 1
    found = (last_of_seq >= 0) & (fseq[np.clip(last_of_seq, 0, None)] == ev.sequence_number[bwd])
    # learn which OS thread each "Fwd thread id" index stands for (majority vote)
    index = ev.fwd_thread_id[bwd]
    voted_thread = ev.thread[fwd[np.clip(last_of_seq, 0, None)]]
    thread_of_index: dict[int, int] = {}
    votes = _pair_counts(index[found], voted_thread[found])
    for (k, t), _count in sorted(votes, key=lambda x: x[1]):
        thread_of_index[k] = t  # ascending by count: the most voted thread wins
    # exact lookup by (thread, sequence number), innermost (last started) op; one int64 key
    # of the thread and the sequence number's rank among those of these ops (below 2**31
    # whatever the numbers, which may be int64)
    _, rank = np.unique(np.concatenate([fseq, ev.sequence_number[bwd]]), return_inverse=True)
    rank = rank.ravel()
    key_f = ev.thread[fwd].astype(np.int64) << 32 | rank[: len(fwd)]
    order = np.lexsort((ev.ts[fwd], key_f))
    key_sorted, fwd_sorted = key_f[order], fwd[order]
    want_thread = _mapped(index, thread_of_index)
    key_b = want_thread << 32 | rank[len(fwd) :]
    pos = np.searchsorted(key_sorted, key_b, side="right") - 1
    ok = (want_thread >= 0) & (pos >= 0)
    ok[ok] &= key_sorted[pos[ok]] == key_b[ok]
    out[bwd[ok]] = fwd_sorted[pos[ok]]
    return out


def _mapped(values: np.ndarray, mapping: dict[int, int]) -> np.ndarray:
    """``mapping[v]`` for every value (-1 where it has none), as int64: a binary search among
    the mapping's sorted keys."""
    if not mapping:
        return np.full(len(values), -1, np.int64)
    keys = np.array(sorted(mapping), np.int64)
    targets = np.array([mapping[k] for k in keys.tolist()], np.int64)
    pos = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
    out: np.ndarray = np.where(keys[pos] == values, targets[pos], -1)
    return out


def _pair_counts(first: np.ndarray, second: np.ndarray) -> list[tuple[tuple[int, int], int]]:
    """The distinct pairs (first[i], second[i]), ascending, each with its count, as
    ``np.unique`` of the stacked pairs (``axis=0``, ``return_counts``) gives them. Pairs whose
    values fit (first a 32-bit signed, second a 32-bit unsigned integer) are counted as one
    int64 key each, in one sort, and keep the order of the pairs."""
    if not len(first):
        return []
    fits = first.min() >= -(2**31) and first.max() < 2**31 and second.min() >= 0 and second.max() < 2**32
    if not fits:
        uniq, counts = np.unique(np.stack([first, second], axis=1), axis=0, return_counts=True)
        return list(zip(map(tuple, uniq.tolist()), counts.tolist()))
    key = np.sort(first.astype(np.int64) << 32 | second.astype(np.int64))
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, len(key)])
    distinct = key[starts]
    pairs = zip((distinct >> 32).tolist(), (distinct & 0xFFFFFFFF).tolist())
    return list(zip(pairs, counts.tolist()))
