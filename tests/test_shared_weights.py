"""Shared weights and containers on models captured on CPU with traceprof.capture: a tied
embedding (the output layer reuses the embedding's weight) and a ModuleList of blocks."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import traceprof  # noqa: E402
from traceprof import capture, render  # noqa: E402


class TiedLM(torch.nn.Module):
    """An embedding and an output layer sharing one weight, as GPT-2 does."""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx):
        return self.head(torch.relu(self.proj(self.embed(idx))))


class Block(torch.nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.fc = torch.nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class Stack(torch.nn.Module):
    """Blocks in a ModuleList, which is never called itself."""

    def __init__(self, n=3, dim=8):
        super().__init__()
        self.inp = torch.nn.Linear(dim, dim)
        self.blocks = torch.nn.ModuleList(Block(dim) for _ in range(n))

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return x


def _profile(model, x, tmp_path, **kw):
    path = capture.profile_once(model, x, path=tmp_path / "t.pt.trace.json.gz")
    profile = traceprof.analyze(path, **kw)
    profile.self_check()
    return profile


def test_a_tied_embedding_never_gives_a_negative_param_share_and_is_marked(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    profile = _profile(model, torch.randint(0, 50, (2, 5)), tmp_path)
    table = profile.metadata.module_table
    assert table.modules["head"].tied == {"weight": "embed.weight"}
    assert table.modules["embed"].tied is None
    text = render.render(profile, "table")
    lines = text.splitlines()
    assert not re.search(r"-\d+\.\d+%", text)  # no negative share anywhere (was -42.74% here)
    header = next(line for line in lines if line.startswith("Layer (type:depth-idx)"))
    a, b, c = (header.index(h) for h in ("Param #", "Param %", "Mult-Adds"))

    def params(prefix: str) -> tuple[str, str]:
        line = next(line for line in lines if line.startswith(prefix))
        return line[a:b].strip(), line[b:c].strip()

    assert params("TiedLM") == ("--", "--")  # the root owns no parameter of its own
    assert params("├─Linear: 1-3") == ("(tied)", "(tied)")  # like torchinfo's (recursive)
    assert params("├─Embedding: 1-1") == ("800", "42.74%")
    unique = sum(p.numel() for p in model.parameters())
    assert f"Unique params (shared tensors once): {unique:,}" in text


def test_a_module_list_is_a_level_of_the_tree_as_in_the_model(tmp_path):
    torch.manual_seed(0)
    model = Stack()
    profile = _profile(model, torch.randn(4, 8), tmp_path)
    names = [n.qualified_name for n in profile.walk() if n.kind.value == "module"]
    assert names == [
        "",
        "inp",
        "blocks",
        "blocks.0",
        "blocks.0.fc",
        "blocks.1",
        "blocks.1.fc",
        "blocks.2",
        "blocks.2.fc",
    ]
    blocks = profile.find("blocks")
    assert blocks.class_name == "ModuleList" and blocks.name == "blocks"
    assert [profile.nodes[c].name for c in blocks.children] == ["0", "1", "2"]
    assert blocks.calls == 0 and blocks.forward.own.cpu_us == 0  # never called itself
    assert blocks.forward.total.cpu_us == pytest.approx(
        sum(profile.nodes[c].forward.total.cpu_us for c in blocks.children)
    )
    text = render.render(profile, "table")
    assert "├─ModuleList: 1-2" in text and "│    └─Block: 2-1" in text
    # what torchinfo prints for the same model
    torchinfo = pytest.importorskip("torchinfo")
    summary = str(torchinfo.summary(model, input_data=torch.randn(4, 8), verbose=0))
    assert "├─ModuleList: 1-2" in summary and "│    └─Block: 2-1" in summary


def test_the_tied_marker_is_in_every_output(tmp_path):
    """The text reports mark a module whose parameters are counted elsewhere ``(tied)``; JSON
    and CSV say how many (``params_tied``) and the HTML report's Params cell marks it too."""
    import csv
    import io
    import json

    torch.manual_seed(0)
    profile = _profile(TiedLM(), torch.randint(0, 50, (2, 5)), tmp_path)
    nodes = {n["qualified_name"]: n for n in json.loads(render.render(profile, "json"))["nodes"]}
    assert (nodes["head"]["params_total"], nodes["head"]["params_tied"]) == (800, 800)
    assert nodes[""]["params_tied"] == nodes["embed"]["params_tied"] == nodes["proj"]["params_tied"] == 0
    rows = {r["qualified_name"]: r for r in csv.DictReader(io.StringIO(render.render(profile, "csv")))}
    assert rows["head"]["params_tied"] == "800" and rows["embed"]["params_tied"] == "0"
    assert "Params (tied)" in render.render(profile, "tree")

    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By

    from .browser import start_chromium
    from .test_html_report import open_report

    page = tmp_path / "tied.html"
    page.write_text(render.render(profile, "html"), encoding="utf-8")
    driver = start_chromium()
    try:
        open_report(driver, page)
        driver.find_element(By.XPATH, "//button[text()='Expand all']").click()
        header = [th.text for th in driver.find_elements(By.CSS_SELECTOR, ".tp-tree th")]
        column = header.index("Params")
        cells = {}
        for row in driver.find_elements(By.CSS_SELECTOR, "tr.tp-row"):
            cell = row.find_elements(By.TAG_NAME, "td")[column]
            name = row.find_element(By.CSS_SELECTOR, ".tp-name").get_attribute("title")
            cells[name] = (cell.text, cell.get_attribute("title"))
    finally:
        driver.quit()
    assert cells["head"][0] == "800 (tied)" and "800 of them tied to a module outside it" in cells["head"][1]
    assert cells["embed"][0] == "800" and not cells["embed"][1]
