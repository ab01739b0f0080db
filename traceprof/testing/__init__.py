"""Generate a large, realistic synthetic Kineto trace of GPT training, for benchmarks and tests.

The trace imitates what ``torch.profiler`` (2024+, CUDA, ``record_shapes=True``,
``profile_memory=True``) writes for a nanoGPT-style model captured with ``traceprof.capture``:

* ``ProfilerStep#N`` user annotations on the main thread, one per training step;
* per ``nn.Module`` call a scope ``[traceprof:1]<Class>: <qualified.name>`` (cat
  ``user_annotation``; the root is ``[traceprof:1]GPT: ``), nested like the module calls;
* aten ``cpu_op`` trees inside the scopes (``aten::linear`` > ``aten::t`` + ``aten::view`` +
  ``aten::addmm`` + ``aten::view``, ...) with "Input Dims"/"Input type"/"Input Strides"/
  "Concrete Inputs"; ops that create an autograd node carry "Sequence number" (increasing) and
  "Fwd thread id": 0 (composite ops carry the number of their first node, as PyTorch does);
* ``cudaLaunchKernel``/``cudaLaunchKernelExC``/``cudaMemcpyAsync``/``cudaMemsetAsync``
  ``cuda_runtime`` events inside the ops (the op's "External id", a unique "correlation"), the
  matching ``kernel``/``gpu_memcpy``/``gpu_memset`` events on GPU 0 (pid 0, tid = stream: 7
  compute, 20 NCCL all-reduce, 24 input copies), serialized per stream and starting after their
  launch, and ``ac2g`` flow pairs;
* the backward pass on a second CPU thread: ``autograd::engine::evaluate_function: XBackward0``
  > ``XBackward0`` (the forward op's "Sequence number", "Fwd thread id": 1) > aten ops that launch
  kernels, ``AccumulateGrad`` nodes, DDP-style ``nccl:all_reduce`` buckets, ``fwdbwd`` flows;
* ``Optimizer.step#AdamW.step`` with ``aten::_foreach_*`` ops, ``Optimizer.zero_grad``, a
  ``loss.item()`` device-to-host copy and stream synchronize closing every step;
* ``[memory]`` instant events, process/thread ``M`` metadata, the profiler span events.

Timestamps are float microseconds with 3 decimals relative to ``baseTimeNanoseconds``; slices
nest properly on every thread and stream. The file is written step by step (never the whole
event list in memory), one compact JSON event per line, in Kineto's key order (``traceEvents``
followed by ``traceName``, ``displayTimeUnit``, ``baseTimeNanoseconds``).

A sidecar ``<out>.expect.json`` holds the counts (kernel events, module scopes per step, steps,
...) and, per module, the GPU ``kernel`` time attributed to it (forward: kernels launched while
the module is the innermost scope; backward: kernels launched by backward nodes whose
"Sequence number" belongs to a forward op in that innermost scope).

It lives in the package (not only in ``scripts/``) because the tests import it: they generate
small traces and jobs with :func:`generate` and :func:`generate_job` and check the analysis
against the expectations. It imports nothing of traceprof's analysis, so that the traces are an
independent account of what the analysis should find; only the standard library and orjson are
used, never torch.

Modules, from the bottom: ``program`` (trace ids and the program's node types), ``kernels``
(kernel names and the H100 throughput model), ``gpt`` (the model: op builders and the step's
program), ``emitter`` (replays the program into events), ``assembly`` (the trace file, its
expectations, a job's ranks), ``checks`` (reading a trace back), ``cli`` (the command line).

Usage::

    python scripts/gen_large_trace.py --out /tmp/big.json              # >= 520 MB (default)
    python scripts/gen_large_trace.py --out /tmp/small.json.gz --target-mb 20 --validate
    python scripts/gen_large_trace.py --out t.json --steps 3 --layers 4 --seed 1
    python scripts/gen_large_trace.py --out /tmp/gptjob --ranks 8 --slow-rank 5 --steps 2 --layers 2

Options: --out PATH (.json or .json.gz), --target-mb N (uncompressed size to reach; steps are
added until it is reached), --steps N (fixed step count instead), --layers N (transformer blocks,
default 24), --seed N, --validate (re-read the file and check its invariants); for a job:
--ranks N (--out is then a directory), --slow-rank R, --slow-module NAME, --slow-factor F, --gz.
"""

from traceprof.testing.assembly import generate, generate_job
from traceprof.testing.checks import validate
from traceprof.testing.cli import main

__all__ = ["generate", "generate_job", "main", "validate"]
