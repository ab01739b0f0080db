"""FLOP rules per op family, applied the same way to every op (docs/flops.md, "Op families"):
comparisons, selection by value and sorting count their comparisons of floating-point values;
selection by index or mask and index building count bytes, no FLOPs; the unsupported list holds
exactly the ops without a rule."""

from __future__ import annotations

import re

import pytest

import traceprof
from traceprof.analysis.link import link
from traceprof.analysis.op_costs import count_ops
from traceprof.flops import REGISTRY, Family

from .conftest import REPO
from .tracebuilder import TraceBuilder

F, L, S = "float", "long int", "Scalar"


def family_table() -> dict[str, list[str]]:
    """The registry family of each row of docs/flops.md's op-family table, and its ops."""
    text = (REPO / "docs" / "flops.md").read_text(encoding="utf-8")
    section = text.split("### Op families", 1)[1].split("\n\n", 2)[2]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| family") or line.startswith("|---"):
            if rows and not line.startswith("|"):
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        family = re.search(r"\(`(\w+)`\)", cells[0])[1]
        rows.setdefault(family, []).extend(re.findall(r"`(\w+)`", cells[1]))
    return rows


def test_every_op_of_the_doc_table_has_its_familys_formula():
    table = family_table()
    assert set(table) == {"pointwise", "reduction", "sorting", "memory"}
    for family, ops in table.items():
        for op in ops:
            entry = REGISTRY.get(f"aten::{op}")
            assert entry is not None and entry.has_cost, f"aten::{op} has no formula"
            assert entry.family is Family(family), f"aten::{op} is {entry.family.value}, not {family}"


def test_no_op_that_compares_or_selects_is_a_zero_by_declaration():
    """Views, metadata, allocation, wrappers and communication have no cost by definition;
    selection and sorting are not among them (topk of floats was a silent zero)."""
    free = {e.name for e in REGISTRY if not e.has_cost}
    for ops in family_table().values():
        assert not free & {f"aten::{op}" for op in ops}


def _load(b: TraceBuilder, tmp_path):
    return traceprof.load_trace(b.write(tmp_path / "t.json"), cache=False)


def test_the_unsupported_list_holds_exactly_the_ops_without_a_rule(tmp_path):
    """A router's ops (topk of float scores, one_hot of the picks, where, gather, nonzero) are
    counted by their families' rules; an op no rule covers is listed, alone."""
    b = TraceBuilder()
    ops = [
        ("aten::topk", [[16, 8], [], [], [], []], [F, S, S, S, S], ["", "2", "-1", "True", "True"]),
        ("aten::one_hot", [[16, 2], []], [L, S], ["", "8"]),
        ("aten::where", [[16, 8], [16, 8], [16, 8]], ["bool", F, F], ["", "", ""]),
        ("aten::gather", [[16, 8], [], [16, 2], []], [F, S, L, S], ["", "1", "", "False"]),
        ("aten::nonzero", [[16, 8]], ["bool"], [""]),
        ("aten::sort", [[16, 8], [], []], [F, S, S], ["", "1", "False"]),
        ("mylib::route_tokens", [[16, 8]], [F], [""]),  # no rule: unsupported
    ]
    for k, (name, dims, types, concrete) in enumerate(ops):
        b.shaped_op(name, 10.0 * k, 5.0, dims, types, concrete)
    trace = _load(b, tmp_path)
    costs = count_ops(trace, link(trace))
    assert list(costs.labels) == ["mylib::route_tokens"]
    flops = {trace.events.names[trace.events.name[e]]: f for e, f in zip(costs.counted.tolist(), costs.flops)}
    assert flops["aten::topk"] == flops["aten::sort"] == 16 * 8  # one comparison per element
    assert (
        flops["aten::one_hot"] == flops["aten::where"] == flops["aten::gather"] == flops["aten::nonzero"] == 0
    )


def test_a_moe_routers_topk_is_counted_in_its_module(tmp_path):
    """A tiny Mixtral (from its config) on CPU: the router's topk of float logits counts one
    comparison per score, in the gate's module; nothing of the layer is unsupported."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    model = transformers.MixtralModel(config).eval()
    tokens = torch.randint(0, 64, (2, 8))
    trace = traceprof.profile_once(model, tokens, path=tmp_path / "mixtral.pt.trace.json.gz")
    p = trace.analyze(cache=False)
    p.self_check()
    assert p.flops.unsupported == ()
    gate = p.find("layers.0.mlp.gate")
    topk = [o for o in gate.ops if o.name == "aten::topk"]
    assert topk and sum(o.flops for o in topk) == 2 * 8 * 4  # tokens x experts scores compared
