"""Lifetimes of allocations: each ``[memory]`` allocation paired with the free of its block.

An allocation (``Bytes`` > 0) and the free of the same block (``Bytes`` < 0) share the device
and the address (``Addr``). Sorted by device, address and time, a block's events alternate
allocation, free, allocation, free; so an allocation's free is the next event of its address
when that is a free. The ends the trace does not hold are open, and counted:

- **allocated before the trace**: a free whose allocation is not in the trace (the block was
  allocated before the profiler started) is alive from the trace's start to the free (CUDA's
  allocator writes these frees; the CPU allocator does not, and its ``Total Allocated`` counts
  from the start of profiling, so blocks allocated before are in none of its numbers);
- **alive at the trace's end**: an allocation without a later free is alive to the end;
- **a free missing**: an allocation followed by another allocation of the same address (no free
  between them: an event lost) ended when the address was allocated again (repaired, counted);
- **sizes that differ** between an allocation and its free: the allocation's is kept (counted).

Traces before 2022 write no address: no lifetimes (``Lifetimes.has_addresses`` False).

Vectorised: one sort of the memory events, no Python work per event.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceprof.trace.columns import Trace

NEVER = np.iinfo(np.int64).max  # the order position of a free that is not in the trace


class Lifetimes(msgspec.Struct, frozen=True):
    """One row per lifetime of a block: an allocation and its free, either end possibly open.

    Rows of ``trace.memory`` (-1: not in the trace) and, for comparisons in time, each event's
    position in the time order of all memory events (``order``: ts, then file order)."""

    alloc: np.ndarray  # row of the allocation, -1: allocated before the trace
    free: np.ndarray  # row of the free, -1: not freed in the trace (or its free is missing)
    nbytes: np.ndarray  # int64, > 0
    device: np.ndarray  # code into trace.memory.devices
    start: np.ndarray  # float64 trace time of the allocation, -inf before the trace
    end: np.ndarray  # float64 trace time of the free, +inf alive at the end
    start_order: np.ndarray  # int64 position of the allocation in ``order``, -1 before the trace
    end_order: np.ndarray  # int64 position of the free, NEVER alive at the end
    order: np.ndarray  # int64 per memory row: its position in time order
    has_addresses: bool  # False: the trace writes no addresses (no lifetimes)
    allocated_before: int  # frees whose allocation is before the trace
    alive_at_end: int  # allocations never freed in the trace
    free_missing: int  # allocations whose address was allocated again without a free
    size_mismatch: int  # pairs whose free has another size than the allocation
    without_address: int  # memory events without an address in a trace that has some

    def __len__(self) -> int:
        return len(self.alloc)

    def alive_at(self, position: int, device: int) -> np.ndarray:
        """Whether each lifetime on ``device`` holds its block just after the memory event at
        ``position`` of the time order (that event's allocation included, its free not)."""
        alive: np.ndarray = (
            (self.device == device) & (self.start_order <= position) & (self.end_order > position)
        )
        return alive


def no_lifetimes(n_rows: int = 0, has_addresses: bool = False) -> Lifetimes:
    z = np.zeros(0, np.int64)
    return Lifetimes(
        z,
        z,
        z,
        z.astype(np.int32),
        z.astype(float),
        z.astype(float),
        z,
        z,
        np.arange(n_rows, dtype=np.int64),
        has_addresses,
        0,
        0,
        0,
        0,
        0,
    )


def lifetimes(trace: Trace) -> Lifetimes:
    """The lifetimes of the trace's blocks (all its memory events, selected steps or not: a block
    allocated in one step may be freed in the next)."""
    mem = trace.memory
    if mem is None or not len(mem):
        return no_lifetimes()
    ev = trace.events
    n = len(mem)
    ts = ev.ts[mem.event].astype(np.float64)
    rows = np.arange(n, dtype=np.int64)
    by_time = np.lexsort((rows, ts))
    order = np.empty(n, np.int64)
    order[by_time] = rows
    del by_time
    address = mem.address.astype(np.int64)
    nbytes = mem.bytes.astype(np.int64)
    usable = (address >= 0) & (nbytes != 0)
    if not usable.any():
        return no_lifetimes(n)
    without_address = int(np.count_nonzero((address < 0) & (nbytes != 0)))
    # a block's events in time order: by device, address, then time
    idx = rows[usable]
    idx = idx[np.lexsort((order[idx], address[idx], mem.device[idx]))]
    dev, addr, b = mem.device[idx], address[idx], nbytes[idx]
    is_alloc = b > 0
    same_next = np.zeros(len(idx), bool)
    same_next[:-1] = (dev[1:] == dev[:-1]) & (addr[1:] == addr[:-1])
    next_free = np.zeros(len(idx), bool)
    next_free[:-1] = same_next[:-1] & ~is_alloc[1:]
    next_alloc = np.zeros(len(idx), bool)
    next_alloc[:-1] = same_next[:-1] & is_alloc[1:]
    prev_alloc = np.zeros(len(idx), bool)
    prev_alloc[1:] = same_next[:-1] & is_alloc[:-1]

    # allocations: closed by the next event of their block when it is a free
    a = np.flatnonzero(is_alloc)
    closed = next_free[a]
    reused = next_alloc[a]
    free_pos = np.where(closed | reused, a + 1, -1)
    alloc_rows = idx[a]
    free_rows = np.where(closed, idx[np.maximum(free_pos, 0)], -1)
    a_end_order = np.where(closed | reused, order[idx[np.maximum(free_pos, 0)]], NEVER)
    size_mismatch = int(np.count_nonzero(closed & (-b[np.maximum(free_pos, 0)] != b[a])))
    # frees without their allocation: allocated before the trace
    f = np.flatnonzero(~is_alloc & ~prev_alloc)
    before_rows = idx[f]

    alloc = np.concatenate([alloc_rows, np.full(len(f), -1, np.int64)])
    free = np.concatenate([free_rows, before_rows])
    start_order = np.concatenate([order[alloc_rows], np.full(len(f), -1, np.int64)])
    end_order = np.concatenate([a_end_order, order[before_rows]])
    all_ts = np.concatenate([ts, [np.inf]])
    end_row = np.concatenate([np.where(closed | reused, idx[np.maximum(free_pos, 0)], n), before_rows])
    return Lifetimes(
        alloc=alloc,
        free=free,
        nbytes=np.concatenate([b[a], -b[f]]),
        device=np.concatenate([dev[a], dev[f]]).astype(np.int32),
        start=np.concatenate([ts[alloc_rows], np.full(len(f), -np.inf)]),
        end=all_ts[end_row],
        start_order=start_order,
        end_order=end_order,
        order=order,
        has_addresses=True,
        allocated_before=len(f),
        alive_at_end=int(np.count_nonzero(~closed & ~reused)),
        free_missing=int(np.count_nonzero(reused)),
        size_mismatch=size_mismatch,
        without_address=without_address,
    )
