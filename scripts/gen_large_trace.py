#!/usr/bin/env python3
"""Generate a large, realistic synthetic Kineto trace of GPT training, for benchmarks and tests.

The command line of :mod:`traceprof.testing`, where the generator lives (the tests import it from
there); see its docstring for what the trace holds and its ``<out>.expect.json`` sidecar.

Usage::

    python scripts/gen_large_trace.py --out /tmp/big.json              # >= 520 MB (default)
    python scripts/gen_large_trace.py --out /tmp/small.json.gz --target-mb 20 --validate
    python scripts/gen_large_trace.py --out t.json --steps 3 --layers 4 --seed 1
    python scripts/gen_large_trace.py --out /tmp/gptjob --ranks 8 --slow-rank 5 --steps 2 --layers 2

Options: ``--help``.
"""

from __future__ import annotations

import os
import sys

# the checkout's package, also when traceprof is not installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from traceprof.testing import main

if __name__ == "__main__":
    sys.exit(main())
