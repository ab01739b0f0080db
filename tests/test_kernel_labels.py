"""Kernel labels that PyTorch's own tools write into traces (docs/trace-conventions.md "Kernel
labels"), read into a columnar side table: tiny traces built to the formats read at their
sources (``torch.cuda._annotate_cuda_graph_trace.annotate_trace``, torch's CUPTI monitor,
``torch._inductor.profiler``)."""

from __future__ import annotations

import json

import numpy as np

from traceprof.read.build import check_trace, load_trace

from .tracebuilder import TraceBuilder

# -- reading ---------------------------------------------------------------------------------------


def test_labels_are_read_into_a_side_table_the_same_whole_or_run_by_run(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100000)
    for i in range(200):
        b.op("aten::add", 10 + i * 400, 20)
        k = b.launch(15 + i * 400, 40 + i * 400, 5, name=f"k{i % 3}")
        if i % 3 == 0:
            k["args"]["module_fqn"] = f"layers.{i % 4}"
        if i % 5 == 0:
            k["args"]["str"] = "L.layers.0.mlp + L.layers.0.attn"
        if i % 7 == 0:
            k["args"]["stack"] = ['  File "/x/m.py", line 3, in forward\n    y = self.fc(x)\n']
        if i == 4:
            k["args"]["annotation"] = json.dumps([{"module_fqn": "norm"}])
    path = b.write(tmp_path / "t.json")
    whole = load_trace(path, cache=False)
    runs = load_trace(path, cache=False, chunk_bytes=2000, jobs=1)
    for t in (whole, runs):
        check_trace(t)
    assert whole.labels is not None and runs.labels is not None
    labelled = [i for i in range(200) if i % 3 == 0 or i % 5 == 0 or i % 7 == 0 or i == 4]
    assert len(whole.labels) == len(labelled)
    for field in ("event", "module_fqn", "text", "annotation", "stack"):
        assert np.array_equal(getattr(whole.labels, field), getattr(runs.labels, field))
    assert whole.events.texts == runs.events.texts
    texts = whole.events.texts
    first = whole.labels
    assert texts[first.module_fqn[0]] == b'"layers.0"' and first.text[0] >= 0 and first.stack[0] >= 0
    assert whole.events.names[whole.events.name[first.event[0]]] == "k0"
    assert first.annotation[first.annotation >= 0].size == 1


def test_a_trace_without_labels_has_no_side_table(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::add", 10, 20)
    b.launch(15, 40, 5)
    assert load_trace(b.write(tmp_path / "t.json"), cache=False).labels is None


def test_labels_on_cpu_events_are_not_read(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::add", 10, 20, module_fqn="layers.0", str="L.x")
    assert load_trace(b.write(tmp_path / "t.json"), cache=False).labels is None


def test_a_deeply_nested_label_is_cut_not_fatal(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::add", 10, 20)
    k = b.launch(15, 40, 5)
    k["args"]["annotation"] = "@DEEP@"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(b.document()).replace('"@DEEP@"', "[" * 3000 + "]" * 3000))
    trace = load_trace(path, cache=False)  # an "Input Dims" so deep is refused: a label is optional
    assert trace.labels is not None and trace.events.texts[trace.labels.annotation[0]] == b"null"
