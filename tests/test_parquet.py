"""Parquet export: the typed rows of to_dataframe, through the CLI and the API."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pyarrow.parquet as pq

import traceprof

from .conftest import SAMPLE_TRACES, SHARED_TRACES

BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "traceprof", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_cli_writes_parquet_equal_to_the_dataframe(tmp_path):
    out = tmp_path / "bert.parquet"
    proc = cli("analyze", BERT, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    got = pd.read_parquet(out)
    want = traceprof.analyze(BERT).to_dataframe()
    pd.testing.assert_frame_equal(got, want)
    assert got["forward_total_gpu_busy_us"].dtype == "float64"
    assert got["forward_allocated_bytes"].notna().any()  # the bert trace has [memory] events
    meta = pq.read_schema(out).metadata
    assert meta[b"traceprof.schema"] == b"traceprof.profile/3"
    assert meta[b"traceprof.trace"].decode().endswith("h100_bert_small_inference.json.gz")


def test_api_to_parquet_on_a_captured_sample(tmp_path):
    profile = traceprof.analyze(SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz")
    out = tmp_path / "r.parquet"
    profile.to_parquet(str(out))
    df = pd.read_parquet(out)
    assert len(df) == len(list(profile.walk()))
    conv1 = df[df["qualified_name"] == "conv1"].iloc[0]
    assert conv1["class_name"] == "Conv2d" and conv1["params_total"] == 9408
    assert conv1["backward_total_cpu_us"] > 0


def test_parquet_needs_an_explicit_output():
    proc = cli("analyze", BERT, "--format", "parquet")
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        "traceprof: error: --format parquet is binary: give an output file with -o FILE, "
        "or -o - for standard output"
    )


def test_without_pyarrow_one_line_error(tmp_path):
    code = (
        "import sys; sys.modules['pyarrow'] = None; from traceprof.cli import main; "
        f"main(['analyze', {str(BERT)!r}, '-o', {str(tmp_path / 'x.parquet')!r}])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 6
    assert proc.stderr.strip() == (
        "traceprof: error: Parquet output needs pyarrow: pip install 'traceprof[parquet]'"
    )
    assert not (tmp_path / "x.parquet").exists()
