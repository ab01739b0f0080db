#!/usr/bin/env python
"""Capture the pair of traces that the diff tests and docs use (sample_traces/gpt_diff_*.gz).

Two training runs of the sample GPT (4 layers, d_model 256) on the CPU, identical but for one
known change: in the new run the MLP of block 2 (``transformer.h.2.mlp``) is 4x wider (hidden
size 4096 instead of 1024; its input and output sizes stay 256, so no other module changes).
``traceprof diff`` must put ``transformer.h.2.mlp`` first.

    python scripts/capture_diff_samples.py --threads 1     # how the committed pair was made

Schedule wait=1, warmup=1, active=3: three steps per trace, for the step-to-step spread.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import traceprof.capture as capture
from traceprof.capture import sample_models as sm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDENED = "transformer.h.2.mlp"
BASE_NAME = "gpt_diff_base_cpu.pt.trace.json.gz"
NEW_NAME = "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"


def capture_run(widen: bool, path: str) -> None:
    torch.manual_seed(0)
    config = sm.GPTConfig()
    model = sm.GPT(config)
    if widen:
        mlp = model.transformer.h[2].mlp
        mlp.c_fc = torch.nn.Linear(config.d_model, 16 * config.d_model, bias=config.bias)
        mlp.c_proj = torch.nn.Linear(16 * config.d_model, config.d_model, bias=config.bias)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, config.vocab_size, (2, 128), generator=gen)
    targets = torch.roll(idx, -1, dims=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    with capture.profile(model, wait=1, warmup=1, active=3, _trace_file=os.path.relpath(path)) as prof:
        for _ in range(5):
            loss = F.cross_entropy(model(idx).flatten(0, 1), targets.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "sample_traces"))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    for widen, name in ((False, BASE_NAME), (True, NEW_NAME)):
        path = os.path.join(args.out, name)
        capture_run(widen, path)
        print(f"{os.path.relpath(path, ROOT)}: {os.path.getsize(path) / 1e6:.2f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
