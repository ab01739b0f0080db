"""Short names in the terminal views, on a tree of annotations whose names hold dots (the DLRM
job: ``("## forward ##", "DistributedDataParallel.forward")``): a short name is a tail of whole
path parts (traceprof.result.names), and a tree line shows the node's own part."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from traceprof.cli import main

from .conftest import SHARED_TRACES

DLRM = SHARED_TRACES / "multi_rank"
RANK0 = DLRM / "dlrm_v100_8ranks_worker0_step_12.1694128201545.pt.trace.json.gz"
OPTIMIZER_STEP = "## optimizer ##.Optimizer.step#Adagrad.step"

pytestmark = pytest.mark.skipif(not DLRM.is_dir(), reason="the shared DLRM traces are not here")


def _ok(*args) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


def test_straggler_lines_name_modules_by_whole_parts():
    out = _ok("analyze", DLRM, "-j", "1")
    lines = [x for x in out.splitlines() if "modules against" in x]
    assert lines
    text = "\n".join(lines)
    # no tail cut inside "DistributedDataParallel.forward" or "Optimizer.step#Adagrad.step"
    assert not re.search(r"(^|[ :]) ?forward\.DistributedDataParallel", text), text
    assert not re.search(r"[:,] step \+", text), text
    assert "Optimizer.step#Adagrad.step +" in text
    assert "## forward ##.DistributedDataParallel.forward +" in text


def test_ops_heading_names_the_module_by_whole_parts():
    first = _ok("analyze", RANK0, "--ops", OPTIMIZER_STEP).splitlines()[0]
    assert first.startswith("ops and kernels of Optimizer.step#Adagrad.step "), first


def test_diff_tree_lines_show_each_nodes_own_part():
    out = _ok("diff", DLRM, DLRM, "--depth", "2")
    tree = out.split("\n\n", 1)[1].splitlines()
    labels = [line.split(": ", 1)[0] for line in tree]  # a tree line: "{indent}{label}: {change}"
    assert "  DistributedDataParallel.forward" in labels
    assert "    DistributedDataParallel.forward" in labels
    assert "  Optimizer.step#Adagrad.step" in labels
    assert "  enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in labels
    assert "  Optimizer.zero_grad#Adagrad.zero_grad" in labels
    assert not {"  forward", "    forward", "  step", "  zero_grad", "  __next__"} & set(labels)
