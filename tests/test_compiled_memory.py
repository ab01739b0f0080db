"""Memory of a compiled model: the buffers Inductor's wrapper allocates between its kernel calls
go with the kernel it calls next, so activations are per module, not all on the compiled root.

The forward graph of ``test_compiled_analysis.training_step`` calls, in order, a kernel of
``a.act`` (50), an extern ``addmm`` of ``a.lin`` (100), the same kernel for ``b`` (250) and a
kernel fused over ``a`` (350); its backward begins at 1000.
"""

from __future__ import annotations

from pathlib import Path

from .test_compiled_analysis import BACKWARD, FORWARD, MODULES, training_step, with_tables
from .tracebuilder import TraceBuilder

SAMPLE = Path(__file__).parent.parent / "sample_traces" / "hf_gpt2_train_compiled_memory_cpu.pt.trace.json.gz"


def compiled_step_with_memory() -> TraceBuilder:
    b = with_tables(training_step(TraceBuilder()), [FORWARD, BACKWARD], MODULES)
    total = 0

    def alloc(ts, nbytes, addr, tid=1):
        nonlocal total
        total += nbytes
        b.memory(ts, nbytes, total=total, addr=addr, tid=tid)

    alloc(45, 1000, 0x1)  # the wrapper, before a.act's kernel: a.act's
    alloc(60, 30, 0x7)  # inside a.act's kernel: a.act's, as in an eager op
    alloc(95, 2000, 0x2)  # before the addmm: a.lin's
    alloc(300, 4000, 0x3)  # between b's kernel and the fused one: a's
    alloc(500, 8000, 0x4)  # after the last kernel call: stays on the wrapper (the root)
    alloc(1100, -2000, 0x2, tid=2)  # freed in the backward: still an activation
    return b


def test_wrapper_buffers_go_with_the_next_kernel_call(analyze_built):
    p = analyze_built(compiled_step_with_memory())

    def own(name):
        memory = p.memory_of(p.find(name))
        return None if memory is None else memory.own_activation_bytes

    assert own("a.act") == 1030
    assert own("a.lin") == 2000
    assert own("a") == 4000
    assert own("b") is None  # nothing allocated before b's kernel: no memory events
    assert own("") == 8000
    assert p.memory_of(p.find("")).activation_bytes == 1030 + 2000 + 4000 + 8000
    assert p.memory_summary.activation_bytes == 15030


def test_without_the_table_the_buffers_stay_on_the_compiled_region(analyze_built):
    b = compiled_step_with_memory()
    del b.top["traceprof_compiled"]
    p = analyze_built(b)
    assert p.memory_summary.activation_bytes == 15030
    held = {n.qualified_name: p.memory_of(n) for n in p.walk()}
    assert held[""].activation_bytes == 15030  # in the compiled region's work, under the root
    assert all(held.get(name) is None for name in ("a.act", "a.lin", "a", "b"))


def test_hugging_face_gpt2_compiled_keeps_its_activations_per_module():
    """A real compiled capture with memory (scripts/capture_samples.py --models hf_gpt2
    --compiled --memory): the forward's activations are on the modules whose kernels made
    them; the compiled root keeps almost none."""
    import traceprof

    p = traceprof.analyze(str(SAMPLE))
    p.self_check()
    total = p.memory_summary.activation_bytes
    own = {
        n.qualified_name: p.memory_of(n).own_activation_bytes for n in p.walk() if p.memory_of(n) is not None
    }
    assert total > 30e6
    assert (own[""] or 0) < 0.01 * total
    assert max(own, key=lambda name: own[name] or 0) == "lm_head"  # the logits' log-softmax
    assert own["transformer.h.0.attn"] > 0 and own["transformer.h.1.attn"] > 0
    assert sum(v or 0 for v in own.values()) == total
