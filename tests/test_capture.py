"""traceprof.capture with real torch on CPU: scopes, module table, hooks, ranks, compile."""

from __future__ import annotations

import collections
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import traceprof.capture as capture  # noqa: E402
from traceprof.capture import sample_models  # noqa: E402
from traceprof.capture.module_table import decode_table  # noqa: E402

SCOPE_RE = re.compile(r"^\[traceprof:1\](\w+): ?(.*)$")


# -- helpers -----------------------------------------------------------------------------------


def load(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def scopes(trace):
    """Module scope events (ph X), sorted by start."""
    events = [
        e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith("[traceprof:")
    ]
    return sorted(events, key=lambda e: (e["ts"], -e["dur"]))


def scope_key(event):
    match = SCOPE_RE.match(event["name"])
    assert match, event["name"]
    return match.group(1), match.group(2)


def table_of(trace):
    assert "traceprof" in trace, "module table missing from the trace's top level"
    return decode_table(trace["traceprof"])


def all_hooks_removed(model):
    return all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


class CallRecorder:
    """Independent reference: a plain forward hook on every module, recording every call."""

    def __init__(self, model):
        self.names = {m: n for n, m in model.named_modules()}
        self.calls = []  # (class, qualified name)
        self.first = {}  # name -> (args, kwargs, output) descriptions of the first call
        self.on = False
        self.handles = [m.register_forward_hook(self.hook, with_kwargs=True) for m in model.modules()]

    def hook(self, module, args, kwargs, output):
        if not self.on:
            return
        name = self.names[module]
        self.calls.append((type(module).__name__, name))
        if name not in self.first:
            inputs = [describe(a) for a in args]
            if kwargs:
                inputs.append({"kwargs": {k: describe(v) for k, v in kwargs.items()}})
            self.first[name] = (inputs, describe(output))

    def remove(self):
        for h in self.handles:
            h.remove()


def describe(value):
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).split(".")[-1]}
    if isinstance(value, (tuple, list)):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    return None


def run_session(model, step_fn, tmp_path, steps=4, recorder=None, **kw):
    """wait=1, warmup=1, active=2 by default; recorder is switched on for active steps only."""
    kw.setdefault("wait", 1)
    kw.setdefault("warmup", 1)
    kw.setdefault("active", 2)
    with capture.profile(model, logdir=tmp_path / "logs", **kw) as prof:
        for i in range(steps):
            if recorder is not None:
                recorder.on = kw["wait"] + kw["warmup"] <= i < kw["wait"] + kw["warmup"] + kw["active"]
            step_fn()
            prof.step()
    if recorder is not None:
        recorder.on = False
    return prof


def train_step_fn(model, make_inputs, loss_of=lambda out: out.float().sum()):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def step():
        loss = loss_of(model(*make_inputs()))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


class TwiceModel(nn.Module):
    """``shared`` is called twice per forward; ``head`` once."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = self.act(self.shared(x))
        x = self.act(self.shared(x))
        return self.head(x)


# -- tests -------------------------------------------------------------------------------------


def test_import_does_not_import_torch():
    code = (
        "import sys, traceprof, traceprof.capture; assert 'torch' not in sys.modules;"
        " assert traceprof.profile is traceprof.capture.profile"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_resnet_training_scopes_match_every_module_call(tmp_path):
    """Every module call in the active steps gives one scope with its qualified name; scopes
    nest like the module calls; in-place ReLU and backward work; hooks are gone afterwards."""
    torch.manual_seed(0)
    model = sample_models.ResNet18(num_classes=10)
    recorder = CallRecorder(model)
    step = train_step_fn(model, lambda: (torch.randn(2, 3, 32, 32),))
    prof = run_session(model, step, tmp_path, recorder=recorder)
    recorder.remove()

    assert len(prof.trace_paths) == 1
    path = prof.trace_paths[0]
    assert re.fullmatch(r".+_\d+\.\d+\.pt\.trace\.json\.gz", os.path.basename(path))
    assert os.listdir(tmp_path / "logs") == [os.path.basename(path)]  # no temp files left
    trace = load(path)
    events = scopes(trace)
    got = collections.Counter(scope_key(e) for e in events)
    assert got == collections.Counter(recorder.calls)
    assert got[("ReLU", "layer1.0.relu")] == 2 * 2  # called twice per block, two active steps
    assert ("ResNet18", "") in got
    assert all_hooks_removed(model)

    # Nesting: the innermost enclosing scope of a module's scope is its parent module's.
    open_stack = []
    for e in events:
        while open_stack and open_stack[-1]["ts"] + open_stack[-1]["dur"] <= e["ts"]:
            open_stack.pop()
        _, name = scope_key(e)
        if name:
            assert open_stack, name
            parent = scope_key(open_stack[-1])[1]
            assert name.rsplit(".", 1)[0] == parent or (parent == "" and "." not in name), (name, parent)
        else:
            assert not open_stack
        open_stack.append(e)


def test_module_table_counts_match_live_model_with_tied_and_frozen(tmp_path):
    torch.manual_seed(0)
    model = sample_models.GPT(
        sample_models.GPTConfig(vocab_size=512, block_size=32, n_layer=2, n_head=2, d_model=32)
    )
    model.transformer.h[0].requires_grad_(False)  # frozen block
    assert model.lm_head.weight is model.transformer.wte.weight
    step = train_step_fn(model, lambda: (torch.randint(0, 512, (2, 16)),))
    prof = run_session(model, step, tmp_path)
    trace = load(prof.trace_paths[0])
    table = table_of(trace)
    assert table["format"] == "traceprof.modules" and table["version"] == 1
    assert table["torch_version"] == torch.__version__
    assert (table["rank"], table["world_size"]) == (0, 1)
    rows = {r["name"]: r for r in table["modules"]}
    assert list(rows) == [n for n, _ in model.named_modules()]
    for name, module in model.named_modules():
        row = rows[name]
        unique = {id(p): p for p in module.parameters()}.values()
        assert row["class"] == type(module).__name__
        assert row["params"] == sum(p.numel() for p in module.parameters(recurse=False)), name
        assert row["params_total"] == sum(p.numel() for p in unique), name
        assert row["trainable_total"] == sum(p.numel() for p in unique if p.requires_grad)
        assert row["frozen_total"] == sum(p.numel() for p in unique if not p.requires_grad)
        assert row["buffers_total"] == sum(b.numel() for b in module.buffers())
        assert row["extra_repr"] == module.extra_repr()
    # tied: owned by both, counted once in the total
    assert rows["lm_head"]["params"] == rows["transformer.wte"]["params"] == 512 * 32
    n_unique = sum(p.numel() for p in model.parameters())
    assert rows[""]["params_total"] == n_unique
    assert n_unique < sum(r["params"] for r in rows.values())
    assert rows["transformer.h.0"]["frozen_total"] == rows["transformer.h.0"]["params_total"] > 0
    assert rows[""]["frozen_total"] == rows["transformer.h.0"]["params_total"]


def test_shapes_equal_what_a_forward_hook_sees_with_kwargs_and_dict_output(tmp_path):
    torch.manual_seed(0)
    config = sample_models.BertConfig(
        vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    model = sample_models.BertEncoder(config).eval()
    ids = torch.randint(0, 256, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    recorder = CallRecorder(model)

    def step():
        with torch.no_grad():
            model(ids, attention_mask=mask)

    prof = run_session(model, step, tmp_path, recorder=recorder)
    recorder.remove()
    rows = {r["name"]: r for r in table_of(load(prof.trace_paths[0]))["modules"]}
    called = {name for name, row in rows.items() if "inputs" in row}
    assert called == set(recorder.first) == set(rows) - {"encoder.layer"}  # ModuleList: no call
    for name, (inputs, outputs) in recorder.first.items():
        assert rows[name]["inputs"] == inputs, name
        assert rows[name]["outputs"] == outputs, name
    root = rows[""]
    assert root["inputs"] == [
        {"shape": [2, 12], "dtype": "int64"},
        {"kwargs": {"attention_mask": {"shape": [2, 12], "dtype": "int64"}}},
    ]
    assert set(root["outputs"]) == {"logits", "last_hidden_state"}
    # keyword call of a child: attn_mask=None is a kwarg -> null
    assert rows["encoder.layer.0"]["inputs"][-1] == {
        "kwargs": {"attn_mask": {"shape": [2, 1, 1, 12], "dtype": "bool"}}
    }


def test_module_called_twice_gives_two_scopes_with_the_same_name(tmp_path):
    model = TwiceModel()
    step = train_step_fn(model, lambda: (torch.randn(4, 8),))
    prof = run_session(model, step, tmp_path, active=1, steps=3)
    trace = load(prof.trace_paths[0])
    got = collections.Counter(scope_key(e) for e in scopes(trace))
    assert got == {("TwiceModel", ""): 1, ("Linear", "shared"): 2, ("ReLU", "act"): 2, ("Linear", "head"): 1}
    rows = {r["name"]: r for r in table_of(trace)["modules"]}
    assert rows["shared"]["inputs"] == [{"shape": [4, 8], "dtype": "float32"}]
    never = {r["name"] for r in rows.values() if "inputs" in r}
    assert never == {"", "shared", "act", "head"}


def test_module_never_called_has_no_shapes(tmp_path):
    model = TwiceModel()
    model.unused = nn.Linear(2, 2)
    prof = run_session(model, lambda: model(torch.randn(4, 8)), tmp_path, active=1, steps=3)
    rows = {r["name"]: r for r in table_of(load(prof.trace_paths[0]))["modules"]}
    assert "inputs" not in rows["unused"] and "outputs" not in rows["unused"]


def test_exception_in_forward_closes_scopes_and_session_removes_hooks(tmp_path):
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.fail = False

        def forward(self, x):
            y = self.lin(x)
            if self.fail:
                raise RuntimeError("boom")
            return y

    model = nn.Sequential(nn.Linear(4, 4), Boom(), nn.ReLU(inplace=True))
    x = torch.randn(2, 4)
    with capture.profile(model, logdir=tmp_path / "a", wait=0, warmup=0, active=3) as prof:
        model(x)
        model[1].fail = True
        with pytest.raises(RuntimeError, match="boom"):
            model(x)  # caught inside the loop: always_call hooks close the scopes
        assert prof._state.stack() == []
        model[1].fail = False
        model(x)
        prof.step()
    trace = load(prof.trace_paths[0])
    names = [scope_key(e)[1] for e in scopes(trace)]
    assert names.count("1") == 3 and names.count("1.lin") == 3 and names.count("2") == 2
    assert all_hooks_removed(model)

    # an exception that leaves the session: hooks are removed all the same
    model[1].fail = True
    with pytest.raises(RuntimeError, match="boom"):
        with capture.profile(model, logdir=tmp_path / "b", wait=0, warmup=1, active=2) as prof:
            for _ in range(4):
                model(x)
                prof.step()
    assert all_hooks_removed(model)
    assert not prof.enabled
    prof.step()  # a no-op after the session


def test_inplace_relu_model_trains(tmp_path):
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 2),
        nn.ReLU(inplace=True),
    )
    step = train_step_fn(model, lambda: (torch.randn(2, 3, 8, 8),))
    prof = run_session(model, step, tmp_path)
    trace = load(prof.trace_paths[0])
    got = collections.Counter(scope_key(e)[1] for e in scopes(trace))
    assert got == {"": 2, "0": 2, "1": 2, "2": 2, "3": 2, "4": 2, "5": 2}
    assert all_hooks_removed(model)


def test_repeat_writes_one_trace_per_cycle_each_with_a_table(tmp_path):
    model = TwiceModel()
    prof = run_session(
        model, lambda: model(torch.randn(3, 8)), tmp_path, steps=8, wait=1, warmup=1, active=1, repeat=2
    )
    assert len(prof.trace_paths) == 2 and len(set(prof.trace_paths)) == 2
    for path in prof.trace_paths:
        trace = load(path)
        assert table_of(trace)["modules"][0]["inputs"] == [{"shape": [3, 8], "dtype": "float32"}]
        assert len(scopes(trace)) == 6


def test_ranks_option_skips_other_ranks(tmp_path):
    model = TwiceModel()
    with capture.profile(model, logdir=tmp_path / "logs", ranks=[1], wait=0, warmup=0, active=1) as prof:
        assert all_hooks_removed(model)
        for _ in range(3):
            model(torch.randn(2, 8))
            prof.step()
    assert prof.trace_paths == [] and prof.profiler is None and not prof.enabled
    assert not (tmp_path / "logs").exists()


def test_rank_and_world_size_from_torchrun_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    model = TwiceModel()
    prof = run_session(
        model, lambda: model(torch.randn(2, 8)), tmp_path, ranks=[1], wait=0, warmup=0, active=1, steps=2
    )
    assert len(prof.trace_paths) == 1
    assert re.fullmatch(r".+_\d+\.rank1of2\.\d+\.pt\.trace\.json\.gz", os.path.basename(prof.trace_paths[0]))
    table = table_of(load(prof.trace_paths[0]))
    assert (table["rank"], table["world_size"]) == (1, 2)


def test_rank_from_initialized_process_group(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = TwiceModel()
        prof = run_session(
            model, lambda: model(torch.randn(2, 8)), tmp_path, ranks=[0], wait=0, warmup=0, active=1, steps=2
        )
    finally:
        dist.destroy_process_group()
    assert os.path.basename(prof.trace_paths[0]).split(".")[1] == "rank0of1"
    assert (table_of(load(prof.trace_paths[0]))["rank"]) == 0


def test_profile_once_forward_and_backward(tmp_path):
    model = TwiceModel()
    x = torch.randn(2, 8)
    path = capture.profile_once(model, x, path=tmp_path / "fwd.pt.trace.json.gz")
    assert path == str(tmp_path / "fwd.pt.trace.json.gz")
    trace = load(path)
    assert len(scopes(trace)) == 6
    assert not any(e["name"].startswith("autograd::engine") for e in trace["traceEvents"])

    before = model.head.weight.grad = torch.ones_like(model.head.weight)
    path = capture.profile_once(
        model, x, backward=True, loss_fn=lambda out: out.pow(2).mean(), path=tmp_path / "bwd.pt.trace.json"
    )
    with open(path, encoding="utf-8") as f:  # no .gz suffix: plain JSON
        trace = json.load(f)
    assert len(scopes(trace)) == 6
    assert any("Backward" in e.get("name", "") for e in trace["traceEvents"])
    assert model.head.weight.grad is before and model.shared.weight.grad is None
    assert table_of(trace)["modules"][0]["outputs"] == {"shape": [2, 3], "dtype": "float32"}
    assert all_hooks_removed(model)
    assert sorted(os.listdir(tmp_path)) == ["bwd.pt.trace.json", "fwd.pt.trace.json.gz"]


def test_compiled_model_does_not_crash_and_gets_a_root_scope(tmp_path):
    model = TwiceModel()
    compiled = torch.compile(model)
    x = torch.randn(2, 8)
    compiled(x).sum().backward()  # compiled before the session: no recompilation inside it
    step = train_step_fn(compiled, lambda: (x,))
    prof = run_session(compiled, step, tmp_path)
    trace = load(prof.trace_paths[0])
    got = collections.Counter(scope_key(e) for e in scopes(trace))
    assert got[("TwiceModel", "")] == 2  # root scope around the compiled call, per step
    rows = {r["name"]: r for r in table_of(trace)["modules"]}
    assert list(rows) == ["", "shared", "act", "head"]  # names of _orig_mod, no prefix
    assert rows[""]["inputs"] == [{"shape": [2, 8], "dtype": "float32"}]
    assert all_hooks_removed(compiled) and all_hooks_removed(model)
    compiled(x)  # still runs after the session


def test_record_function_fallback_scopes_nest(tmp_path, monkeypatch):
    """Without _RecordFunctionFast the record_function operators give the same scopes."""
    from traceprof.capture import scopes as scopes_module

    monkeypatch.setattr(
        scopes_module, "_record_factory", lambda: ("record_function", scopes_module._OpsRecord)
    )
    model = TwiceModel()
    prof = run_session(model, lambda: model(torch.randn(2, 8)), tmp_path, active=1, steps=3)
    assert prof.scope_kind == "record_function"
    events = scopes(load(prof.trace_paths[0]))
    assert {e["cat"] for e in events} == {"user_annotation"}
    assert [scope_key(e)[1] for e in events] == ["", "shared", "act", "shared", "act", "head"]
    root = events[0]
    assert all(root["ts"] <= e["ts"] and e["ts"] + e["dur"] <= root["ts"] + root["dur"] for e in events[1:])


def test_capture_doc_examples_run_and_analyze(tmp_path, monkeypatch):
    """The Python examples of docs/capture.md run as written, and their traces analyze."""
    import traceprof

    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "capture.md")
    with open(doc, encoding="utf-8") as f:
        # the examples of the capture helper itself (the integrations' run in their own tests)
        text = f.read().split("\n## Hugging Face Trainer and PyTorch Lightning")[0]
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    namespaces = []
    for i, block in enumerate(blocks):
        namespace: dict = {}
        exec(compile(block, f"{doc}:block{i}", "exec"), namespace)
        namespaces.append(namespace)
    (loop_trace,) = namespaces[0]["prof"].trace_paths
    assert namespaces[1]["path"] == "lenet5.pt.trace.json.gz"
    for path in (loop_trace, "lenet5.pt.trace.json.gz"):
        profile = traceprof.analyze(path)
        profile.self_check()
        assert profile.source == "traceprof"
    loop = traceprof.analyze(loop_trace)
    assert loop.selection.count == 2
    conv = loop.find("layer1.0.conv1")
    assert conv.forward.total.cpu_us > 0 and conv.backward.total.cpu_us > 0


def test_resnet18_cpu_sample_attributes_every_conv_forward_and_backward():
    """The committed CPU training sample: every Conv2d has forward and backward time, and less
    than 5% of the backward CPU time is left outside modules."""
    import traceprof

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    profile = traceprof.analyze(os.path.join(root, "sample_traces", "resnet18_train_cpu.pt.trace.json.gz"))
    profile.self_check()
    convs = [n for n in profile.nodes if n.class_name == "Conv2d"]
    assert len(convs) == 20  # 17 3x3 convolutions and 3 downsample projections
    assert all(n.forward.total.cpu_us > 0 and n.backward.total.cpu_us > 0 for n in convs)
    assert convs[0].qualified_name == "conv1" and convs[0].info.params_total == 9408
    backward_in_modules = sum(
        profile.nodes[r].backward.total.cpu_us
        for r in profile.roots
        if profile.nodes[r].kind.value == "module"
    )
    backward_outside = profile.unattributed.backward.total.cpu_us
    share_outside = backward_outside / (backward_in_modules + backward_outside)
    assert 0 < share_outside < 0.05, share_outside
