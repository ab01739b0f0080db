"""traceprof.capture with torch.compile on CPU: the compiled-kernel table, scopes, restoring
Inductor, failures of the recorder (docs/capture.md, docs/trace-conventions.md)."""

from __future__ import annotations

import collections
import copy
import os
import shutil
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import traceprof  # noqa: E402
import traceprof.capture as capture  # noqa: E402
from traceprof.capture import compiled as compiled_mod  # noqa: E402
from traceprof.capture import graph_nodes, graph_patches  # noqa: E402
from traceprof.capture.compiled import (  # noqa: E402
    CompiledGraphRecorder,
    RecorderUnavailable,
    expected_event_name,
    module_path,
    parse_wrapper_source,
)
from traceprof.capture.module_paths import ModulePaths  # noqa: E402
from traceprof.trace.schema import COMPILED_TABLE_KEY, MODULE_TABLE_KEY  # noqa: E402

from .compiled_models import (  # noqa: E402
    CASES,
    compiled_table,
    join_compiled_events,
    load_trace,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILED_SAMPLE = os.path.join(REPO, "sample_traces", "gpt_train_compiled_cpu.pt.trace.json.gz")

needs_compiler = pytest.mark.skipif(
    not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")),
    reason="torch.compile on CPU needs a C++ compiler",
)


def scope_names(trace) -> collections.Counter:
    return collections.Counter(
        e["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("name", "").startswith("[traceprof:")
    )


def inductor_state() -> dict:
    """Every Inductor config value, plus the patched class attributes."""
    import torch._inductor.config as inductor_config
    from torch._inductor.output_code import CompiledFxGraph
    from torch._inductor.pattern_matcher import ReplacementPatternEntry

    state = dict(inductor_config.get_config_copy())
    state["CompiledFxGraph.post_compile"] = CompiledFxGraph.__dict__["post_compile"]
    state["ReplacementPatternEntry.replace_with_graph"] = ReplacementPatternEntry.__dict__[
        "replace_with_graph"
    ]
    return state


class Tiny(nn.Module):
    """A model of its own class per test that must compile inside its session (Dynamo reuses
    code compiled for a class's forward in an earlier test)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def tiny_class():
    """A fresh subclass of Tiny with its own ``forward`` code object and name."""
    namespace: dict = {}
    exec("def forward(self, x):\n    return self.fc2(self.act(self.fc1(x)))\n", namespace)
    tiny_class.made += 1
    return type(f"Tiny{tiny_class.made}", (Tiny,), {"forward": namespace["forward"]})


tiny_class.made = 0


def train(model, steps, prof=None, x=None):
    x = torch.randn(4, 8) if x is None else x
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if prof is not None:
            prof.step()


# -- pure helpers ------------------------------------------------------------------------------


def test_module_path_parses_dynamo_source_names():
    assert module_path("L['self'].blocks.0.ln") == ("L['self']", "blocks.0.ln")
    assert module_path("L['self'].blocks[1].attn") == ("L['self']", "blocks.1.attn")
    assert module_path("L['self']._orig_mod.fc") == ("L['self']", "fc")
    assert module_path("L['self']._modules['fc']") == ("L['self']", "fc")
    assert module_path("L['model']") == ("L['model']", "")
    assert module_path("G['net'].layers['a']") == ("G['net']", "layers.a")
    # every spelling Dynamo gives: getattr, odict items, a decorator's args[0], a bound method's
    # object, a closure's cell, a compile wrapper's module; anything else does not parse
    assert module_path("getattr(L['self'], 'x')") == ("L['self']", "x")
    assert module_path("___odict_getitem(L['self']._modules, 'fc').x") == ("L['self']", "fc.x")
    assert module_path("L['args'][0].model.layers.0") == ("L['args'][0]", "model.layers.0")
    assert module_path("L['kwargs']['model'].fc") == ("L['kwargs']['model']", "fc")
    assert module_path("L['fn'].__self__.h[0]") == ("L['fn'].__self__", "h.0")
    assert module_path("L['fn'].__closure__[0].cell_contents.fc") == (
        "L['fn'].__closure__[0].cell_contents",
        "fc",
    )
    assert module_path("L['self'].blocks[0]._orig_mod.attn") == ("L['self']", "blocks.0.attn")
    assert module_path("weird(L['self'])")[1] is None
    assert module_path("")[1] is None


def test_module_paths_resolve_by_module_id_whatever_the_spelling():
    """With the model's modules by id, a stack entry's path is its qualified name relative to
    the frame's root, which every entry must fit: a decorator's ``args[0]`` is not a module."""
    names = {1: "", 2: "model", 3: "model.layers", 4: "model.layers.0", 5: "lm_head"}
    paths = ModulePaths(
        [("2", "L['args'][0].model"), ("4", "L['args'][0].model.layers.0"), ("5@1", "L['args'][0].lm_head")],
        names,
    )
    assert paths.root == ""
    assert paths.resolve("4", "L['args'][0].model.layers.0") == ("L['args'][0]", "model.layers.0")
    assert paths.resolve("5@1", "L['args'][0].lm_head")[1] == "lm_head"
    # a block compiled alone: paths relative to the block, which the ids name
    blocks = {1: "", 2: "h", 3: "h.0", 4: "h.0.attn", 5: "h.0.mlp", 6: "h.1", 7: "h.1.attn"}
    paths = ModulePaths([("4", "L['self'].attn"), ("5", "L['self']._modules['mlp']")], blocks)
    assert paths.root == "h.0"
    assert paths.resolve("5", "L['self']._modules['mlp']")[1] == "mlp"
    # the spelling alone decides between two roots that both fit (args[0] is the wrapped self)
    paths = ModulePaths([("4", "L['args'][0].attn"), ("5", "L['args'][0].mlp")], blocks)
    assert paths.root == "h.0"
    # a module that is not the model's, and a spelling that does not parse: kept as written
    paths = ModulePaths([("99", "L['self'].extra.fc"), ("98", "odd(L['self'])")], blocks)
    assert paths.root is None
    assert paths.resolve("99", "L['self'].extra.fc")[1] == "extra.fc"
    assert paths.resolve("98", "odd(L['self'])")[1] == "odd(L['self'])"
    assert paths.unresolved == ["odd(L['self'])"]


def test_expected_event_names_of_wrapper_calls():
    assert expected_event_name("extern_kernels.addmm") == "aten::addmm"
    assert expected_event_name("extern_kernels.bmm_dtype") == "aten::bmm"
    assert expected_event_name("extern_kernels._mkl_linear") == "mkl::_mkl_linear"
    assert expected_event_name("extern_kernels.bias_addmm") is None
    assert expected_event_name("extern_kernels.no_such_kernel") is None
    assert expected_event_name("torch.ops.aten.convolution_backward.default") == "aten::convolution_backward"
    assert expected_event_name("aten.randint.low_out") == "aten::randint"
    assert expected_event_name("print") is None


WRAPPER = """
cpp_fused_add_0 = async_compile.cpp_pybinding(['float*'], r'''
extern "C"  void  kernel(float* in_out_ptr0)
{
    torch::aot_inductor::RAIIAtenRecordFunctionHandle record_graph_7_cpp_fused_add_0_("graph_7_cpp_fused_add_0", nullptr);
}
''')


async_compile.wait(globals())

class Runner:
    def call(self, args):
        primals_1, primals_2 = args
        buf0 = empty_strided_cpu((4, 16), (16, 1), torch.float32)
        # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.t, aten.addmm]
        # [Provenance debug handles] extern_kernels.addmm:2
        extern_kernels.addmm(primals_2, primals_1, primals_1, alpha=1, beta=1, out=buf0)
        # [Provenance debug handles] cpp_fused_add_0:3
        cpp_fused_add_0(buf0)
        # [Provenance debug handles] torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:4
        buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf0, buf0, buf0, 0.0, True)
        aten.scatter_reduce_.two(buf0,1,buf0,buf0, reduce='sum', include_self=True)
        buf0.zero_()
        cpp_fused_add_0(buf0)
        return (buf0, )

runner = Runner(partitions=[])
"""


def test_parse_wrapper_source_lists_call_sites_in_order():
    kernels, calls = parse_wrapper_source(WRAPPER)
    assert kernels == {"cpp_fused_add_0": {"kind": "cpp", "event": "graph_7_cpp_fused_add_0"}}
    assert [(c["kind"], c["event"], c["handle"]) for c in calls] == [
        ("extern", "aten::addmm", 2),
        ("cpp", "graph_7_cpp_fused_add_0", 3),
        ("fallback", "aten::_scaled_dot_product_flash_attention_for_cpu", 4),
        ("fallback", "aten::scatter_reduce_", None),
        ("wrapper", "aten::zero_", None),
        ("cpp", "graph_7_cpp_fused_add_0", None),
    ]
    assert parse_wrapper_source("") == ({}, [])


#: the shape of a CUDA wrapper (Inductor's Triton codegen): kernels defined with
#: async_compile.triton and called as ``<kernel>.run(..., stream=stream0)`` inside a device guard
TRITON_WRAPPER = '''
triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', """
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    pass
""", device_str='cuda')

triton_per_fused_native_layer_norm_1 = async_compile.triton('triton_per_fused_native_layer_norm_1', """
@triton.jit
def triton_per_fused_native_layer_norm_1(in_ptr0, out_ptr0, xnumel, r0_numel):
    pass
""", device_str='cuda')

async_compile.wait(globals())
del async_compile

def call(args):
    primals_1, primals_2 = args
    args.clear()
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((8, 16), (16, 1), torch.float32)
        # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.addmm]
        # [Provenance debug handles] extern_kernels.addmm:1
        extern_kernels.addmm(primals_2, primals_1, primals_1, alpha=1, beta=1, out=buf0)
        stream0 = get_raw_stream(0)
        # [Provenance debug handles] triton_poi_fused_add_0:2
        triton_poi_fused_add_0.run(buf0, buf0, 128, stream=stream0)
        # [Provenance debug handles] triton_per_fused_native_layer_norm_1:3
        triton_per_fused_native_layer_norm_1.run(buf0, buf0, 8, 16, stream=stream0)
    return (buf0, )
'''


def test_parse_wrapper_source_finds_triton_kernel_calls():
    """A CUDA graph's Triton kernels are call sites, named as their events (a ``cpu_op`` named
    after the kernel, as the traces of an H100 and an H200 show), with their provenance handles."""
    kernels, calls = parse_wrapper_source(TRITON_WRAPPER)
    assert kernels == {
        "triton_poi_fused_add_0": {"kind": "triton", "event": "triton_poi_fused_add_0"},
        "triton_per_fused_native_layer_norm_1": {
            "kind": "triton",
            "event": "triton_per_fused_native_layer_norm_1",
        },
    }
    assert [(c["kernel"], c["kind"], c["event"], c["handle"]) for c in calls] == [
        ("extern_kernels.addmm", "extern", "aten::addmm", 1),
        ("triton_poi_fused_add_0", "triton", "triton_poi_fused_add_0", 2),
        ("triton_per_fused_native_layer_norm_1", "triton", "triton_per_fused_native_layer_norm_1", 3),
    ]


def test_named_model_modules_see_through_compile_wrappers():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
    model[1] = torch.compile(model[1])
    wrapped = torch.compile(model)
    named = compiled_mod.named_model_modules(wrapped)
    assert [n for n, _, _ in named] == ["", "0", "1", "1.0", "1.1"]
    assert named[0][1] is model and named[0][2] is wrapped
    assert named[2][1] is model[1]._orig_mod and named[2][2] is model[1]
    assert compiled_mod.inside_compiled(named) == {"0", "1", "1.0", "1.1"}
    assert compiled_mod.inside_compiled(compiled_mod.named_model_modules(model)) == {"1.0", "1.1"}
    assert compiled_mod.is_compiled_model(model) and not compiled_mod.is_compiled_model(nn.Linear(2, 2))


# -- the fixture's traces: the table and the join ----------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_compiled_trace_has_the_table_and_its_kernel_events_join(compiled_traces, case):
    eager_path, compiled_path = compiled_traces[case]
    assert compiled_table(load_trace(eager_path)) is None  # nothing compiled: nothing embedded
    trace = load_trace(compiled_path)
    assert MODULE_TABLE_KEY in trace
    table = compiled_table(trace)
    assert table is not None, f"{COMPILED_TABLE_KEY} missing from the trace"
    assert (table["format"], table["version"]) == ("traceprof.compiled", 1)
    assert table["torch_version"] == torch.__version__
    assert table["warnings"] == []
    assert table["graphs"] and table["compiles"]
    for key, graph in this_session(table)["graphs"].items():
        assert graph["table_key"] == key and graph["nodes_source"] == "post_grad_pass"
        assert graph["calls"], key
        for site in graph["calls"]:
            assert {"kernel", "kind", "event", "handle", "index", "nodes", "module", "module_from"} <= set(
                site
            )
            for node in site["nodes"]:
                assert {"op", "inputs", "output", "module", "module_class"} <= set(graph["nodes"][node])
    directions = collections.Counter(c["direction"] for c in this_session(table)["compiles"])
    assert directions["forward"] == directions["backward"] >= 1

    result = join_compiled_events(trace)
    counts = result["counts"]
    assert counts["graph_runs"] >= 2 and counts["events"] >= 10, counts
    assert counts["matched"] >= 0.95 * counts["events"], (counts, result["unmatched"])
    assert counts["with_module"] >= 0.95 * counts["events"], counts
    assert counts["orphan_kernel_events"] == 0
    # module paths are qualified names of the original model (no "_orig_mod")
    eager_names = {
        r["name"] for r in capture.decode_table(load_trace(eager_path)[MODULE_TABLE_KEY])["modules"]
    }
    table_names = {r["name"] for r in capture.decode_table(trace[MODULE_TABLE_KEY])["modules"]}
    assert table_names == eager_names
    assert set(result["per_module"]) <= eager_names, set(result["per_module"]) - eager_names


def this_session(table):
    """The table without the graphs an earlier session of the process recorded."""
    return {
        "graphs": {k: g for k, g in table["graphs"].items() if not g.get("earlier_session")},
        "compiles": [c for c in table["compiles"] if not c.get("earlier_session")],
    }


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def test_a_pattern_replacement_takes_the_module_of_the_heaviest_node_it_replaced(compiled_traces):
    """The tiny GPT ties lm_head's weight to wte's: Inductor's post-grad pattern mm + add -> addmm
    replaces lm_head's weight-gradient mm and the add summing the tied weight's two gradients
    (no module stack) by one addmm. It belongs to lm_head, the module of the mm it replaced (not
    the root, the common module of its inputs' modules, wte and lm_head)."""
    path = compiled_traces["gpt"][1]
    graphs = this_session(compiled_table(load_trace(path)))["graphs"].values()
    rows = [row for g in graphs if g["direction"] == "backward" for row in g["nodes"].values()]
    matmuls = [row for row in rows if row["op"] in ("aten.mm.default", "aten.addmm.default")]
    assert matmuls and all(row["module"] != "" for row in matmuls), [
        (row["op"], row["module_from"]) for row in matmuls if row["module"] == ""
    ]
    replaced = [
        (row["op"], row["module"], row["module_class"]) for row in rows if row["module_from"] == "replaced"
    ]
    assert ("aten.addmm.default", "lm_head", "Linear") in replaced
    # the analysis: no matmul on the root's own time; lm_head has its weight gradient's FLOPs
    profile = traceprof_analyze(path)
    root = profile.nodes[profile.roots[0]]
    assert [(o.name, o.phase) for o in root.ops if o.name in MATMUL_OPS] == []
    lm_head = profile.find("lm_head")
    assert any(o.name == "aten::addmm" and o.phase == "backward" and o.flops > 0 for o in lm_head.ops)


def test_replaced_nodes_take_the_stack_of_the_heaviest_matched_node():
    from types import SimpleNamespace

    aten = torch.ops.aten

    def fx_node(target, **meta):
        return SimpleNamespace(op="call_function", target=target, meta=dict(meta))

    add_a = fx_node(aten.add.Tensor, nn_module_stack={"1": ("L['self'].a", nn.Linear)})
    mm_b = fx_node(aten.mm.default, fwd_nn_module_stack={"2": ("L['self'].b", nn.Linear)})
    mm_c = fx_node(aten.mm.default, fwd_nn_module_stack={"3": ("L['self'].c", nn.Linear)})
    bare = fx_node(aten.add.Tensor)  # no stack: never chosen
    new, own = (
        fx_node(aten.addmm.default),
        fx_node(aten.relu.default, nn_module_stack={"4": ("L['self'].d", nn.ReLU)}),
    )
    graph_patches.tag_replaced([bare, add_a, mm_b, mm_c], [new, own])
    assert new.meta[graph_nodes.REPLACED_KEY] == mm_b.meta["fwd_nn_module_stack"]  # a matmul; ties: the first
    assert graph_nodes.REPLACED_KEY not in own.meta  # a node with a stack of its own keeps it
    row = graph_nodes._describe_node(SimpleNamespace(**vars(new), args=(), kwargs={}), ModulePaths([], {}))
    assert (row.module, row.module_class, row.module_from) == ("b", "Linear", "replaced")
    pointwise = fx_node(aten.addmm.default)
    graph_patches.tag_replaced([bare, add_a], [pointwise])  # only pointwise nodes: the first with a stack
    assert pointwise.meta[graph_nodes.REPLACED_KEY] == add_a.meta["nn_module_stack"]


def traceprof_analyze(path):
    import traceprof

    profile = traceprof.analyze(path)
    profile.self_check()
    return profile


def test_each_way_of_compiling_gets_its_scopes_and_roots(compiled_traces):
    tables = {case: this_session(compiled_table(load_trace(compiled_traces[case][1]))) for case in CASES}
    scopes = {case: scope_names(load_trace(compiled_traces[case][1])) for case in CASES}
    # torch.compile(model) and model.compile(): one root scope per step, named as the original
    assert scopes["gpt"] == {"[traceprof:1]GPT: ": 1}
    assert scopes["cnn"] == {"[traceprof:1]SmallCNN: ": 1}
    assert scopes["graph_break"] == {"[traceprof:1]GraphBreakMLP: ": 1}
    assert {c["root"] for c in tables["gpt"]["compiles"]} == {""}
    assert {c["root_class"] for c in tables["cnn"]["compiles"]} == {"SmallCNN"}
    # a graph break: two frames, each with its forward and backward graph
    assert len({c["compile_id"] for c in tables["graph_break"]["compiles"]}) == 2
    assert len(tables["graph_break"]["graphs"]) == 4
    # blocks compiled one by one: an eager scope per block, one graph shared by both blocks
    # (the session's hooks must not make Dynamo recompile per block), time in both blocks
    blocks = {name for name in scopes["per_block"] if name.startswith("[traceprof:1]Block: ")}
    assert blocks == {"[traceprof:1]Block: transformer.h.0", "[traceprof:1]Block: transformer.h.1"}
    assert not any("transformer.h.0." in name for name in scopes["per_block"])  # no hooks inside
    forward = [c for c in tables["per_block"]["compiles"] if c["direction"] == "forward"]
    # (a real compile with a cold Inductor cache, a cache hit with the row kept from then on a rerun)
    assert [(c["root"], c["root_class"]) for c in forward] == [("transformer.h.0", "Block")]
    assert all(c["table_from"] in ("compile", "cache_dir") for c in tables["per_block"]["compiles"])
    per_module = join_compiled_events(load_trace(compiled_traces["per_block"][1]))["per_module"]
    for block in ("transformer.h.0", "transformer.h.1"):
        assert any(path.startswith(block + ".attn") for path in per_module), (block, per_module)


# -- the session with compiled models ------------------------------------------------------------


@needs_compiler
def test_inductor_config_and_patches_restored_also_on_exceptions(tmp_path):
    before = inductor_state()
    model = tiny_class()()
    model.compile()
    impl = model.__dict__["_compiled_call_impl"]
    with capture.profile(model, logdir=tmp_path / "ok", wait=0, warmup=1, active=1) as prof:
        assert inductor_state() != before  # the recorder is on from __enter__
        assert model.__dict__["_compiled_call_impl"] is not impl
        train(model, 2, prof)
    assert inductor_state() == before
    assert model.__dict__["_compiled_call_impl"] is impl
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    assert compiled_table(load_trace(prof.trace_paths[0]))["graphs"]

    with pytest.raises(RuntimeError, match="boom"):
        with capture.profile(model, logdir=tmp_path / "raise", wait=0, warmup=1, active=2) as prof:
            train(model, 2, prof)
            raise RuntimeError("boom")
    assert inductor_state() == before
    assert model.__dict__["_compiled_call_impl"] is impl
    assert CompiledGraphRecorder._active is None


@needs_compiler
def test_no_recompile_after_the_session(tmp_path):
    """Graphs compiled in a session do not depend on the session's hooks: calling the model
    afterwards compiles nothing."""
    from torch._dynamo.utils import counters

    model = torch.compile(tiny_class()())
    with capture.profile(model, logdir=tmp_path, wait=0, warmup=1, active=1) as prof:
        train(model, 2, prof)
    frames = counters["frames"]["total"]
    train(model, 2)
    assert counters["frames"]["total"] == frames


@needs_compiler
def test_every_cycle_of_a_repeating_schedule_gets_the_table(tmp_path):
    model = torch.compile(tiny_class()())
    with capture.profile(model, logdir=tmp_path, wait=1, warmup=1, active=1, repeat=2) as prof:
        train(model, 6, prof)
    assert len(prof.trace_paths) == 2
    for path in prof.trace_paths:
        trace = load_trace(path)
        counts = join_compiled_events(trace)["counts"]
        assert counts["graph_runs"] == 2 and counts["with_module"] == counts["events"] > 0, counts


@needs_compiler
def test_profile_once_twice_embeds_the_graphs_of_the_first_session(tmp_path):
    """The second call compiles nothing (Dynamo reuses the first session's graphs): its trace
    gets those graphs from the earlier session."""
    model = torch.compile(tiny_class()())
    x = torch.randn(4, 8)
    first = capture.profile_once(model, x, backward=True, path=tmp_path / "1.pt.trace.json.gz")
    second = capture.profile_once(model, x, backward=True, path=tmp_path / "2.pt.trace.json.gz")
    t1, t2 = load_trace(first), load_trace(second)
    table1, table2 = compiled_table(t1), compiled_table(t2)
    assert not any(g.get("earlier_session") for g in table1["graphs"].values())
    assert set(table1["graphs"]) <= set(table2["graphs"])
    assert all(table2["graphs"][k].get("earlier_session") for k in table1["graphs"])
    for trace in (t1, t2):
        counts = join_compiled_events(trace)["counts"]
        assert counts["events"] > 0 and counts["with_module"] == counts["events"], counts
    # an eager model in the same process gets no compiled table
    eager = capture.profile_once(Tiny(), x, path=tmp_path / "eager.pt.trace.json.gz")
    assert compiled_table(load_trace(eager)) is None


@needs_compiler
def test_cache_hits_get_the_rows_of_the_compile_that_filled_the_cache(tmp_path, monkeypatch):
    """A model whose graphs are Inductor cache hits (same graphs, a new Dynamo frame) gets the
    rows recorded when they were compiled: from this process's earlier session, or from the
    file next to Inductor's cache (what a rerun of the script finds)."""
    classes = [tiny_class() for _ in range(3)]  # the same forward source, three code objects
    tables = []
    for i, where in enumerate(("compile", "process", "cache_dir")):
        if where == "cache_dir":  # as in a new process: nothing recorded in memory
            monkeypatch.setattr(CompiledGraphRecorder, "_earlier_graphs", {})
            monkeypatch.setattr(CompiledGraphRecorder, "_earlier_compiles", [])
        torch.manual_seed(0)
        model = torch.compile(classes[i](24))  # graphs of this test only (width 24)
        with capture.profile(model, logdir=tmp_path / where, wait=0, warmup=1, active=1) as prof:
            train(model, 2, prof)
        trace = load_trace(prof.trace_paths[0])
        table = this_session(compiled_table(trace))
        tables.append(table)
        if i == 0 and {c["table_from"] for c in table["compiles"]} == {"cache_dir"}:
            continue  # this test's graphs were compiled by an earlier run of the tests
        assert {c["table_from"] for c in table["compiles"]} == {where}, (where, table["compiles"])
        assert {c["root"] for c in table["compiles"]} == {""}
        counts = join_compiled_events(trace)["counts"]
        assert counts["events"] > 0 and counts["with_module"] == counts["events"], (where, counts)
    assert set(tables[0]["graphs"]) == set(tables[1]["graphs"]) == set(tables[2]["graphs"])


@needs_compiler
def test_a_failing_recorder_warns_and_the_loop_goes_on(tmp_path, monkeypatch):
    # Inductor's caches off: every graph is compiled for real (keys None: "nokey:" rows)
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        failing_recorder(tmp_path, monkeypatch)


def failing_recorder(tmp_path, monkeypatch):
    before = inductor_state()

    def boom(*args, **kwargs):
        raise ValueError("recorder bug")

    # 1. recording a compiled graph fails: the compile and the step go on, one warning at the end
    monkeypatch.setattr(CompiledGraphRecorder, "_on_compiled", boom)
    model = torch.compile(tiny_class()())
    with pytest.warns(UserWarning, match="problem.*recording compiled graphs.*recorder bug"):
        with capture.profile(model, logdir=tmp_path / "a", wait=0, warmup=1, active=1) as prof:
            train(model, 2, prof)
    trace = load_trace(prof.trace_paths[0])
    # the trace says why it has no rows: the analysis repeats it instead of asking for a capture
    table = compiled_table(trace)
    assert MODULE_TABLE_KEY in trace and table["graphs"] == {}
    assert any("recorder bug" in w for w in table["warnings"])
    advice = [w for w in traceprof_analyze(prof.trace_paths[0]).warnings if "compiled regions" in w]
    assert advice and "recorder bug" in advice[0] and "Capture with" not in advice[0]
    monkeypatch.undo()
    assert inductor_state() == before

    # 2. the post-grad pass fails: never inside the user's compile
    monkeypatch.setattr(compiled_mod, "_provenance_map", boom)
    model = torch.compile(tiny_class()())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture.profile(model, logdir=tmp_path / "b", wait=0, warmup=1, active=1) as prof:
            train(model, 2, prof)
    assert any("recorder bug" in str(w.message) for w in caught)
    assert len(prof.trace_paths) == 1
    monkeypatch.undo()
    assert inductor_state() == before

    # 3. the table cannot be built: the session warns once, stops recording, writes the trace
    monkeypatch.setattr(CompiledGraphRecorder, "table", boom)
    model = torch.compile(tiny_class()())
    with pytest.warns(UserWarning, match="could not be embedded"):
        with capture.profile(model, logdir=tmp_path / "c", wait=0, warmup=1, active=1) as prof:
            train(model, 2, prof)
    trace = load_trace(prof.trace_paths[0])
    table = compiled_table(trace)  # a table without graphs that records the failure
    assert MODULE_TABLE_KEY in trace and table["graphs"] == {}
    assert table["omitted"] and "recorder bug" in table["omitted"][0]["reason"]
    advice = [w for w in traceprof_analyze(prof.trace_paths[0]).warnings if "compiled regions" in w]
    assert advice and "recorder bug" in advice[0] and "Capture with" not in advice[0]
    monkeypatch.undo()
    assert inductor_state() == before

    # 4. the recorder cannot start (a torch without its hooks): a warning for a compiled model
    def unavailable(self):
        raise RecorderUnavailable("no hooks in this torch")

    monkeypatch.setattr(CompiledGraphRecorder, "__enter__", unavailable)
    with pytest.warns(UserWarning, match="not recorded.*no hooks in this torch"):
        with capture.profile(model, logdir=tmp_path / "d", wait=0, warmup=1, active=1) as prof:
            train(model, 2, prof)
    assert scope_names(load_trace(prof.trace_paths[0])) == {
        f"[traceprof:1]{type(model._orig_mod).__name__}: ": 1
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for an eager model
        with capture.profile(Tiny(), logdir=tmp_path / "e", wait=0, warmup=1, active=1) as prof:
            train(prof.model, 2, prof)
    assert inductor_state() == before


@needs_compiler
def test_compiled_module_scopes_for_a_bare_profiler(tmp_path):
    """Without the session: modules compiled in place get their scope from the helper."""
    model = nn.Sequential(nn.Linear(8, 8), tiny_class()(12))
    model[1].compile()
    impl = model[1].__dict__["_compiled_call_impl"]
    x = torch.randn(4, 8)
    model(x)  # compiles
    with compiled_mod.compiled_module_scopes(model):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model(x)
    path = str(tmp_path / "bare.json")
    prof.export_chrome_trace(path)
    assert scope_names(load_trace(path)) == {f"[traceprof:1]{type(model[1]).__name__}: 1": 1}
    assert model[1].__dict__["_compiled_call_impl"] is impl


def test_record_compiled_false_leaves_inductor_alone(tmp_path):
    before = inductor_state()
    model = Tiny()
    with capture.profile(model, logdir=tmp_path, wait=0, warmup=0, active=1, record_compiled=False) as prof:
        assert inductor_state() == before
        train(model, 1, prof)
    assert prof.compiled_table() is None


# -- the committed sample ---------------------------------------------------------------------------


def test_compiled_cpu_sample_trace_joins():
    trace = load_trace(COMPILED_SAMPLE)
    table = compiled_table(trace)
    assert table is not None and table["graphs"]
    counts = join_compiled_events(trace)["counts"]
    assert counts["events"] > 50 and counts["matched"] == counts["events"], counts
    assert counts["with_module"] >= 0.95 * counts["events"], counts


# -- values the table cannot hold as plain JSON ------------------------------------------------


def test_values_are_encoded_as_strict_json():
    """Every value the recorder meets becomes JSON that a strict writer accepts, in the
    encoding docs/trace-conventions.md ("Values") defines; the table's writer never fails."""
    import json
    import math

    from traceprof.capture.compiled import encode_value

    assert encode_value(float("-inf")) == {"float": "-inf"}
    assert encode_value(float("inf")) == {"float": "inf"}
    assert encode_value(math.nan) == {"float": "nan"}
    assert encode_value(torch.finfo(torch.float32).min) == torch.finfo(torch.float32).min
    assert encode_value(2**70) == {"int": str(2**70)}
    assert encode_value(-(2**63)) == -(2**63)
    assert encode_value(torch.float16) == {"dtype": "float16"}
    assert encode_value(torch.device("cpu")) == {"device": "cpu"}
    assert encode_value(torch.contiguous_format) == {"enum": "torch.contiguous_format"}
    assert encode_value(torch.zeros(2, 3)) == {"shape": [2, 3], "dtype": "float32"}
    assert encode_value({"a": [1.5, float("nan")]}) == {"a": [1.5, {"float": "nan"}]}
    assert encode_value("x" * 1000) == "x" * 200
    deep: list = []
    for _ in range(50):
        deep = [deep]
    values = [float("-inf"), 2**80, torch.int64, torch.device("cpu"), torch.strided, object(), deep]
    json.dumps([encode_value(v) for v in values], allow_nan=False)


class MaskedDecoder(nn.Module):
    """Two pre-norm blocks of causal self-attention whose mask is filled with ``-inf``, as every
    decoder's is: a non-finite constant in the compiled graphs."""

    def __init__(self, d: int = 32, n: int = 2, vocab: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        t = x.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = (q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf"))
        x = x + scores.softmax(-1) @ v
        return x + self.mlp(x)


@needs_compiler
def test_a_graph_with_minus_infinity_keeps_its_table_and_its_blocks(tmp_path):
    """The causal mask's -inf is a constant of the compiled graphs: the table is embedded (no
    node left out) and the blocks are under the root, as in the eager trace."""
    import traceprof

    torch.manual_seed(0)
    model = torch.compile(MaskedDecoder())
    idx = torch.randint(0, 64, (2, 16))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture.profile(model, logdir=tmp_path, wait=0, warmup=1, active=1) as prof:
            for _ in range(2):
                model(idx).sum().backward()
                prof.step()
    assert not [w for w in caught if "traceprof" in str(w.message)], [str(w.message) for w in caught]
    table = compiled_table(load_trace(prof.trace_paths[0]))
    assert table["graphs"] and table["omitted"] == []
    encoded = [
        v
        for g in table["graphs"].values()
        for n in g["nodes"].values()
        for v in n["inputs"]
        if isinstance(v, dict) and "float" in v
    ]
    assert {"float": "-inf"} in encoded
    profile = traceprof.analyze(prof.trace_paths[0])
    profile.self_check()
    for name in ("blocks.0", "blocks.1", "blocks.0.qkv", "blocks.1.mlp.0"):
        node = profile.find(name)
        assert node.qualified_name == name and node.total.cpu_us > 0
    assert not [w for w in profile.warnings if "compiled regions" in w]

    # the table view's parameters, mult-adds and sizes are the eager trace's: the outputs of
    # the modules inside compiled code come from the compiled graphs
    from traceprof.render.table import torchinfo_stats

    eager = copy.deepcopy(model._orig_mod)
    with capture.profile(eager, logdir=tmp_path / "eager", wait=0, warmup=1, active=1) as prof:
        for _ in range(2):
            eager(idx).sum().backward()
            prof.step()
    eager_stats = torchinfo_stats(traceprof.analyze(prof.trace_paths[0]))
    stats = torchinfo_stats(profile)
    assert eager_stats is not None and stats is not None
    for field in (
        "total_params",
        "trainable_params",
        "total_mult_adds",
        "total_output_bytes",
        "total_param_bytes",
    ):
        assert getattr(stats, field) == getattr(eager_stats, field), field
    row = profile.metadata.module_table.modules["blocks.0.qkv"]
    assert row.outputs == {"shape": [2, 16, 96], "dtype": "float32"} and row.inputs is None


@needs_compiler
def test_a_compiled_function_that_reaches_the_model_gets_the_model_tree(tmp_path):
    """``torch.compile(train_step)`` with the model reached through the function's globals or
    closure: no module scope opens inside the compiled code, and the tree comes from the
    table, by the model's qualified names (the module ids name them, whatever the spelling)."""
    import traceprof

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)

    @torch.compile
    def train_step(x):
        loss = model(x).square().mean()
        loss.backward()
        return loss

    with capture.profile(model, logdir=tmp_path, wait=0, warmup=1, active=1) as prof:
        for _ in range(2):
            train_step(x)
            prof.step()
    profile = traceprof.analyze(prof.trace_paths[0])
    profile.self_check()
    modules = {n.qualified_name: n for n in profile.walk() if n.kind.value == "module"}
    assert set(modules) == {"", "0", "1", "2"}
    assert modules[""].class_name == "Sequential"
    for name in ("0", "2"):
        assert modules[name].parent == modules[""].id
        assert modules[name].forward.total.macs > 0 and modules[name].backward.total.cpu_us > 0


@pytest.mark.parametrize("case", ["gpt", "per_block"])
def test_the_table_view_of_a_compiled_model_totals_as_eager(compiled_traces, case):
    """torchinfo's totals (parameters of the modules that ran, mult-adds and sizes from their
    outputs) equal the eager trace's: the outputs of modules inside compiled code come from the
    graphs, for every block compiled one by one (they share the first block's graph)."""
    from traceprof.result.torchinfo import torchinfo_stats

    eager_path, compiled_path = compiled_traces[case]
    eager, compiled = (
        torchinfo_stats(traceprof.analyze(eager_path)),
        torchinfo_stats(traceprof.analyze(compiled_path)),
    )
    for total in ("total_params", "total_mult_adds", "total_param_bytes", "total_output_bytes"):
        assert getattr(compiled, total) == getattr(eager, total), total
