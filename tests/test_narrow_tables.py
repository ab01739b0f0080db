"""Narrow tables: the Trace stores each integer column in the narrowest type that holds it and
the links index events with int32 below 2**31 events, to keep memory per event small. The
profile is the same whatever the widths: a trace whose ids need int64 keeps int64 and gives the
profile of the same trace with small ids, and widened tables give the profile of narrow ones."""

from __future__ import annotations

import gzip
import json

import msgspec
import numpy as np
import pytest

from traceprof.analysis import attribution, hierarchy, link, module_ops
from traceprof.read.build import load_trace
from traceprof.trace.columns import PythonFrames, Trace, index_dtype, narrowed, release_freed_memory

from .conftest import SAMPLE_TRACES, SHARED_TRACES
from .tracebuilder import TraceBuilder

#: a GPU training trace (launches, backward ops with sequence numbers, fwdbwd flows)
GPU_TRAINING = SHARED_TRACES / "small" / "mi250_minitoy_training.json.gz"
#: a CPU training trace with [memory] events
CPU_TRAINING = SAMPLE_TRACES / "gpt_train_cpu.pt.trace.json.gz"
#: a trace with python_function module events and activation checkpointing
PYTHON_FRAMES = SHARED_TRACES / "module_tree" / "mi300_resnet_activation_checkpoint_training.json.gz"

#: args holding ids that a trace could number past int32
ID_ARGS = ("correlation", "External id", "external id", "Sequence number", "Python id")


def assert_same_profile(a, b) -> None:
    """Equal profiles, but for the trace's path and size."""
    for f in a.__struct_fields__:
        if f == "metadata":
            continue
        x, y = getattr(a, f), getattr(b, f)
        if f == "timeline":
            assert (x is None) == (y is None)
            if x is not None:
                assert x.document() == y.document()
        else:
            assert x == y, f


def analyzed(trace: Trace):
    profile = attribution.analyze(trace)
    profile.self_check()
    return profile


def shifted_ids(path, tmp_path, shift: int):
    """The trace of ``path`` with ``shift`` added to every id (args and flow ids)."""
    doc = json.loads(gzip.open(path).read())
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        for key in ID_ARGS:
            if isinstance(args.get(key), int) and args[key] >= 0:
                args[key] += shift
        if isinstance(e.get("id"), int):
            e["id"] += shift
    out = tmp_path / f"shifted_{path.name.removesuffix('.gz')}"
    out.write_text(json.dumps(doc))
    return out


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([], np.int8),
        ([-1, 0, 127], np.int8),
        ([-1, 128], np.int16),
        ([-1, 40_000], np.int32),
        ([-(2**31), 2**31 - 1], np.int32),
        ([-1, 2**31], np.int64),
        ([-(2**31) - 1], np.int64),
    ],
)
def test_narrowed_is_the_narrowest_type_that_holds_every_value(values, dtype):
    column = narrowed(np.array(values, np.int64))
    assert column.dtype == dtype
    assert column.tolist() == values


def test_event_indices_are_int32_below_2_31_events():
    assert index_dtype(0) == np.int32
    assert index_dtype(2**31 - 2) == np.int32
    assert index_dtype(2**31) == np.int64


def test_release_freed_memory_is_harmless():
    release_freed_memory()  # glibc's malloc_trim, or nothing elsewhere
    release_freed_memory()


# -- ids past int32 ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [GPU_TRAINING, CPU_TRAINING], ids=lambda p: p.name)
def test_ids_past_int32_keep_int64_and_give_the_same_profile(path, tmp_path):
    small = load_trace(path)
    # past 2**40 too: the forward-op lookup once shifted sequence numbers by 40 bits
    big = load_trace(shifted_ids(path, tmp_path, 2**41))
    for column in ("correlation", "external_id", "sequence_number"):
        if (getattr(small.events, column) >= 0).any():
            assert getattr(big.events, column).dtype == np.int64, column
            assert getattr(small.events, column).dtype != np.int64, column
    assert_same_profile(analyzed(small), analyzed(big))


def test_widened_tables_give_the_profile_of_narrow_ones():
    trace = load_trace(GPU_TRAINING)

    def widened(table):
        return msgspec.structs.replace(
            table,
            **{
                name: getattr(table, name).astype(np.int64)
                for name in table.__struct_fields__
                if isinstance(getattr(table, name), np.ndarray) and getattr(table, name).dtype.kind == "i"
            },
        )

    wide = msgspec.structs.replace(
        trace,
        events=widened(trace.events),
        python=widened(trace.python),
        memory=widened(trace.memory) if trace.memory else None,
    )
    assert wide.events.correlation.dtype == np.int64
    assert_same_profile(analyzed(trace), analyzed(wide))


@pytest.mark.parametrize("path", [GPU_TRAINING, CPU_TRAINING, PYTHON_FRAMES], ids=lambda p: p.name)
def test_int64_event_indices_give_the_profile_of_int32_ones(path, monkeypatch):
    """The links of a trace of 2**31 events or more index with int64: the same results."""
    trace = load_trace(path)
    narrow = analyzed(trace)
    assert link.link(trace).parent.dtype == np.int32
    for module in (link, hierarchy):
        monkeypatch.setattr(module, "index_dtype", lambda n: np.int64)
    assert link.link(trace).parent.dtype == np.int64
    assert_same_profile(narrow, analyzed(trace))


# -- Python frames --------------------------------------------------------------------------------


def test_python_ids_are_rows_of_the_python_events(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    outer = b.py_module("Net", 0, 10, 80)
    b.op("aten::add", 20, 5)
    inner = b.py_module("Linear", 0, 30, 20)
    inner["args"]["Python parent id"] = outer["args"]["Python id"]
    trace = load_trace(b.write(tmp_path / "t.json"))
    assert isinstance(trace.python, PythonFrames) and len(trace.python) == 2
    ids = trace.python_ids
    parents = trace.python_parent_ids
    assert len(ids) == len(parents) == len(trace.events)
    frames = trace.python.event
    assert sorted(ids[frames].tolist()) == sorted([outer["args"]["Python id"], inner["args"]["Python id"]])
    assert (np.delete(ids, frames) == -1).all() and (np.delete(parents, frames) == -1).all()
    assert sorted(parents[frames].tolist()) == [-1, outer["args"]["Python id"]]


# -- module_ops keys --------------------------------------------------------------------------------


def test_keys_too_wide_for_one_int64_group_like_narrow_ones():
    rng = np.random.default_rng(0)
    n = 5_000
    node = rng.integers(0, 50, n).astype(np.int32)
    phase = rng.integers(0, 3, n).astype(np.int8)
    label = rng.integers(0, 40, n).astype(np.int32)
    shapes = rng.integers(-1, 30, n).astype(np.int32)
    weight = rng.random(n)
    counted = rng.random(n) < 0.3

    def rows(radix):
        keys = module_ops._Keys(radix, [n // 2, n - n // 2])
        for at, part in ((0, slice(0, n // 2)), (n // 2, slice(n // 2, n))):
            keys.write(at, node[part], phase[part], label[part], shapes[part])
        return module_ops._grouped(
            keys, [{"cpu_us": weight[: n // 2], "calls": counted[: n // 2]}, {"flops": weight[n // 2 :]}]
        )

    narrow = module_ops._Radix(50, 3, 40, 31)
    wide = module_ops._Radix(2**40, 3, 2**31, 2**31)
    assert narrow.fits_int64 and not wide.fits_int64
    (keys_narrow, sums_narrow), (keys_wide, sums_wide) = rows(narrow), rows(wide)
    assert len(keys_narrow) > 100
    assert np.array_equal(keys_narrow, keys_wide) and np.array_equal(sums_narrow, sums_wide)
