"""Reading a generated trace back and checking its invariants (for tests of the generator itself):
slices nest on every thread and stream, every GPU event has its launch, every backward node its
forward op, and the counts are the expectations'.

It reads the whole file into memory, unlike the writer; use it on small traces or with memory to
spare.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Mapping
from typing import Any

import orjson

from traceprof.testing.program import BASE_TIME_NS, BWD_TID, MAIN_TID, PID, PREFIX, Event


class _Index:
    """The complete events of a trace, grouped as the checks read them."""

    def __init__(self, evs: list[Event], problems: list[str]) -> None:
        self.by_thread: dict[tuple[int | str, int | str], list[Event]] = {}
        self.launches: dict[int, Event] = {}  # runtime calls by correlation
        self.kernels: list[Event] = []  # GPU work: kernels, memcpys and memsets
        self.n_steps = self.n_scopes = 0
        for e in evs:
            if e.get("ph") == "X":
                self._add(e, problems)

    def _add(self, e: Event, problems: list[str]) -> None:
        self.by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
        cat = e.get("cat")
        if cat == "cuda_runtime":
            c = e["args"]["correlation"]
            if c in self.launches:
                problems.append(f"duplicate runtime correlation {c}")
            self.launches[c] = e
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            self.kernels.append(e)
        elif cat == "user_annotation":
            if e["name"].startswith("ProfilerStep#"):
                self.n_steps += 1
            elif e["name"].startswith(PREFIX):
                self.n_scopes += 1
        for field in ("ts", "dur"):
            v = e[field]
            if isinstance(v, float) and round(v, 3) != v:
                problems.append(f"{field} {v} has more than 3 decimals")


def _load(path: str) -> Any:
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return orjson.loads(data)


def _check_nesting(key: tuple[int | str, int | str], lst: list[Event], problems: list[str]) -> None:
    """The slices of one thread or stream nest (a stack check on events sorted by start, longest
    first); sorts ``lst`` so."""
    lst.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack: list[int] = []
    for e in lst:
        s, d = round(e["ts"] * 1000), round(e["dur"] * 1000)
        while stack and stack[-1] <= s:
            stack.pop()
        if stack and s + d > stack[-1]:
            problems.append(f"partial overlap on {key}: {e['name'][:60]} at {e['ts']}")
            break
        stack.append(s + d)


def _forward_scopes(lst: list[Event], seq_scope: dict[int, str | None], problems: list[str]) -> None:
    """Which innermost module scope each forward sequence number of the main thread's events
    (sorted by start) lives in, into ``seq_scope``."""
    scope_stack: list[tuple[int, str]] = []
    for e in lst:
        s = round(e["ts"] * 1000)
        while scope_stack and scope_stack[-1][0] <= s:
            scope_stack.pop()
        if e["name"].startswith(PREFIX):
            scope_stack.append((s + round(e["dur"] * 1000), e["name"]))
        sn = e.get("args", {}).get("Sequence number")
        if sn is not None:
            inner = scope_stack[-1][1] if scope_stack else None
            if seq_scope.setdefault(sn, inner) != inner:
                problems.append(f"sequence number {sn} in two module scopes")


def _check_launches(kernels: list[Event], launches: dict[int, Event], problems: list[str]) -> None:
    """Every GPU event has its own launch, before it, with the same External id."""
    seen: set[int] = set()
    for k in kernels:
        c = k["args"]["correlation"]
        r = launches.get(c)
        if r is None:
            problems.append(f"kernel correlation {c} has no launch")
            continue
        if c in seen:
            problems.append(f"correlation {c} used by two GPU events")
        seen.add(c)
        if not k["ts"] > r["ts"]:
            problems.append(f"kernel {c} starts before its launch")
        if k["args"]["External id"] != r["args"]["External id"]:
            problems.append(f"kernel {c} External id differs from its launch")


def _check_backward(evs: list[Event], seq_scope: dict[int, str | None], problems: list[str]) -> None:
    """Every backward op's sequence number is a forward op's (the first one that is not, only)."""
    for e in evs:
        if (
            e.get("ph") == "X"
            and e.get("cat") == "cpu_op"
            and e["tid"] == BWD_TID
            and "Sequence number" in e["args"]
            and e["args"]["Sequence number"] not in seq_scope
        ):
            problems.append(f"backward op {e['name']} has no forward op")
            break


def validate(path: str, expect: Mapping[str, Any]) -> list[str]:
    """Check the invariants of a generated trace; returns a list of problems (empty: fine)."""
    doc = _load(path)
    problems: list[str] = []
    evs = doc["traceEvents"]
    if doc.get("baseTimeNanoseconds") != BASE_TIME_NS:
        problems.append("baseTimeNanoseconds missing")
    index = _Index(evs, problems)
    seq_scope: dict[int, str | None] = {}  # forward sequence number -> innermost module scope
    for key, lst in index.by_thread.items():
        _check_nesting(key, lst, problems)
        if key[0] == PID and key[1] == MAIN_TID:
            _forward_scopes(lst, seq_scope, problems)
    _check_launches(index.kernels, index.launches, problems)
    _check_backward(evs, seq_scope, problems)
    nk = sum(1 for k in index.kernels if k["cat"] == "kernel")
    streams = {k["tid"] for k in index.kernels}
    n_steps, n_scopes = index.n_steps, index.n_scopes
    if nk != expect["kernels"]:
        problems.append(f"kernels {nk} != expected {expect['kernels']}")
    if n_steps != expect["steps"]:
        problems.append(f"steps {n_steps} != expected {expect['steps']}")
    if n_scopes != expect["module_scopes_per_step"] * expect["steps"]:
        problems.append(f"module scopes {n_scopes} != expected")
    if len(streams) < 3:
        problems.append(f"only streams {streams}")
    print(
        f"validated {len(evs)} events: {nk} kernels on streams {sorted(streams)}, {n_steps} steps, "
        f"{n_scopes} module scopes, {len(seq_scope)} forward sequence numbers, "
        f"{len(index.by_thread)} threads/streams",
        file=sys.stderr,
    )
    return problems
