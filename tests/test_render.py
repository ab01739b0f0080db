"""Golden outputs of every renderer on a captured sample trace and a real shared trace.

Run ``pytest tests/test_render.py --update-golden`` to rewrite them after an intended change,
then review the diff.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

import traceprof
from traceprof.render import REGISTRY, render
from traceprof.render.table import DEFAULT_WIDTH

from .conftest import REPO, SAMPLE_TRACES, SHARED_TRACES

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "bert_small": (SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz", {}),
    "mi300_depth2": (
        SHARED_TRACES / "module_tree/mi300_resnet_activation_checkpoint_training.json.gz",
        {"depth": 2},
    ),
    "resnet18_cpu": (SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz", {"depth": 2}),
}
EXT = {"tree": "txt", "table": "table.txt", "json": "json", "csv": "csv"}


def _stable(text: str) -> str:
    """Paths differ between checkouts: make them relative to the checkout and its parent."""
    return text.replace(str(REPO) + "/", "").replace(str(REPO.parent) + "/", "")


@pytest.mark.parametrize("fmt", sorted(EXT))
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case, fmt, update_golden, monkeypatch):
    # the table fits the width a file or a pipe gets, whatever terminal runs the tests
    monkeypatch.setenv("COLUMNS", str(DEFAULT_WIDTH))
    path, options = CASES[case]
    profile = traceprof.analyze(path, **options)
    out = _stable(render(profile, fmt))
    golden = GOLDEN / f"{case}.{EXT[fmt]}"
    if update_golden or not golden.exists():
        golden.write_text(out)
        if not update_golden:
            pytest.fail(f"{golden.name} was missing and has been written; rerun")
    assert out == golden.read_text(), f"{golden.name} differs (rerun with --update-golden to accept)"


def test_every_registered_renderer_has_golden_coverage():
    # html embeds the json document (compared in tests/test_html_report.py) in the frontend
    # parquet holds the csv rows, typed (tests/test_parquet.py)
    assert set(REGISTRY) == set(EXT) | {"html", "parquet"}


def test_json_and_csv_carry_the_same_numbers():
    profile = traceprof.analyze(CASES["bert_small"][0])
    doc = json.loads(render(profile, "json"))
    assert doc["schema"] == "traceprof.profile/3"
    rows = list(csv.DictReader(io.StringIO(render(profile, "csv"))))
    assert len(rows) == len(doc["nodes"]) == len(profile.nodes)
    for row, node in zip(rows, doc["nodes"]):
        assert row["qualified_name"] == node["qualified_name"]
        # CSV times are written to the nanosecond (docs/output-formats.md)
        assert float(row["forward_total_gpu_busy_us"]) == pytest.approx(
            node["forward_total_gpu_busy_us"], abs=5e-4
        )
    df = profile.to_dataframe()
    assert len(df) == len(rows)
    assert df["forward_total_gpu_busy_us"].dtype == "float64"
    root = df.iloc[0]
    assert root["class_name"] == "BertLMHeadModel"
