#!/usr/bin/env python
"""Capture the sample traces in sample_traces/ with traceprof.capture.

For each sample model (LeNet-5, ResNet-18, a GPT-like decoder, a BERT-like encoder, and
``hf_gpt2``: Hugging Face transformers' ``GPT2LMHeadModel`` built from a config) it records
a training run (forward, loss, backward, optimizer step; schedule wait=1, warmup=1, active=2)
and an inference run (``torch.no_grad()``, same schedule), and writes
``<model>_<train|infer>_<device>.pt.trace.json.gz`` where ``<device>`` is ``cpu`` or a short GPU
name (``h100``, ``a100``, ``mi300x``...).

    python scripts/capture_samples.py                 # all models, CUDA when available
    python scripts/capture_samples.py --device cpu --models gpt bert
    python scripts/capture_samples.py --threads 1     # how the committed CPU samples were made
    python scripts/capture_samples.py --device cpu --models gpt --modes train --compiled --threads 1
    python scripts/capture_samples.py --device cpu --models hf_gpt2 --modes train --threads 1 [--compiled]
    python scripts/capture_samples.py --device cpu --models gpt --modes train --memory --threads 1

``--compiled`` captures the models compiled with ``torch.compile(model)`` instead, as
``<model>_<train|infer>_compiled_<device>.pt.trace.json.gz``: the session records the graphs
Inductor compiles in the first (wait) step and embeds the compiled-kernel table
(``docs/capture.md``). On CPU it needs a C++ compiler; a first compile takes tens of seconds.

With torch's default of one intra-op thread per core, a busy machine stretches single ops
by orders of magnitude (threads waiting for a descheduled peer); one thread keeps CPU samples
sane on a shared machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import traceprof.capture as capture
from traceprof.capture import sample_models as sm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def device_tag(device: torch.device) -> str:
    """``cpu``, or the GPU's model in lower case (``NVIDIA H100 80GB HBM3`` -> ``h100``)."""
    if device.type != "cuda":
        return device.type
    name = torch.cuda.get_device_name(device)
    upper = name.upper()
    match = re.search(r"\b((?:MI|[A-Z])\d{1,4}[A-Z]?)\b", upper) or re.search(r"\b(RTX) ?(\d{4})", upper)
    return "".join(g for g in match.groups() if g).lower() if match else "cuda"


def sample(
    name: str, device: torch.device
) -> tuple[torch.nn.Module, Callable[[], tuple], Callable[[Any, tuple], torch.Tensor]]:
    """``(model, make_inputs, loss(output, inputs))`` for one sample model."""
    gen = torch.Generator().manual_seed(0)

    def on(t: torch.Tensor) -> torch.Tensor:
        return t.to(device)

    if name == "lenet5":
        model = sm.LeNet5()
        x, y = on(torch.randn(16, 1, 32, 32, generator=gen)), on(torch.randint(0, 10, (16,), generator=gen))
        return model, lambda: (x,), lambda out, _: F.cross_entropy(out, y)
    if name == "resnet18":
        model = sm.ResNet18(num_classes=1000)
        x, y = on(torch.randn(2, 3, 64, 64, generator=gen)), on(torch.randint(0, 1000, (2,), generator=gen))
        return model, lambda: (x,), lambda out, _: F.cross_entropy(out, y)
    if name == "gpt":
        config = sm.GPTConfig()  # 4 layers, d_model 256, 4 heads, vocab 8192
        model = sm.GPT(config)
        idx = on(torch.randint(0, config.vocab_size, (2, 128), generator=gen))
        targets = on(torch.roll(idx, -1, dims=1))
        return (model, lambda: (idx,), lambda out, _: F.cross_entropy(out.flatten(0, 1), targets.flatten()))
    if name == "bert":
        config = sm.BertConfig()  # 4 layers, hidden 256, 4 heads, vocab 8192
        model = sm.BertEncoder(config)
        ids = on(torch.randint(0, config.vocab_size, (2, 128), generator=gen))
        mask = torch.ones(2, 128, dtype=torch.long)
        mask[1, 96:] = 0  # padding in the second sequence
        mask = on(mask)
        labels = on(torch.tensor([0, 1]))
        return (model, lambda: (ids, mask), lambda out, _: F.cross_entropy(out["logits"], labels))
    if name == "hf_gpt2":  # Hugging Face transformers' GPT-2, built from a config (no download)
        from transformers import GPT2Config, GPT2LMHeadModel

        hf_config = GPT2Config(
            n_layer=2, n_embd=256, n_head=4, vocab_size=8192, n_positions=256, bos_token_id=0, eos_token_id=0
        )
        model = GPT2LMHeadModel(hf_config)
        ids = on(torch.randint(0, hf_config.vocab_size, (4, 128), generator=gen))
        return (model, lambda: (ids,), lambda out, _: out.loss)
    raise ValueError(f"unknown sample model {name!r}")


MODELS = ("lenet5", "resnet18", "gpt", "bert", "hf_gpt2")
#: what a plain run captures (hf_gpt2 needs the transformers extra)
DEFAULT_MODELS = ("lenet5", "resnet18", "gpt", "bert")


def call(model: torch.nn.Module, inputs: tuple) -> Any:
    inner = getattr(model, "_orig_mod", model)
    if isinstance(inner, sm.BertEncoder):
        ids, mask = inputs
        return model(ids, attention_mask=mask)  # a keyword argument in the module table
    if type(inner).__name__ == "GPT2LMHeadModel":
        (ids,) = inputs
        return model(input_ids=ids, labels=ids if model.training else None)
    return model(*inputs)


def capture_one(
    name: str, mode: str, device: torch.device, out_dir: str, compiled: bool = False, memory: bool = False
) -> str:
    torch.manual_seed(0)
    model, make_inputs, loss_of = sample(name, device)
    model.to(device)
    if compiled:
        model = torch.compile(model)  # compiled in the first (wait) step, inside the session
    steps = 4  # wait 1, warmup 1, active 2
    if mode == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            inputs = make_inputs()
            loss = loss_of(call(model, inputs), inputs)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        model.eval()

        def step() -> None:
            with torch.no_grad():
                call(model, make_inputs())

    variant = f"{mode}_compiled" if compiled else mode
    variant += "_memory" if memory else ""
    final = os.path.join(out_dir, f"{name}_{variant}_{device_tag(device)}.pt.trace.json.gz")
    # _trace_file: one file with this exact name instead of <worker>.<ms>.pt.trace.json.gz
    with capture.profile(
        model, wait=1, warmup=1, active=2, profile_memory=memory, _trace_file=os.path.relpath(final)
    ) as prof:
        for _ in range(steps):
            step()
            prof.step()
    if prof.trace_paths != [os.path.relpath(final)]:
        raise RuntimeError(f"expected one trace, got {prof.trace_paths}")
    return final


def summarize(path: str) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    n_scopes = sum(
        1 for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith("[traceprof:")
    )
    table = capture.decode_table(trace["traceprof"])
    line = (
        f"{os.path.relpath(path, ROOT)}: {os.path.getsize(path) / 1e6:.2f} MB, "
        f"{len(trace['traceEvents'])} events, {n_scopes} scopes, "
        f"{len(table['modules'])} modules, {table['modules'][0]['params_total']:,} params"
    )
    if "traceprof_compiled" in trace:
        compiled = capture.decode_table(trace["traceprof_compiled"])
        sites = sum(len(g["calls"]) for g in compiled["graphs"].values())
        line += (
            f", {len(compiled['graphs'])} compiled graphs, {sites} kernel call sites"
            f" ({len(trace['traceprof_compiled']) / 1e3:.0f} kB encoded)"
        )
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "sample_traces"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=MODELS)
    parser.add_argument("--modes", nargs="+", default=["train", "infer"], choices=("train", "infer"))
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)"
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="torch.compile(model) (files named <model>_<mode>_compiled_...)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="record memory too, profile_memory=True (files named <model>_<mode>[_compiled]_memory_...)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        for mode in args.modes:
            print(
                summarize(capture_one(name, mode, device, args.out, args.compiled, args.memory)), flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
