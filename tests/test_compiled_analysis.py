"""Compiled models: each kernel of a torch.compile graph lands in the module its nodes belong to,
through the compiled-kernel table (traceprof.analysis.compiled, docs/attribution.md "Compiled
models"). Tiny traces built in code for each rule, then real traces of tiny models captured eager
and compiled (the ``compiled_traces`` fixture, which needs torch and a C++ compiler)."""

from __future__ import annotations

import base64
import json
import re

import msgspec
import pytest
from msgspec import UNSET

import traceprof
from traceprof.analysis.compiled_args import node_cost, op_args
from traceprof.flops import REGISTRY, OpArgs
from traceprof.render.diff import render_diff
from traceprof.result.model import NodeKind
from traceprof.result.transforms import ignore_modules, limit_depth, top_children
from traceprof.trace.model import (
    CompiledCall,
    CompiledCompile,
    CompiledGraph,
    CompiledInput,
    CompiledNode,
    CompiledTable,
)
from traceprof.trace.schema import COMPILED_TABLE_KEY, COMPILED_TABLE_VERSION

from .tracebuilder import TraceBuilder

F32 = "float32"


def tensor(*shape, dtype=F32):
    return {"shape": list(shape), "dtype": dtype}


def node(op, inputs, module, cls=None, module_from="nn_module_stack", **extra) -> CompiledNode:
    return CompiledNode(
        op=op, inputs=tuple(inputs), module=module, module_class=cls, module_from=module_from, **extra
    )


def site(kind, event, nodes, module, primary=None, kernel=None) -> CompiledCall:
    return CompiledCall(
        kernel=kernel or event or "k",
        kind=kind,
        event=event,
        nodes=tuple(nodes),
        module=module,
        primary_node=primary if primary is not None else UNSET,
    )


def graph(key, direction, calls, nodes, graph_id=0, compile_ids=("0/0",), inputs=()) -> CompiledGraph:
    return CompiledGraph(
        key=key,
        table_key=key if key is not None else f"nokey:{graph_id}:{direction}",
        direction=direction,
        graph_id=graph_id,
        event_prefixes=(f"graph_{graph_id}_",),
        compile_ids=tuple(compile_ids),
        inputs=tuple(CompiledInput(**i) for i in inputs),
        calls=tuple(calls),
        nodes=nodes,
    )


def encoded(doc) -> str:
    return base64.b64encode(json.dumps(doc).encode()).decode()


def with_tables(b: TraceBuilder, graphs, modules=None, compiles=()) -> TraceBuilder:
    """The compiled-kernel table (and a module table: ``modules`` (name, class) pairs) at the
    trace's top level, as traceprof.capture embeds them."""
    table = CompiledTable(
        version=COMPILED_TABLE_VERSION,
        graphs={g.table_key: g for g in graphs},
        compiles=tuple(CompiledCompile(**c) for c in compiles),
    )
    b.top[COMPILED_TABLE_KEY] = base64.b64encode(msgspec.json.encode(table)).decode()
    if modules is not None:
        b.top["traceprof"] = encoded(
            {
                "format": "traceprof.modules",
                "version": 1,
                "modules": [{"name": n, "class": c} for n, c in modules],
            }
        )
    return b


MODULES = [("", "Net"), ("a", "Block"), ("a.lin", "Linear"), ("a.act", "GELU"), ("b", "Linear")]

#: the forward graph: a kernel of a.act, an extern addmm of a.lin, the same kernel again for b
#: (Inductor reuses a kernel of identical source), and a kernel fusing a.lin and a.act
FORWARD = graph(
    "ffwd",
    "forward",
    [
        site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu"], "a.act"),
        site("extern", "aten::addmm", ["addmm"], "a.lin", primary="addmm"),
        site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu_1"], "b"),
        site("cpp", "graph_0_cpp_fused_add_gelu_1", ["add", "gelu_2"], "a"),
    ],
    {
        "gelu": node("aten.gelu.default", [tensor(4, 8)], "a.act", "GELU"),
        "addmm": node("aten.addmm.default", [tensor(16), tensor(4, 8), tensor(8, 16)], "a.lin", "Linear"),
        "gelu_1": node("aten.gelu.default", [tensor(4, 16)], "b", "Linear"),
        "add": node("aten.add.Tensor", [tensor(4, 16), tensor(4, 16)], "a.lin", "Linear"),
        "gelu_2": node("aten.gelu.default", [tensor(4, 16)], "a.act", "GELU"),
    },
)
#: the backward graph: a kernel of a.lin's ops (one a forward op computed again), an extern mm
BACKWARD = graph(
    "fbwd",
    "backward",
    [
        site("cpp", "graph_0_cpp_fused_gelu_backward_0", ["gelu_backward", "gelu_r"], "a.act"),
        site("extern", "aten::mm", ["mm"], "a.lin", primary="mm"),
    ],
    {
        "gelu_backward": node(
            "aten.gelu_backward.default", [tensor(4, 8), tensor(4, 8)], "a.act", "GELU", "fwd_nn_module_stack"
        ),
        "gelu_r": node("aten.gelu.default", [tensor(4, 8)], "a.act", "GELU", "nn_module_stack"),
        "mm": node(
            "aten.mm.default", [tensor(8, 4), tensor(4, 16)], "a.lin", "Linear", "fwd_nn_module_stack"
        ),
    },
)


def training_step(b: TraceBuilder, fwd_key="ffwd", bwd_key="fbwd", scope=("", "Net")) -> TraceBuilder:
    """One step: the root module's scope around the compiled region, the forward graph's run,
    then its backward run on the autograd thread (tid 2), linked by sequence number 7."""
    b.step(1, 0, 2000)
    b.scope(scope[0], scope[1], 10, 600)
    b.op("TorchDynamo Cache Lookup", 15, 4)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.op("CompiledFunction", 30, 540, seq=7)
    b.annotation(f"## Call CompiledFxGraph {fwd_key} ##", 40, 500)
    b.op("graph_0_cpp_fused_gelu_0", 50, 20)
    b.shaped_op("aten::addmm", 100, 100, [[16], [4, 8], [8, 16]], ["float", "float", "float"], ["", "", ""])
    b.op("aten::copy_", 110, 30)  # an extern op's child: goes with it
    b.op("graph_0_cpp_fused_gelu_0", 250, 40)
    b.op("graph_0_cpp_fused_add_gelu_1", 350, 80)
    b.op("autograd::engine::evaluate_function: CompiledFunctionBackward", 1000, 400, tid=2)
    b.op("CompiledFunctionBackward", 1010, 380, tid=2, seq=7, fwd_tid=1)
    b.annotation(f"## Call CompiledFxGraph {bwd_key} ##", 1020, 360, tid=2)
    b.op("graph_0_cpp_fused_gelu_backward_0", 1030, 100, tid=2)
    b.shaped_op("aten::mm", 1200, 150, [[8, 4], [4, 16]], ["float", "float"], ["", ""], tid=2)
    return b


def eager_flops(op, dims):
    """FLOPs of an eager op event of fp32 tensors ``dims``."""
    return REGISTRY.get(op).formula(OpArgs(op, dims, ["float"] * len(dims), [""] * len(dims))).flops


ADDMM = eager_flops("aten::addmm", [[16], [4, 8], [8, 16]])
ADD = eager_flops("aten::add", [[4, 16], [4, 16]])


def test_kernels_land_in_the_modules_of_their_call_sites_in_order(analyze_built):
    p = analyze_built(with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES))
    assert p.source == "traceprof"
    assert p.source_description == "traceprof module scopes + compiled-kernel table"
    act, lin, b = p.find("a.act"), p.find("a.lin"), p.find("b")
    # the first run of the repeated kernel is a.act's, the second b's
    assert act.forward.own.cpu_us == pytest.approx(20)
    assert b.forward.own.cpu_us == pytest.approx(40)
    # the extern addmm and its child: a.lin, with the addmm's FLOPs (from its shapes), and the
    # add of the fused kernel's nodes
    assert lin.forward.own.cpu_us == pytest.approx(100)
    assert lin.forward.own.flops == pytest.approx(ADDMM + ADD)
    # nodes made under the root by qualified name, classes from the module table, in call order
    a = p.find("a")
    assert (a.class_name, act.class_name, lin.class_name, b.class_name) == (
        "Block",
        "GELU",
        "Linear",
        "Linear",
    )
    assert a.parent == p.find("").id and act.parent == a.id and b.parent == p.find("").id
    assert [p.nodes[c].qualified_name for c in a.children] == ["a.act", "a.lin"]
    assert a.calls == act.calls == lin.calls == 1.0
    assert p.compiled is not None
    assert (p.compiled.runs, p.compiled.events, p.compiled.matched) == (2.0, 6.0, 6.0)


def test_backward_runs_go_to_the_root_of_their_forward_through_the_sequence_number(analyze_built):
    # a module compiled by itself (its scope "a" around the region): modules relative to it
    fwd = graph(
        "ffwd",
        "forward",
        [site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu"], "act")],
        {"gelu": node("aten.gelu.default", [tensor(4, 8)], "act", "GELU")},
    )
    bwd = graph(
        "fbwd",
        "backward",
        [
            site("cpp", "graph_0_cpp_fused_gelu_backward_0", ["gelu_backward", "gelu_r"], "act"),
            site("extern", "aten::mm", ["mm"], "lin", primary="mm"),
        ],
        {
            "gelu_backward": node(
                "aten.gelu_backward.default",
                [tensor(4, 8), tensor(4, 8)],
                "act",
                "GELU",
                "fwd_nn_module_stack",
            ),
            "gelu_r": node("aten.gelu.default", [tensor(4, 8)], "act", "GELU", "nn_module_stack"),
            "mm": node(
                "aten.mm.default", [tensor(8, 4), tensor(4, 16)], "lin", "Linear", "fwd_nn_module_stack"
            ),
        },
    )
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.scope("", "Net", 5, 700)
    b.scope("a", "Block", 10, 600)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.op("CompiledFunction", 30, 540, seq=7)
    b.annotation("## Call CompiledFxGraph ffwd ##", 40, 500)
    b.op("graph_0_cpp_fused_gelu_0", 50, 20)
    # the backward run, outside every scope: its root through CompiledFunctionBackward's sequence
    # number, from the forward CompiledFunction
    b.op("autograd::engine::evaluate_function: CompiledFunctionBackward", 1000, 400, tid=2)
    b.op("CompiledFunctionBackward", 1010, 380, tid=2, seq=7, fwd_tid=1)
    b.annotation("## Call CompiledFxGraph fbwd ##", 1020, 360, tid=2)
    b.op("graph_0_cpp_fused_gelu_backward_0", 1030, 100, tid=2)
    b.shaped_op("aten::mm", 1200, 150, [[8, 4], [4, 16]], ["float", "float"], ["", ""], tid=2)
    p = analyze_built(with_tables(b, [fwd, bwd], MODULES))
    act, lin = p.find("a.act"), p.find("a.lin")
    assert act.forward.own.cpu_us == pytest.approx(20)
    assert act.backward.own.cpu_us == pytest.approx(100)
    assert lin.backward.own.cpu_us == pytest.approx(150)
    assert lin.backward.own.flops == pytest.approx(eager_flops("aten::mm", [[8, 4], [4, 16]]))
    assert lin.forward.total == lin.forward.total.__class__()  # no forward work
    # the forward op the backward graph computes again: reported apart, not backward FLOPs
    # (the module's backward FLOPs are eager's: gelu_backward alone)
    gelu = eager_flops("aten::gelu", [[4, 8]])
    assert act.backward.own.flops == pytest.approx(eager_flops("aten::gelu_backward", [[4, 8], [4, 8]]))
    assert p.compiled.recomputed_flops == pytest.approx(gelu)


def test_fused_kernel_lands_in_the_common_ancestor_and_its_flops_in_the_modules_of_its_nodes(analyze_built):
    p = analyze_built(with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES))
    a, lin, act, root = p.find("a"), p.find("a.lin"), p.find("a.act"), p.find("")
    # its time: on a (the common ancestor), and counted as fused there and above
    assert a.forward.own.cpu_us == pytest.approx(80)
    assert a.fused.forward.own.cpu_us == pytest.approx(80)
    assert root.fused.forward.total.cpu_us == pytest.approx(80)
    assert lin.fused.forward.total.cpu_us == 0
    # its FLOPs: the add in a.lin, the gelu in a.act, as eager ops of the same shapes
    gelu = REGISTRY.get("aten::gelu").formula(OpArgs("aten::gelu", [[4, 16]], ["float"], [""])).flops
    add = REGISTRY.get("aten::add").formula(
        OpArgs("aten::add", [[4, 16], [4, 16]], ["float", "float"], ["", ""])
    )
    assert lin.forward.own.flops == pytest.approx(2 * 4 * 8 * 16 + add.flops)
    act_first = REGISTRY.get("aten::gelu").formula(OpArgs("aten::gelu", [[4, 8]], ["float"], [""])).flops
    assert act.forward.own.flops == pytest.approx(act_first + gelu)
    assert a.forward.own.flops == 0
    # --ops: the fused kernel's rows name the modules it spans
    rows = [o for o in a.ops if o.name == "graph_0_cpp_fused_add_gelu_1"]
    assert rows and all(o.modules == "a.act, a.lin" for o in rows)
    assert all(o.modules is None for o in lin.ops if o.name == "aten::addmm")


def test_flops_of_a_node_are_those_of_the_eager_op_with_the_same_arguments():
    mm = CompiledNode(op="aten.mm.default", inputs=(tensor(4, 8), tensor(8, 16, dtype="bfloat16")))
    cost, _ = node_cost(mm, REGISTRY)
    eager = REGISTRY.get("aten::mm").formula(
        OpArgs("aten::mm", [[4, 8], [8, 16]], ["float", "c10::BFloat16"], ["", ""])
    )
    assert cost == eager
    # scalars as Concrete Inputs, lists as ScalarList, lists of tensors as TensorList, None absent
    args = op_args("aten::cat", [[tensor(2, 3), tensor(2, 3)], 1], {})
    assert (args.dims, args.types, args.values) == (
        ([[2, 3], [2, 3]], []),
        ("TensorList", "Scalar"),
        ("", "1"),
    )
    args = op_args("aten::sum", [tensor(4, 8), [1], True, None], {})
    assert args.types == ("float", "ScalarList", "Scalar", "") and args.values == ("", "[1]", "True", "")
    # symbolic sizes: bound by the run's sizes, else not counted
    sym = CompiledNode(op="aten.mm.default", inputs=(tensor("s0", 8), tensor(8, "2*s0")))
    assert node_cost(sym, REGISTRY) is None
    cost, _ = node_cost(sym, REGISTRY, {"s0": 3})
    assert cost.flops == 2 * 3 * 8 * 6
    # not a dispatcher op, no formula: no cost
    assert node_cost(CompiledNode(op="getitem", inputs=()), REGISTRY) is None
    assert node_cost(CompiledNode(op="prims.inductor_random.default", inputs=()), REGISTRY) is None


def test_nodes_of_one_decomposed_op_count_as_that_op_once(analyze_built):
    """A GELU decomposed into erf form: its nodes count as one aten::gelu of its arguments (the
    node of its first output carries them); a group without them counts its nodes' own ops."""
    decomposed = {"original_aten": "aten.gelu.default"}
    fwd = graph(
        "ffwd",
        "forward",
        [
            site("cpp", "graph_0_cpp_fused_gelu_0", ["mul", "erf", "out"], "a.act"),
            site("cpp", "graph_0_cpp_fused_gelu_1", ["mul_1", "erf_1"], "b"),
        ],
        {
            "mul": node(
                "aten.mul.Tensor", [tensor(4, 8), 0.7], "a.act", "GELU", original_group="1:g", **decomposed
            ),
            "erf": node(
                "aten.erf.default", [tensor(4, 8)], "a.act", "GELU", original_group="1:g", **decomposed
            ),
            "out": node(
                "aten.mul.Tensor",
                [tensor(4, 8), tensor(4, 8)],
                "a.act",
                "GELU",
                original_group="1:g",
                original_inputs=[tensor(4, 8)],
                **decomposed,
            ),
            "mul_1": node(
                "aten.mul.Tensor", [tensor(4, 16), 0.7], "b", "Linear", original_group="2:g", **decomposed
            ),
            "erf_1": node(
                "aten.erf.default", [tensor(4, 16)], "b", "Linear", original_group="2:g", **decomposed
            ),
        },
    )
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.scope("", "Net", 10, 600)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.op("CompiledFunction", 30, 540, seq=7)
    b.annotation("## Call CompiledFxGraph ffwd ##", 40, 500)
    b.op("graph_0_cpp_fused_gelu_0", 50, 20)
    b.op("graph_0_cpp_fused_gelu_1", 100, 20)
    b.shaped_op("aten::relu", 590, 5, [[4]], ["float"], [""])  # a trace with shapes
    p = analyze_built(with_tables(b, [fwd], MODULES))
    assert p.find("a.act").forward.own.flops == pytest.approx(eager_flops("aten::gelu", [[4, 8]]))
    own = eager_flops("aten::mul", [[4, 16]]) + eager_flops("aten::erf", [[4, 16]])
    assert p.find("b").forward.own.flops == pytest.approx(own)


def test_symbolic_sizes_are_bound_by_the_forward_inputs(analyze_built):
    fwd = graph(
        "fdyn",
        "forward",
        [site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu"], "a.act")],
        {"gelu": node("aten.gelu.default", [tensor("s7", 8)], "a.act", "GELU")},
        inputs=[{"name": "primals_1", "val": {"sym": "s7"}}, {"name": "primals_2", "val": tensor("s7", 8)}],
    )
    bwd = graph(
        "fdynb",
        "backward",
        [site("cpp", "graph_0_cpp_fused_gelu_backward_0", ["gb"], "a.act")],
        {
            "gb": node(
                "aten.gelu_backward.default",
                [tensor("s7", 8), tensor("s7", 8)],
                "a.act",
                "GELU",
                "fwd_nn_module_stack",
            )
        },
        inputs=[{"name": "primals_1", "val": {"sym": "s7"}}],
    )
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.scope("", "Net", 10, 600)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.shaped_op("CompiledFunction", 30, 540, [[], [5, 8]], ["Scalar", "float"], ["5", ""], seq=7)
    b.annotation("## Call CompiledFxGraph fdyn ##", 40, 500)
    b.op("graph_0_cpp_fused_gelu_0", 50, 20)
    b.op("CompiledFunctionBackward", 1010, 380, tid=2, seq=7, fwd_tid=1)
    b.annotation("## Call CompiledFxGraph fdynb ##", 1020, 360, tid=2)
    b.op("graph_0_cpp_fused_gelu_backward_0", 1030, 100, tid=2)
    p = analyze_built(with_tables(b, [fwd, bwd], MODULES))
    args = OpArgs("aten::gelu", [[5, 8]], ["float"], [""])
    assert p.find("a.act").forward.own.flops == pytest.approx(REGISTRY.get("aten::gelu").formula(args).flops)
    back = OpArgs("aten::gelu_backward", [[5, 8], [5, 8]], ["float", "float"], ["", ""])
    assert p.find("a.act").backward.own.flops == pytest.approx(
        REGISTRY.get("aten::gelu_backward").formula(back).flops
    )


def test_graphs_without_a_cache_key_are_found_by_kernel_prefix_and_direction(analyze_built):
    fwd = graph(
        None,
        "forward",
        [site("cpp", "graph_3_cpp_fused_gelu_0", ["g"], "a.act")],
        {"g": node("aten.gelu.default", [tensor(4)], "a.act", "GELU")},
        graph_id=3,
    )
    other = graph(
        None,
        "forward",
        [site("cpp", "graph_4_cpp_fused_gelu_0", ["g"], "b")],
        {"g": node("aten.gelu.default", [tensor(4)], "b")},
        graph_id=4,
    )
    # the backward graph of the same compile: the same prefix, kernel names restart at _0
    bwd = graph(
        None,
        "backward",
        [site("cpp", "graph_3_cpp_fused_gelu_0", ["g"], "a.lin")],
        {"g": node("aten.gelu.default", [tensor(4)], "a.lin", "Linear", "fwd_nn_module_stack")},
        graph_id=3,
    )
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.scope("", "Net", 10, 600)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.op("CompiledFunction", 30, 540, seq=7)
    b.annotation("## Call CompiledFxGraph None ##", 40, 500)
    b.op("graph_3_cpp_fused_gelu_0", 50, 20)
    b.op("CompiledFunctionBackward", 1010, 380, tid=2, seq=7, fwd_tid=1)
    b.annotation("## Call CompiledFxGraph None ##", 1020, 360, tid=2)
    b.op("graph_3_cpp_fused_gelu_0", 1030, 100, tid=2)
    p = analyze_built(with_tables(b, [fwd, other, bwd], MODULES))
    assert p.find("a.act").forward.own.cpu_us == pytest.approx(20)
    assert p.find("a.lin").backward.own.cpu_us == pytest.approx(100)
    assert p.compiled.matched == 2.0


def test_a_call_site_of_unknown_event_takes_the_child_in_its_place(analyze_built):
    # an extern kernel that is a Python helper (bias_addmm): the table does not know its event
    fwd = graph(
        "fhelp",
        "forward",
        [
            site("cpp", "graph_0_cpp_fused_gelu_0", ["gelu"], "a.act"),
            site("extern", None, ["addmm"], "a.lin", primary="addmm", kernel="extern_kernels.bias_addmm"),
            site("cpp", "graph_0_cpp_fused_gelu_1", ["gelu_1"], "b"),
        ],
        {
            "gelu": node("aten.gelu.default", [tensor(4, 8)], "a.act", "GELU"),
            "addmm": node("aten.addmm.default", [tensor(16), tensor(4, 8), tensor(8, 16)], "a.lin", "Linear"),
            "gelu_1": node("aten.gelu.default", [tensor(4, 16)], "b", "Linear"),
        },
    )
    for extra in (False, True):  # one child per site; and an extra child first (walked in order)
        b = TraceBuilder()
        b.step(1, 0, 2000)
        b.scope("", "Net", 10, 600)
        b.op("Torch-Compiled Region: 0/0", 20, 560)
        b.op("CompiledFunction", 30, 540, seq=7)
        b.annotation("## Call CompiledFxGraph fhelp ##", 40, 500)
        if extra:
            b.op("graph_0_cpp_fused_gelu_1", 42, 3)  # matches the last site: the rest go unmatched
        b.op("graph_0_cpp_fused_gelu_0", 50, 20)
        b.shaped_op(
            "aten::addmm", 100, 100, [[16], [4, 8], [8, 16]], ["float", "float", "float"], ["", "", ""]
        )
        b.op("graph_0_cpp_fused_gelu_1", 250, 40)
        p = analyze_built(with_tables(b, [fwd], MODULES))
        if not extra:
            assert p.find("a.lin").forward.own.cpu_us == pytest.approx(100)
            assert p.find("b").forward.own.cpu_us == pytest.approx(40)
            assert p.compiled.matched == 3.0
        else:
            assert p.find("b").forward.own.cpu_us == pytest.approx(3)
            assert p.compiled.matched == 1.0 and p.compiled.events == 4.0


def test_unmatched_kernel_calls_stay_on_the_root_and_are_named(analyze_built):
    b = training_step(TraceBuilder())
    b.op("graph_9_cpp_unknown_0", 450, 30)  # in the forward run, no call site has it
    p = analyze_built(with_tables(b, [FORWARD, BACKWARD], MODULES))
    assert p.compiled.events == 7.0 and p.compiled.matched == 6.0
    assert p.find("a.act").forward.own.cpu_us == pytest.approx(20)  # the others still in order
    assert any("1 kernel call in compiled graphs matched no call site" in w for w in p.warnings)


def test_runs_of_graphs_the_table_lacks_are_named(analyze_built):
    p = analyze_built(
        with_tables(training_step(TraceBuilder(), fwd_key="fother"), [FORWARD, BACKWARD], MODULES)
    )
    assert p.compiled.runs_without_graph == 1.0
    assert any("not in the compiled-kernel table" in w for w in p.warnings)


@pytest.mark.parametrize(
    "payload",
    [
        "not base64 at all!",
        encoded({"format": "traceprof.compiled", "version": 1, "graphs": [1, 2]}),
        encoded({"format": "something else", "graphs": {}}),
        encoded({"format": "traceprof.compiled", "version": 1, "graphs": {"k": {"direction": "forward"}}}),
    ],
)
def test_a_malformed_table_is_a_warning_never_a_failure(analyze_built, payload):
    b = training_step(TraceBuilder())
    b.top["traceprof_compiled"] = payload
    p = analyze_built(b)
    assert p.compiled is None
    assert any(w.startswith("compiled-kernel table unreadable") for w in p.warnings)
    assert p.find("").forward.total.cpu_us > 0  # analyzed as without the table


def test_odd_table_contents_do_not_fail_the_analysis(analyze_built):
    odd = graph(
        "ffwd",
        "forward",
        [
            site("cpp", "graph_0_cpp_fused_gelu_0", ["missing", "gelu"], "a..act"),
            site("cpp", "never_in_the_trace", [], None),
            site("weird", "aten::addmm", ["addmm"], "a.lin", primary="not_a_node"),
        ],
        {
            "gelu": node("aten.gelu.default", [{"shape": "x", "dtype": 3}, None, [1, {"sym": "q"}]], "a.act"),
            "addmm": node("no.such.op", [], "a.lin", module_from=None),
        },
        inputs=[
            {"name": "p", "val": {"sym": 7}},
            {"name": "q", "val": {"shape": ["s1"], "dtype": "float32"}},
        ],
    )
    p = analyze_built(with_tables(training_step(TraceBuilder()), [odd], MODULES))
    assert p.find("").forward.total.cpu_us > 0


def test_a_trace_without_module_scopes_takes_its_modules_from_the_table(analyze_built):
    b = training_step(TraceBuilder())
    b.events = [e for e in b.events if not e["name"].startswith("[traceprof:")]
    p = analyze_built(
        with_tables(b, [FORWARD, BACKWARD], compiles=[{"key": "ffwd", "direction": "forward", "root": ""}])
    )
    assert p.source == "traceprof"
    root = p.find("")
    assert root.parent == -1 and p.find("a.act").parent == p.find("a").id
    assert p.find("a.act").forward.own.cpu_us == pytest.approx(20)
    assert p.find("a.act").class_name == "GELU"  # from the table's nodes


def test_gpu_work_of_compiled_kernels_follows_their_launching_event(analyze_built):
    fwd = graph(
        "fgpu",
        "forward",
        [site("triton", "triton_poi_fused_add_gelu_0", ["add", "gelu"], "a")],
        {
            "add": node("aten.add.Tensor", [tensor(4, 16), tensor(4, 16)], "a.lin", "Linear"),
            "gelu": node("aten.gelu.default", [tensor(4, 16)], "a.act", "GELU"),
        },
    )
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.scope("", "Net", 10, 600)
    b.op("Torch-Compiled Region: 0/0", 20, 560)
    b.op("CompiledFunction", 30, 540, seq=7)
    b.annotation("## Call CompiledFxGraph fgpu ##", 40, 500)
    b.op("triton_poi_fused_add_gelu_0", 50, 20)
    b.launch(55, 100, 30, name="triton_poi_fused_add_gelu_0")
    b.shaped_op("aten::add", 700, 10, [[4], [4]], ["float", "float"], ["", ""])  # recorded with shapes
    p = analyze_built(with_tables(b, [fwd], MODULES))
    a = p.find("a")
    assert a.forward.own.gpu_busy_us == pytest.approx(30)
    assert a.fused.forward.own.gpu_busy_us == pytest.approx(30)
    assert a.fused.forward.own.kernels == 1
    kernel_rows = [o for o in a.ops if o.kind.value == "kernel"]
    assert [o.modules for o in kernel_rows] == ["a.act, a.lin"]
    assert p.find("a.lin").forward.own.flops > 0 and p.find("a.act").forward.own.flops > 0
    # the launching op is no longer unsupported: its FLOPs come from its nodes
    assert not any(u.name.startswith("triton_") for u in p.flops.unsupported)


def test_outputs_show_compiled_work_only_for_traces_that_have_it(analyze_built):
    from traceprof.render import REGISTRY as RENDERERS
    from traceprof.render.ops import render_ops
    from traceprof.render.registry import RenderOptions

    p = analyze_built(with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES))
    plain = analyze_built(training_step(TraceBuilder()))
    opts = RenderOptions()
    for name in ("tree", "table", "csv", "json"):
        renderer = RENDERERS.get(name)
        text, other = renderer.render(p, opts), renderer.render(plain, opts)
        assert "fused" in text.lower(), name
        assert "fused" not in other.lower(), name
    tree = RENDERERS.get("tree").render(p, opts)
    assert "modules:   5 nodes from traceprof module scopes + compiled-kernel table" in tree
    assert re.search(r"compiled:  2 runs per step of 2 compiled graphs; 6 of their 6 kernel calls", tree)
    doc = json.loads(RENDERERS.get("json").render(p, opts))
    assert doc["compiled"]["matched"] == 6.0
    a = next(n for n in doc["nodes"] if n["qualified_name"] == "a")
    assert a["forward_own_fused_cpu_us"] == pytest.approx(80)
    assert "modules" in doc["ops"][0]
    assert "modules" not in json.loads(RENDERERS.get("json").render(plain, opts))["ops"][0]
    ops = render_ops(p, "a", "tree")
    assert "fused across modules" in ops and "a.act, a.lin" in ops
    assert "fused across modules" not in render_ops(plain, "", "tree")


def test_diff_of_eager_and_compiled_matches_modules_by_qualified_name(tmp_path):
    eager = TraceBuilder()
    eager.step(1, 0, 2000)
    eager.scope("", "Net", 10, 600)
    eager.scope("a", "Block", 20, 300)
    eager.scope("a.act", "GELU", 30, 50)
    eager.op("aten::gelu", 35, 40)
    eager.scope("a.lin", "Linear", 100, 150)
    eager.op("aten::addmm", 110, 100)
    eager.scope("b", "Linear", 400, 100)
    eager.op("aten::gelu", 410, 50)
    with_tables(eager, [], MODULES)
    compiled = with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES)
    d = traceprof.diff(eager.write(tmp_path / "e.json"), compiled.write(tmp_path / "c.json"), parallel=False)
    assert d.matched_by == "qualified name"
    status = {n.qualified_name: n.status.value for n in d.nodes}
    assert all(status[q] == "matched" for q in ("", "a", "a.act", "a.lin", "b"))


def test_depth_and_top_keep_the_fused_records_adding_up(analyze_built):
    p = analyze_built(with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES))
    for transformed in (limit_depth(p, 1), top_children(p, 1), ignore_modules(p, ["a"])):
        transformed.self_check()
        root = transformed.find("")
        assert root.fused.forward.total.cpu_us == pytest.approx(80)


# -- real traces: tiny models captured eager and compiled ------------------------------------------

#: work that is no module's: the compiled code's own on its roots (Dynamo's guards, the regions'
#: and the compiled backward's wrappers, kernels named after no op: the parameters' layout
#: conversions), and the modules' Python outside ops; eager models have only the last
OVERHEAD = re.compile(
    r"Torch-Compiled Region: |TorchDynamo Cache Lookup\Z"
    r"|autograd::engine::evaluate_function: CompiledFunctionBackward\Z|\(outside ops\)\Z"
    r"|graph_\d+_cpp_fused_\d+\Z"
)


def submodule_share(p, weight=None) -> float:
    """Of the root module's ops and kernels (OVERHEAD left out), the share in its submodules:
    of their time (GPU busy time, CPU time on CPU-only traces) or, with ``weight``, of
    ``weight(op row)``."""
    weight = weight or (lambda o: o.gpu_busy_us if p.has_gpu else o.cpu_us)

    def work(n) -> float:
        own = sum(weight(o) for o in n.ops if o.kind.value == "op" and not OVERHEAD.match(o.name))
        return own + sum(work(p.nodes[c]) for c in n.children)

    root = p.nodes[p.roots[0]]
    return sum(work(p.nodes[c]) for c in root.children) / work(root)


@pytest.fixture(scope="module")
def analyzed(compiled_traces):
    out = {}
    for name, (eager_path, compiled_path) in compiled_traces.items():
        eager, compiled = traceprof.analyze(eager_path), traceprof.analyze(compiled_path)
        eager.self_check()
        compiled.self_check()  # roots + (not in any module) = the step, fused work adds up
        out[name] = (eager, compiled)
    return out


CASES = ("gpt", "cnn", "graph_break", "per_block")


@pytest.mark.parametrize("case", CASES)
def test_real_compiled_kernels_all_join_the_table(analyzed, case):
    _, compiled = analyzed[case]
    c = compiled.compiled
    assert c is not None and c.events > 0
    assert c.matched == c.events
    assert c.runs_without_graph == 0
    assert compiled.source_description == "traceprof module scopes + compiled-kernel table"


@pytest.mark.parametrize("case", CASES)
def test_real_kernel_calls_land_in_submodules_as_eager_ops_do(analyzed, case):
    eager, compiled = analyzed[case]
    calls = lambda o: o.calls  # noqa: E731
    assert submodule_share(compiled, calls) >= 0.9 * submodule_share(eager, calls)


#: the least share of the eager submodule share of time the compiled one keeps. One step of a tiny
#: model on a CPU: a single kernel call that stalls moves it by several percent. Measured over 15
#: test sessions (each capturing afresh) with pattern-made nodes in their inputs' module: gpt
#: 0.978-1.032, cnn 1.000-1.016, graph_break 0.995-1.064, per_block 0.914-1.035. graph_break was
#: 0.877-0.968 over 6 sessions before: its backward fuses b.0's input-gradient matmul with the
#: residual's gradient add into one extern addmm that a post-grad pattern makes without a module
#: stack; it now lands in ``b``, its inputs' common module. per_block moves with the machine's
#: state, the same with and without that change (0.94-1.00 before, 0.91-1.04 after; an earlier
#: series measured 0.890): too close to 0.9 to raise its bound
LEAST = {"gpt": 0.9, "cnn": 0.9, "graph_break": 0.9, "per_block": 0.85}


@pytest.mark.parametrize("case", CASES)
def test_real_root_time_lands_in_submodules_as_in_eager(analyzed, case):
    eager, compiled = analyzed[case]
    assert submodule_share(compiled) >= LEAST[case] * submodule_share(eager)


@pytest.mark.parametrize("case", CASES)
def test_real_modules_with_forward_flops_in_eager_have_them_compiled(analyzed, case):
    eager, compiled = analyzed[case]
    names = {n.qualified_name: n for n in compiled.nodes if n.kind is NodeKind.MODULE}
    missing = [
        n.qualified_name
        for n in eager.nodes
        if n.kind is NodeKind.MODULE
        and n.forward.total.flops > 0
        and (n.qualified_name not in names or names[n.qualified_name].forward.total.flops <= 0)
    ]
    assert missing == []


@pytest.mark.parametrize("case", ["gpt", "per_block"])
def test_real_block_flops_agree_with_eager(analyzed, case):
    eager, compiled = analyzed[case]
    blocks = [n for n in eager.nodes if n.class_name == "Block"]
    assert len(blocks) == 2
    for block in blocks:
        other = compiled.find(block.qualified_name)
        for phase in ("forward", "backward"):
            want = block.phase(phase).total.flops
            # decomposed ops count as the op (forward within 0.1%); the backward recomputes a few
            # forward ops (measured: 1.9-2.3% more)
            assert other.phase(phase).total.flops == pytest.approx(want, rel=0.03), (
                block.qualified_name,
                phase,
            )


def test_diff_says_a_module_was_fused_into_its_ancestor(tmp_path):
    """A module whose compiled work is all in a kernel fused across modules on an ancestor reads
    ``-> fused into <ancestor>`` in the diff's text, JSON and page data, not -100%."""
    modules = [("", "Net"), ("a", "Block"), ("a.norm", "LayerNorm"), ("a.lin", "Linear")]
    eager = TraceBuilder()
    eager.step(1, 0, 2000)
    eager.scope("", "Net", 10, 600)
    eager.scope("a", "Block", 20, 300)
    eager.scope("a.norm", "LayerNorm", 30, 50)
    eager.op("aten::native_layer_norm", 35, 40)
    eager.scope("a.lin", "Linear", 100, 150)
    eager.op("aten::addmm", 110, 100)
    with_tables(eager, [], modules)
    fused = graph(
        "ffused",
        "inference",
        [
            site("cpp", "graph_0_cpp_fused_native_layer_norm_0", ["ln", "mul"], "a"),
            site("extern", "aten::addmm", ["addmm"], "a.lin", primary="addmm"),
        ],
        {
            "ln": node("aten.native_layer_norm.default", [tensor(4, 8)], "a.norm", "LayerNorm"),
            "mul": node("aten.mul.Tensor", [tensor(4, 8), tensor(4, 8)], "a.lin", "Linear"),
            "addmm": node("aten.addmm.default", [tensor(16), tensor(4, 8), tensor(8, 16)], "a.lin", "Linear"),
        },
    )
    compiled = TraceBuilder()
    compiled.step(1, 0, 2000)
    compiled.scope("", "Net", 10, 600)
    compiled.op("Torch-Compiled Region: 0/0", 20, 560)
    compiled.annotation("## Call CompiledFxGraph ffused ##", 40, 500)
    compiled.op("graph_0_cpp_fused_native_layer_norm_0", 50, 60)
    compiled.shaped_op("aten::addmm", 200, 100, [[16], [4, 8], [8, 16]], ["float"] * 3, [""] * 3)
    with_tables(compiled, [fused], modules)
    d = traceprof.diff(eager.write(tmp_path / "e.json"), compiled.write(tmp_path / "c.json"), parallel=False)
    norm = d.find("a.norm")
    assert (norm.new_fused_into, norm.base_fused_into) == ("a", None)
    assert d.find("a.lin").new_fused_into is None  # it has work of its own
    text = render_diff(d, "tree")
    line = next(x for x in text.splitlines() if x.strip().startswith("norm (LayerNorm)"))
    assert line.endswith("-> fused into a") and "%" not in line
    doc = json.loads(render_diff(d, "json"))
    assert {n["qualified_name"]: n["new_fused_into"] for n in doc["nodes"]}["a.norm"] == "a"
    # swapped (compiled as the base): fused into a on the base side
    back = traceprof.diff(
        compiled.write(tmp_path / "c2.json"), eager.write(tmp_path / "e2.json"), parallel=False
    )
    assert back.find("a.norm").base_fused_into == "a"


def test_the_timeline_draws_compiled_kernels_on_the_module_lanes(analyze_built):
    """The module lanes show compiled kernels in the modules the table gives them (and the
    levels made from the table above them), forward and backward, not the root alone."""
    p = analyze_built(with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES))
    t = p.timeline
    lanes = {str(lane.kind): i for i, lane in enumerate(t.lanes)}

    def modules_on(kind: str) -> set[str]:  # paths end in the name
        return {t.modules[c][-1] for c, lane in zip(t.module, t.lane) if c >= 0 and lane == lanes[kind]}

    forward, backward = modules_on("modules_forward"), modules_on("modules_backward")
    assert {"a", "a.act", "a.lin", "b"} <= forward
    assert {"a", "a.act", "a.lin"} <= backward
    # a kernel of a.act is drawn at a.act's depth and at a's (made from the table)
    rows = {
        t.modules[c]: r
        for c, r, lane in zip(t.module, t.row, t.lane)
        if c >= 0 and lane == lanes["modules_forward"]
    }
    assert rows[("", "a", "a.act")] == rows[("", "a")] + 1


def test_symbolic_sizes_in_module_outputs_are_unknown_sizes_in_the_table_view(analyze_built):
    """A module table whose outputs hold a symbolic size (a graph compiled with dynamic shapes
    whose size the capture could not bind) renders: that layer's size is unknown, not an error."""
    from traceprof.render.registry import RenderOptions
    from traceprof.render.table import render_table, torchinfo_stats

    b = with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], None)
    b.top["traceprof"] = encoded(
        {
            "format": "traceprof.modules",
            "version": 1,
            "modules": [
                {"name": "", "class": "Net", "params_total": 40, "trainable_total": 40, "param_counts": {}},
                {
                    "name": "a.lin",
                    "class": "Linear",
                    "params": 40,
                    "params_total": 40,
                    "trainable_total": 40,
                    "param_counts": {"weight": 32, "bias": 8},
                    "leaf": True,
                    "outputs": {"shape": ["s0", 8], "dtype": "float32"},
                },
            ],
        }
    )
    p = analyze_built(b)
    stats = torchinfo_stats(p)
    assert stats is not None and stats.total_params == 40 and stats.total_mult_adds == 0
    assert "Linear" in render_table(p, RenderOptions())


def test_a_call_whose_event_recurs_is_one_call_costed_once():
    """A GEMM template's micro-kernel records itself once per block: the run of the same event
    is its call site's, and the next child walks on to the next site."""
    from traceprof.analysis.compiled_runs import walk

    assert walk([7, 7, 7, 8, 7], [7, 8, 7]) == [0, 0, 0, 1, 2]
    assert walk([7, 7, 8], [7, 7, 8]) == [0, 1, 2]  # two calls of one kernel: two sites


def test_repeated_events_of_a_generated_kernel_keep_its_module_and_count_its_flops_once(analyze_built):
    base = analyze_built(with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES))
    b = training_step(TraceBuilder())
    for ts in (72, 76, 80):  # a.act's kernel (50-70) records itself three more times
        b.op("graph_0_cpp_fused_gelu_0", ts, 3)
    p = analyze_built(with_tables(b, [FORWARD, BACKWARD], MODULES))
    assert p.compiled.matched == p.compiled.events
    act = p.find("a.act")
    assert act.forward.own.cpu_us == pytest.approx(base.find("a.act").forward.own.cpu_us + 9)
    assert act.forward.own.flops == pytest.approx(base.find("a.act").forward.own.flops)
    assert p.find("b").forward.own.cpu_us == pytest.approx(base.find("b").forward.own.cpu_us)
