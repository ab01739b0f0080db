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


def validate(path: str, expect: Mapping[str, Any]) -> list[str]:
    """Check the invariants of a generated trace; returns a list of problems (empty: fine)."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    doc = orjson.loads(data)
    del data
    problems: list[str] = []
    evs = doc["traceEvents"]
    if doc.get("baseTimeNanoseconds") != BASE_TIME_NS:
        problems.append("baseTimeNanoseconds missing")
    by_thread: dict[tuple[int | str, int | str], list[Event]] = {}
    launches: dict[int, Event] = {}
    kernels: list[Event] = []
    seq_scope: dict[int, str | None] = {}  # forward sequence number -> innermost module scope
    n_steps = n_scopes = 0
    for e in evs:
        if e.get("ph") != "X":
            continue
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
        cat = e.get("cat")
        if cat == "cuda_runtime":
            c = e["args"]["correlation"]
            if c in launches:
                problems.append(f"duplicate runtime correlation {c}")
            launches[c] = e
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
        elif cat == "user_annotation":
            if e["name"].startswith("ProfilerStep#"):
                n_steps += 1
            elif e["name"].startswith(PREFIX):
                n_scopes += 1
        for field in ("ts", "dur"):
            v = e[field]
            if isinstance(v, float) and round(v, 3) != v:
                problems.append(f"{field} {v} has more than 3 decimals")
    # nesting per thread (stack check on events sorted by start, longest first)
    for key, lst in by_thread.items():
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
        if key[0] == PID and key[1] == MAIN_TID:
            # forward ops: which innermost module scope each sequence number lives in
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
    nk = sum(1 for k in kernels if k["cat"] == "kernel")
    streams = {k["tid"] for k in kernels}
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
        f"{len(by_thread)} threads/streams",
        file=sys.stderr,
    )
    return problems
