"""The table format's totals block equals torchinfo's own summary of the same model and input.

For each sample model a trace is captured on CPU with ``traceprof.capture.profile_once``,
analyzed and rendered with ``--format table``; ``torchinfo.summary(model, input_data=...)`` runs
on the live model in the test and its ``ModelStatistics`` fields and printed totals lines are
compared with traceprof's.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
torchinfo = pytest.importorskip("torchinfo")

import traceprof  # noqa: E402
import traceprof.capture as capture  # noqa: E402
from traceprof.capture import sample_models as sm  # noqa: E402
from traceprof.errors import OptionError  # noqa: E402
from traceprof.render import RenderOptions, render  # noqa: E402
from traceprof.render.table import parse_columns  # noqa: E402
from traceprof.result.torchinfo import torchinfo_stats  # noqa: E402


def _lenet():
    return sm.LeNet5(), (torch.randn(4, 1, 32, 32),)


def _resnet():
    return sm.ResNet18(num_classes=10), (torch.randn(2, 3, 32, 32),)


def _gpt():
    config = sm.GPTConfig(n_layer=2, d_model=64, n_head=2, vocab_size=512, block_size=64)
    return sm.GPT(config), (torch.randint(0, 512, (2, 16)),)


def _bert():
    config = sm.BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    )
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    return sm.BertEncoder(config), (torch.randint(0, 512, (2, 16)), mask)


MODELS = {"lenet5": _lenet, "resnet18": _resnet, "gpt": _gpt, "bert": _bert}
TOTALS = (
    "Total params",
    "Trainable params",
    "Non-trainable params",
    "Total mult-adds",
    "Forward/backward pass size (MB)",
    "Params size (MB)",
    "Input size (MB)",
    "Estimated Total Size (MB)",
)


def _totals(text: str) -> dict[str, str]:
    """``{"Total params": ": 61,706", "Total mult-adds": " (M): 1.23", ...}``."""
    out = {}
    for line in text.splitlines():
        for key in TOTALS:
            if line.startswith(key) and key not in out:
                out[key] = line[len(key) :]
    return out


@pytest.fixture(scope="module", params=sorted(MODELS))
def captured(request, tmp_path_factory):
    torch.manual_seed(0)
    model, inputs = MODELS[request.param]()
    model.eval()
    path = tmp_path_factory.mktemp(request.param) / "trace.pt.trace.json.gz"
    capture.profile_once(model, *inputs, path=path)
    stats = torchinfo.summary(
        model,
        input_data=list(inputs),
        verbose=0,
        depth=10,
        col_names=("input_size", "output_size", "num_params", "mult_adds"),
    )
    return request.param, model, traceprof.analyze(path), stats


def test_totals_equal_torchinfo(captured):
    name, model, profile, expected = captured
    ours = torchinfo_stats(profile)
    assert ours is not None
    assert ours.total_params == expected.total_params
    assert ours.trainable_params == expected.trainable_params
    assert ours.total_mult_adds == expected.total_mult_adds
    assert ours.total_output_bytes == expected.total_output_bytes
    assert ours.total_param_bytes == expected.total_param_bytes
    # torchinfo's input size is sys.getsizeof of each input's storage: its bytes plus the
    # Python object (tens of bytes per tensor); traceprof counts the tensors' bytes
    n_inputs = len(profile.metadata.module_table.modules[""].inputs)
    assert 0 <= expected.total_input - ours.total_input <= 200 * n_inputs
    # the printed lines: same text, the MB lines rounded to two decimals
    table = render(profile, "table")
    # torchinfo 1.8.0 prints its Units enum as "(Units.MEGABYTES)" on Python >= 3.11; it means
    # "(M)", what it prints on older Pythons
    printed = re.sub(r"\(Units\.(\w)\w*\)", r"(\1)", str(expected))
    assert _totals(table) == _totals(printed)
    assert len(_totals(table)) == len(TOTALS)
    # traceprof's own parameter count is the live model's (tied weights once)
    unique = sum(p.numel() for p in model.parameters())
    assert profile.metadata.module_table.modules[""].params_total == unique
    if expected.total_params != unique:  # GPT: torchinfo counts the tied lm_head weight twice
        assert name == "gpt"
        assert f"Unique params (shared tensors once): {unique:,}" in table


def test_table_layout_follows_torchinfo(captured, monkeypatch):
    _name, model, profile, expected = captured
    monkeypatch.setenv("COLUMNS", "1000")  # every column, whatever the terminal
    table = render(profile, "table")
    lines = table.splitlines()
    header = next(line for line in lines if line.startswith("Layer (type:depth-idx)"))
    # the default columns with something in them for this model; the others named in a note
    # (an inference trace has no backward; a model without convolutions no kernel shapes)
    note = next((line for line in lines if line.startswith("columns:")), "")
    assert "left out to fit" not in note
    for title in ("Input Shape", "Output Shape", "Param #", "Param %", "Mult-Adds", "MACs (fwd)", "Fwd CPU"):
        assert title in header
    for title in ("Kernel Shape", "Bwd CPU"):
        assert (title in header) != (f" {title}," in note or f" {title} not shown" in note), title
    assert "Bwd CPU" not in header  # inference: the models run in eval mode
    assert ("Kernel Shape" in header) == any(info.kernel_size for info in expected.summary_list)
    i = lines.index(header)
    assert set(lines[i - 1]) == {"="} and set(lines[i + 1]) == {"="}
    assert lines[i + 2].startswith(type(model).__name__)
    assert re.match(r"├─\w+: 1-1\b", lines[i + 3])
    rows = [
        m
        for m in (re.match(r"^((?:├─|│    )*(?:└─)?)(\w+): (\d+)-(\d+)", line) for line in lines[i + 3 :])
        if m
    ]
    ran = [
        info
        for info in expected.summary_list
        if info.depth > 0
        and not info.is_recursive
        and (info.executed or info.class_name in ("ModuleList", "ModuleDict"))
    ]
    # the modules that ran and the containers around them that are never called (GPT's
    # ModuleDict and ModuleList: levels of the tree from the module table), in torchinfo's
    # order; depth-idx equal too where torchinfo adds no recursive row (ResNet's ReLU, called
    # twice: one row with its two calls)
    assert [m.group(2) for m in rows] == [info.class_name for info in ran]
    if len(ran) == len(expected.summary_list) - 1:
        assert [m.group(0) for m in rows] == [
            f"{'├─' if info.depth == 1 else '│    ' * (info.depth - 1) + '└─'}{info.class_name}: "
            f"{info.depth}-{info.depth_index}"
            for info in ran
        ]


def test_columns_option(captured):
    _, _, profile, _ = captured
    opts = RenderOptions(columns=parse_columns("params,weight_shape,fwd"))
    header = next(
        line
        for line in render(profile, "table", opts).splitlines()
        if line.startswith("Layer (type:depth-idx)")
    )
    assert header.split()[2:] == ["Param", "#", "Weight", "Shape", "Fwd", "CPU"]
    with pytest.raises(OptionError, match=r"unknown column 'nope' .*known: input, output"):
        parse_columns("params,nope")
