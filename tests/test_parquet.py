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


def test_parquet_is_written_without_pandas(tmp_path):
    """Every Parquet output (a profile, its ops, a job, a diff) is written by pyarrow from the
    rows: pandas, whose import took longer than a cached look, is not imported (and the files
    still read back as to_dataframe's frames, above and in test_job, test_diff)."""
    job = sorted((SHARED_TRACES / "multi_rank_t4").glob("*.json.gz"))[:2]
    code = (
        "import sys; from traceprof.cli import main\n"
        "def run(*argv):\n"
        "    try:\n        main(list(argv))\n    except SystemExit as e:\n        assert not e.code, argv\n"
        f"run('analyze', {str(BERT)!r}, '-o', {str(tmp_path / 'p.parquet')!r})\n"
        f"run('analyze', {str(BERT)!r}, '--ops', '', '-f', 'parquet', '-o', {str(tmp_path / 'o.parquet')!r})\n"
        f"run('analyze', *{[str(p) for p in job]!r}, '-o', {str(tmp_path / 'j.parquet')!r})\n"
        f"run('diff', {str(BERT)!r}, {str(BERT)!r}, '-o', {str(tmp_path / 'd.parquet')!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "[]"  # before: pandas and 300 of its modules
    for name in ("p", "o", "j", "d"):
        assert pq.read_metadata(tmp_path / f"{name}.parquet").num_rows > 0, name


def test_rows_read_back_as_pandas_types_the_same_rows(tmp_path):
    """The one writer of every Parquet output, on each kind of value: the file reads back as
    pandas' frame of the same rows (missing values as nulls, the types given or the values')."""
    import io

    from traceprof.result.parquet import rows_parquet

    rows = [
        {"s": "a", "f": 1.5, "i": 3, "mixed": 1, "typed": 2, "b": True, "none": None, "opt": 1.0},
        {
            "s": "é\udcff",
            "f": float("nan"),
            "i": -(2**40),
            "mixed": 2.5,
            "typed": None,
            "b": False,
            "none": None,
            "opt": None,
        },
        {"s": None, "f": float("inf"), "i": 0, "mixed": 0, "typed": 1, "b": None, "none": None, "opt": 2.0},
    ]
    columns = list(rows[0])
    data = rows_parquet(rows, columns, {"typed": "float64"}, {"trace": "t.json", "raw": b"\xff"})
    table = pq.read_table(io.BytesIO(data))
    assert table.column_names == columns
    assert [str(t) for t in table.schema.types] == [
        "large_string",
        "double",
        "int64",
        "double",
        "double",
        "bool",
        "null",
        "double",
    ]
    assert table.schema.metadata == {b"traceprof.trace": b"t.json", b"traceprof.raw": b"\xff"}
    assert [table[c].null_count for c in columns] == [1, 1, 0, 0, 1, 1, 3, 1]
    got = table.to_pandas()
    assert got["s"].tolist()[:2] == ["a", "é?"]  # a name that is no text: replaced, not an error
    want = pd.DataFrame([{k: v for k, v in r.items() if k != "s"} for r in rows]).astype({"typed": "float64"})
    for c in ("f", "i", "mixed", "typed", "opt"):
        pd.testing.assert_series_equal(got[c], want[c], check_names=True)
    assert pq.read_table(io.BytesIO(rows_parquet([], ["x"], {}, {}))).num_rows == 0
