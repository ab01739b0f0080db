"""Tiny models captured eager and compiled (``torch.compile``) for the capture and analysis tests.

:func:`capture_compiled_traces` writes, for each case, one trace of a training step (forward,
loss, backward, optimizer step) of the eager model and one of the same model compiled, both
through ``traceprof.capture.profile`` (schedule ``wait=0, warmup=1, active=1``: the warmup step
compiles, the active step is the one in the trace). The cases cover the ways users compile:

- ``gpt``: a GPT-style decoder (``sample_models.GPT``: embeddings, 2 blocks of LayerNorm +
  causal self-attention through ``F.scaled_dot_product_attention`` + a GELU MLP, final
  LayerNorm, head tied to the embedding), ``torch.compile(model)`` handed to the session;
- ``cnn``: conv, BatchNorm, ReLU, pooling, linear, ``model.compile()`` in place;
- ``graph_break``: ``torch._dynamo.graph_break()`` in ``forward`` (two compiled regions),
  ``torch.compile(model)``;
- ``per_block``: the GPT's blocks compiled one by one (``block.compile()``), the rest eager.

``join_compiled_events`` is a reference implementation of the join an analyzer makes: every
direct child of a ``## Call CompiledFxGraph <key> ##`` scope matched, in order, to a call site
of the trace's compiled-kernel table.

Importing this module imports torch.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import traceprof.capture as capture
from traceprof.capture import sample_models as sm
from traceprof.capture.compiled import decode_table
from traceprof.trace.schema import COMPILED_KERNEL_PREFIX_RE as KERNEL_PREFIX_RE
from traceprof.trace.schema import COMPILED_TABLE_KEY

CASES = ("gpt", "cnn", "graph_break", "per_block")

CALL_RE = re.compile(r"## Call CompiledFxGraph (\S+) ##\Z")
REGION_RE = re.compile(r"Torch-Compiled Region: (\S+)\Z")
SCOPE_RE = re.compile(r"\[traceprof:1\]([^:]*): ?(.*)\Z")


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


class GraphBreakMLP(nn.Module):
    """Two compiled regions: ``a`` before an explicit graph break, ``b`` and ``head`` after it."""

    def __init__(self, d: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d), nn.GELU())
        self.b = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        torch._dynamo.graph_break()
        x = x + self.b(x)
        return self.head(torch.tanh(x))


def tiny_gpt() -> sm.GPT:
    return sm.GPT(sm.GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32))


def make_case(name: str) -> tuple[nn.Module, Callable[[nn.Module], nn.Module], tuple, Callable]:
    """``(model, compile(model) -> what to call, inputs, loss(output))`` of one case."""
    gen = torch.Generator().manual_seed(0)
    if name in ("gpt", "per_block"):
        model: nn.Module = tiny_gpt()
        idx = torch.randint(0, 64, (2, 8), generator=gen)
        targets = torch.roll(idx, -1, dims=1)

        def lm_loss(out: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(out.flatten(0, 1), targets.flatten())

        if name == "gpt":
            return model, torch.compile, (idx,), lm_loss

        def per_block(m: nn.Module) -> nn.Module:
            for block in m.transformer.h:  # type: ignore[union-attr]
                block.compile()
            return m

        return model, per_block, (idx,), lm_loss
    if name == "cnn":
        model = SmallCNN()
        x = torch.randn(4, 3, 16, 16, generator=gen)
        y = torch.randint(0, 10, (4,), generator=gen)

        def in_place(m: nn.Module) -> nn.Module:
            m.compile()
            return m

        return model, in_place, (x,), lambda out: F.cross_entropy(out, y)
    if name == "graph_break":
        model = GraphBreakMLP()
        x = torch.randn(4, 32, generator=gen)
        y = torch.randint(0, 10, (4,), generator=gen)
        return model, torch.compile, (x,), lambda out: F.cross_entropy(out, y)
    raise ValueError(f"unknown case {name!r}")


def capture_case(name: str, out_dir: Path, threads: int | None = None) -> tuple[str, str]:
    """``(eager_path, compiled_path)``: one training step of case ``name`` each, traced."""
    torch.manual_seed(0)
    model, compile_model, inputs, loss_of = make_case(name)
    eager = copy.deepcopy(model)
    paths = []
    for label, net in (("eager", eager), ("compiled", compile_model(model))):
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        path = out_dir / f"{name}_{label}.pt.trace.json.gz"
        with capture.profile(net, wait=0, warmup=1, active=1, _trace_file=path) as prof:
            for _ in range(2):  # warmup (compiles), active
                loss_of(net(*inputs)).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                prof.step()
        if prof.trace_paths != [str(path)]:
            raise RuntimeError(f"{name} {label}: expected one trace, got {prof.trace_paths}")
        paths.append(str(path))
    return paths[0], paths[1]


def capture_compiled_traces(out_dir: Path) -> dict[str, tuple[str, str]]:
    """name -> ``(eager_path, compiled_path)`` for every case of :data:`CASES`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {name: capture_case(name, out_dir) for name in CASES}


# -- reading a trace back ------------------------------------------------------------------------


def load_trace(path: str) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def compiled_table(trace: dict[str, Any]) -> dict[str, Any] | None:
    payload = trace.get(COMPILED_TABLE_KEY)
    return decode_table(payload) if payload is not None else None


def nested_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's slices, each with ``_parent`` and ``_children`` (nesting by time per thread)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    by_thread: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack: list[dict[str, Any]] = []
        for e in evs:
            end = e["ts"] + e.get("dur", 0)
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < end - 1e-3:
                stack.pop()
            e["_parent"] = stack[-1] if stack else None
            e["_children"] = []
            if stack:
                stack[-1]["_children"].append(e)
            stack.append(e)
    return events


def ancestors(e: dict[str, Any]) -> Iterator[dict[str, Any]]:
    p = e["_parent"]
    while p is not None:
        yield p
        p = p["_parent"]


def enclosing_scope(e: dict[str, Any]) -> str | None:
    for a in ancestors(e):
        m = SCOPE_RE.match(a["name"])
        if m:
            return m.group(2)
    return None


def _find_graph(table: dict[str, Any], key: str, call: dict[str, Any]) -> dict[str, Any] | None:
    graphs = table["graphs"]
    if key in graphs:
        return graphs[key]
    backward = any(a["name"] == "CompiledFunctionBackward" for a in ancestors(call))
    directions = {"backward"} if backward else {"forward", "inference"}
    prefixes = {m.group(0) for c in call["_children"] for m in [KERNEL_PREFIX_RE.match(c["name"])] if m}
    found = [
        g
        for g in graphs.values()
        if g["key"] is None and g["direction"] in directions and prefixes & set(g["event_prefixes"])
    ]
    return found[0] if len(found) == 1 else None


def join_compiled_events(trace: dict[str, Any]) -> dict[str, Any]:
    """Match every direct child of every ``## Call CompiledFxGraph`` scope to the table.

    Returns counts (``events``, ``matched``, ``with_module``, ``graph_runs``,
    ``orphan_kernel_events``: ``graph_<n>_`` events outside any Call scope), the time per full
    module path (the enclosing traceprof scope, or the compile's root, + the call site's module)
    and the names of unmatched events.
    """
    table = compiled_table(trace) or {"graphs": {}, "compiles": []}
    events = nested_events(trace)
    forward_by_seq = {
        e["args"]["Sequence number"]: e
        for e in events
        if e["name"] == "CompiledFunction" and "Sequence number" in e.get("args", {})
    }
    counts: Counter[str] = Counter()
    per_module: Counter[str] = Counter()
    unmatched: list[str] = []
    for call in events:
        m = CALL_RE.match(call["name"])
        if not m:
            continue
        counts["graph_runs"] += 1
        graph = _find_graph(table, m.group(1), call)
        prefix = enclosing_scope(call)
        if prefix is None:  # a backward run: the scope of its forward
            for a in ancestors(call):
                if a["name"] == "CompiledFunctionBackward":
                    forward = forward_by_seq.get(a.get("args", {}).get("Sequence number"))
                    if forward is not None:
                        prefix = enclosing_scope(forward)
                    break
        if prefix is None and graph is not None:
            roots = {c["root"] for c in table["compiles"] if c["key"] == graph["table_key"]}
            prefix = roots.pop() if len(roots) == 1 and None not in roots else ""
        sites = graph["calls"] if graph is not None else []
        pos = 0
        for child in sorted(call["_children"], key=lambda e: e["ts"]):
            counts["events"] += 1
            site = None
            for j in range(pos, len(sites)):
                if sites[j]["event"] == child["name"]:
                    site, pos = sites[j], j + 1
                    break
            if site is None and pos < len(sites) and sites[pos]["event"] is None:
                site, pos = sites[pos], pos + 1  # an extern kernel whose event name is unknown
            if site is None:
                unmatched.append(child["name"])
                continue
            counts["matched"] += 1
            if site.get("module") is not None:
                counts["with_module"] += 1
                path = ".".join(p for p in (prefix, site["module"]) if p)
                per_module[path] += child.get("dur", 0)
    counts["orphan_kernel_events"] = sum(
        1
        for e in events
        if KERNEL_PREFIX_RE.match(e["name"]) and not any(CALL_RE.match(a["name"]) for a in ancestors(e))
    )
    return {"counts": dict(counts), "per_module": dict(per_module), "unmatched": unmatched}
