"""One rank of a tiny DDP training job on CPU (gloo), captured by ``traceprof.capture.profile``.

Launched by ``tests/test_torchrun.py``::

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/torchrun_worker.py LOGDIR

Every rank trains the same small MLP under ``DistributedDataParallel`` and writes its trace into
``LOGDIR``. On the rank given by ``--slow-rank`` the module ``block`` also multiplies a matrix by
itself ``--extra-matmuls`` times per forward: real extra compute in one module, so that this rank
is the straggler and ``block`` the module that explains it.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import traceprof.capture

DIM = 64
BATCH = 32
SLOW_MODULE = "module.block"  # its qualified name under DDP (the wrapper's ``module.``)


class SlowBlock(nn.Module):
    """A linear layer that, when ``extra_matmuls`` > 0, also does that many square matmuls."""

    def __init__(self, dim: int, extra_matmuls: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim)
        self.extra_matmuls = extra_matmuls
        self.scratch = torch.randn(256, 256) / 16  # not a buffer: DDP broadcasts no buffers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.scratch
        for _ in range(self.extra_matmuls):
            y = torch.mm(y, self.scratch)
        return torch.relu(self.linear(x)) + 0 * y.mean()


class Net(nn.Module):
    def __init__(self, extra_matmuls: int) -> None:
        super().__init__()
        self.embed = nn.Linear(DIM, DIM)
        self.block = SlowBlock(DIM, extra_matmuls)
        self.head = nn.Linear(DIM, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(torch.relu(self.embed(x))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir")
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--extra-matmuls", type=int, default=40)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = Net(args.extra_matmuls if rank == args.slow_rank else 0)
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, target = torch.randn(BATCH, DIM), torch.randn(BATCH, 4)
    with traceprof.capture.profile(model, logdir=args.logdir, wait=1, warmup=1, active=2) as prof:
        for _ in range(args.steps):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), target).backward()
            optimizer.step()
            prof.step()
    # both ranks done (traces written) before either tears its connections down: a rank that
    # destroys the group while the other still uses it can abort the other's gloo threads
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
