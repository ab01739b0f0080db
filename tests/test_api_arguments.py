"""The Python API's numeric arguments follow the command line's rule (issue 33, items 10 and 16):
checked once where they enter, refused with the same one-line OptionError, and made plain
``int`` and ``float`` so that the cache, the workers and the reports see one type."""

from __future__ import annotations

import math

import numpy as np
import pytest

import traceprof
from traceprof.errors import OptionError

from .conftest import SAMPLE_TRACES
from .test_cache import assert_same, cache_dir  # noqa: F401 - the fixture

SAMPLE = SAMPLE_TRACES / "lenet5_train_cpu.pt.trace.json.gz"
BASE, NEW = (SAMPLE_TRACES / f"gpt_diff_{n}_cpu.pt.trace.json.gz" for n in ("base", "wide_mlp"))


def test_numpy_integers_work_with_the_cache_on(cache_dir):  # noqa: F811
    step = traceprof.analyze(SAMPLE, cache=False).selection.numbers[0]
    expected = traceprof.analyze(SAMPLE, step=step, depth=1, top=2, cache=False)
    for value in (np.int64(step), np.int32(step), np.uint8(step)):
        # before: "Encoding objects of type numpy.int64 is unsupported" with the cache on
        got = traceprof.analyze(SAMPLE, step=value, depth=np.int64(1), top=np.int16(2))
        assert_same(expected, got)
    assert traceprof.analyze(SAMPLE, peak_tflops=np.float32(2.0)).flops.peak.flop_per_s == 2e12
    first = traceprof.analyze(BASE).selection.numbers[0]
    diff = traceprof.diff(BASE, NEW, step=np.int64(first), parallel=False)
    assert diff.base.steps == (first,) and type(diff.base.steps[0]) is int


@pytest.mark.parametrize(
    "keyword, value, problem",
    [
        ("peak_tflops", -5, "-5 is not above 0"),  # before: MFU -0.0022
        ("peak_tflops", math.nan, "'nan' is not a finite number"),  # before: MFU nan
        ("peak_tflops", math.inf, "'inf' is not a finite number"),
        ("peak_tflops", 0, "0 is not above 0"),
        ("peak_tflops", -0.0, "'-0.0' is a negative zero: give 0"),
        ("step", 2.5, "'2.5' is not an integer"),
        ("step", -1, "-1 is not at least 0"),
        ("step", True, "True is not a number"),
        ("depth", -1, "-1 is not at least 0"),
        ("top", 0, "0 is not at least 1"),
        ("jobs", 0, "0 is not at least 1"),
    ],
)
def test_a_bad_argument_is_the_command_lines_one_line_error(keyword, value, problem):
    with pytest.raises(OptionError) as raised:
        traceprof.analyze(SAMPLE, **{keyword: value})
    assert raised.value.message == f"{keyword}: {problem}"
    assert raised.value.exit_code == 3


@pytest.mark.parametrize(
    "keyword, value", [("peak_tflops", -5), ("step", 1.5), ("straggler_threshold", math.nan)]
)
def test_a_job_refuses_them_before_reading_a_trace(tmp_path, keyword, value):
    with pytest.raises(OptionError, match=f"^{keyword}: "):
        traceprof.analyze_job(
            [tmp_path / "missing_rank0.json", tmp_path / "missing_rank1.json"], **{keyword: value}
        )


def test_a_diff_refuses_them_before_reading_a_trace(tmp_path):
    with pytest.raises(OptionError, match=r"^step: '1\.5' is not an integer"):
        traceprof.diff(tmp_path / "a.json", tmp_path / "b.json", step=1.5)
