"""Profiles, diffs and jobs in a notebook (docs/notebooks.md): a short repr, ``_repr_html_`` with
summary cards and a static SVG icicle, and ``find()`` by qualified, class or partial name.

The notebook test writes a notebook with nbformat, runs it headless with nbclient on this
interpreter's ``python3`` kernel, and opens its HTML outputs in headless Chromium offline: the
icicles have a rectangle per module with its name, no console errors, no requests, and names
that try to inject markup stay text."""

from __future__ import annotations

import ast
import sys

import pytest

import traceprof
from traceprof.errors import ModuleLookupError, TraceprofError
from traceprof.render import notebook

from .conftest import REPO, SAMPLE_TRACES, SHARED_TRACES

RESNET = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
BERT = SHARED_TRACES / "module_tree" / "h100_bert_small_inference.json.gz"
DIFF_BASE = SAMPLE_TRACES / "gpt_diff_base_cpu.pt.trace.json.gz"
DIFF_NEW = SAMPLE_TRACES / "gpt_diff_wide_mlp_cpu.pt.trace.json.gz"
MULTI_RANK = SHARED_TRACES / "multi_rank"
EVIL = '<script>window.pwned=1</script><img src=x onerror="window.pwned=1">&amp;\x00'


@pytest.fixture(scope="module")
def resnet():
    return traceprof.analyze(RESNET)


@pytest.fixture(scope="module")
def bert():
    return traceprof.analyze(BERT)


@pytest.fixture(scope="module")
def gpt_diff():
    return traceprof.diff(DIFF_BASE, DIFF_NEW)


@pytest.fixture(scope="module")
def job():
    return traceprof.analyze_job(MULTI_RANK, jobs=1)


# ---- repr --------------------------------------------------------------------------------------


def test_reprs_are_one_short_line(resnet, bert, gpt_diff, job):
    assert (
        repr(bert)
        == "<ModuleProfile h100_bert_small_inference.json.gz: 84 modules, 1 step, GPU busy 309.4 us>"
    )
    assert repr(resnet).startswith(
        "<ModuleProfile resnet18_train_cpu.pt.trace.json.gz: 68 modules, 2 steps, CPU "
    )
    assert repr(gpt_diff).startswith(
        "<DiffProfile gpt_diff_base_cpu.pt.trace.json.gz -> gpt_diff_wide_mlp_cpu"
    )
    assert "56 modules matched, 0 added, 0 removed>" in repr(gpt_diff)
    assert repr(job).startswith("<Job 8 ranks (multi_rank): 36 modules, GPU compute median ")
    for value in (resnet, bert, gpt_diff, job):
        assert len(repr(value)) < 200 and "\n" not in repr(value)
        assert str(value) == repr(value)


# ---- find --------------------------------------------------------------------------------------


def test_find_by_qualified_class_suffix_and_partial_name(resnet, bert):
    root = resnet.find("")
    assert root.parent == -1 and root.qualified_name == "" and root.label == "ResNet18"
    assert resnet.find("ResNet18") is root  # the class name finds the root
    assert resnet.find("resnet") is root  # part of a name, ignoring case
    assert resnet.find("layer1.0.conv1").class_name == "Conv2d"
    assert resnet.find("fc").qualified_name == "fc"
    assert bert.find("encoder").qualified_name == "BertLMHeadModel_0.BertModel_0.BertEncoder_0"
    assert bert.find("BertModel").qualified_name == "BertLMHeadModel_0.BertModel_0"
    assert bert.find("BertEncoder_0.BertLayer_1").name == "BertLayer_1"  # the end of a qualified name
    assert bert.find("(not in any module)").kind.value == "unattributed"


def test_find_misses_are_one_line_key_errors_with_suggestions(resnet, bert):
    with pytest.raises(KeyError) as miss:
        bert.find("encodr")
    assert isinstance(miss.value, TraceprofError) and miss.value.exit_code == 3
    assert str(miss.value) == (
        "no node 'encodr' in h100_bert_small_inference.json.gz; did you mean BertEncoder, BertEncoder_0?"
    )
    with pytest.raises(ModuleLookupError, match=r"'bert\.encoder'.*did you mean .*BertEncoder_0"):
        bert.find("bert.encoder")  # a Hugging Face name on a trace of nn.Module events
    with pytest.raises(ModuleLookupError) as several:
        resnet.find("downsample")
    assert str(several.value) == (
        "'downsample' matches 3 nodes in resnet18_train_cpu.pt.trace.json.gz: layer2.0.downsample, "
        "layer3.0.downsample, layer4.0.downsample; give a qualified name"
    )
    with pytest.raises(ModuleLookupError, match=r"matches 26 nodes.*Linear_0, .*, \.\.\.; give"):
        bert.find("Linear")
    with pytest.raises(
        ModuleLookupError, match=r"^no node 'zzz' in resnet18_train_cpu\.pt\.trace\.json\.gz$"
    ):
        resnet.find("zzz")


def test_diff_and_job_find_alike(gpt_diff, job):
    assert gpt_diff.find("GPT").qualified_name == ""
    assert gpt_diff.find("transformer.h.2.mlp (MLP)").qualified_name == "transformer.h.2.mlp"  # a key
    assert gpt_diff.find("h.2.mlp.c_fc").class_name == "Linear"
    with pytest.raises(KeyError, match="no node 'mlpp' in either trace; did you mean mlp"):
        gpt_diff.find("mlpp")
    assert gpt_diff.slower(1.0, module="GPT") is not None  # slower() finds modules the same way
    with pytest.raises(TraceprofError, match=r"^module 'mlpp' is in neither trace; did you mean mlp"):
        gpt_diff.slower(1.0, module="mlpp")
    with pytest.raises(TraceprofError, match=r"^'attn' matches \d+ nodes in either trace"):
        gpt_diff.slower(1.0, module="attn")
    assert job.find("alltoall_fwd_single").name == "## alltoall_fwd_single ##"
    with pytest.raises(KeyError, match=r"^'DistributedDataParallel.forward' matches 2 nodes in the job"):
        job.find("DistributedDataParallel.forward")  # an annotation nested in one of its name
    with pytest.raises(KeyError, match="no node 'nosuch' in the job"):
        job.find("nosuch")


# ---- HTML without a browser ---------------------------------------------------------------------


def test_html_has_cards_icicle_and_nothing_that_loads_or_runs(bert, gpt_diff, job):
    page = bert._repr_html_()
    for card in ("GPU busy / step", "309.4 us", "FLOPs / step", "MFU", "of H100 SXM bf16"):
        assert card in page
    assert (
        page.count("<rect ") > 40
        and "<title>BertLMHeadModel_0.BertModel_0.BertEncoder_0 (BertEncoder)" in page
    )
    for html in (page, gpt_diff._repr_html_(), job._repr_html_()):
        lowered = html.lower()
        assert "<script" not in lowered and "<style" not in lowered
        assert not any(bad in lowered for bad in ("src=", "href=", "url(", "@import"))


def test_names_from_the_trace_are_escaped(resnet):
    page = notebook.profile_html(_evil(resnet))
    assert "<script>" not in page and "<img" not in page and "\x00" not in page
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page and "&amp;amp;" in page


def test_icicle_layout_fits_children_into_their_parent():
    cells = [
        notebook.Cell(0, -1, 10.0, "a", "a", "#fff"),
        notebook.Cell(1, 0, 8.0, "b", "b", "#fff"),
        notebook.Cell(2, 0, 8.0, "c", "c", "#fff"),  # children larger than the parent: scaled
        notebook.Cell(3, -1, 0.001, "tiny", "tiny", "#fff"),  # under a pixel: left out
    ]
    placed = {p.cell.key: p for p in notebook.layout(cells, width=100)}
    assert set(placed) == {0, 1, 2}
    assert placed[0].width == pytest.approx(100.0, rel=1e-3)
    assert placed[1].width + placed[2].width == pytest.approx(placed[0].width)
    assert placed[2].x == pytest.approx(placed[1].x + placed[1].width) and placed[2].row == 1


def test_results_import_the_render_layer_only_inside_their_display_methods():
    """The one exception to the layering (pyproject.toml's ignore_imports): a result's __repr__
    and _repr_html_ import traceprof.render.notebook, inside the method, nowhere else."""
    for module in ("result/model.py", "job/model.py", "compare/model.py"):
        tree = ast.parse((REPO / "traceprof" / module).read_text())
        allowed: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name in ("__repr__", "_repr_html_"):
                allowed |= {id(n) for n in ast.walk(fn)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("traceprof.render"):
                assert id(node) in allowed and node.module == "traceprof.render.notebook", (
                    module,
                    node.lineno,
                )
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("traceprof.render") for a in node.names), (
                    module,
                    node.lineno,
                )


def _evil(profile):
    from msgspec.structs import replace

    nodes = tuple(
        replace(n, name=EVIL, class_name=EVIL + "Cls") if n.depth == 1 else n for n in profile.nodes
    )
    return replace(profile, nodes=nodes, warnings=(EVIL,))


# ---- a notebook, run by nbclient, shown in Chromium ---------------------------------------------

_CELLS = [
    f"""import sys
import traceprof
assert sys.prefix == {sys.prefix!r}, sys.prefix  # the kernel runs this interpreter
resnet = traceprof.analyze({str(RESNET)!r})
resnet""",
    f"""bert = traceprof.analyze({str(BERT)!r})
bert""",
    f"""d = traceprof.diff({str(DIFF_BASE)!r}, {str(DIFF_NEW)!r})
d""",
    f"""job = traceprof.analyze_job({str(MULTI_RANK)!r}, jobs=1)
job""",
    """from msgspec.structs import replace
from IPython.display import display
evil = {EVIL!r}
nodes = tuple(replace(n, name=evil, class_name=evil + "Cls") if n.depth == 1 else n for n in resnet.nodes)
display(replace(resnet, nodes=nodes, warnings=(evil,)))""".replace("{EVIL!r}", repr(EVIL)),
    """print(bert.find("encoder").qualified_name)""",
]


@pytest.fixture(scope="module")
def executed_notebook(tmp_path_factory):
    pytest.importorskip("ipykernel")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in _CELLS]
    where = tmp_path_factory.mktemp("notebook")
    client = nbclient.NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(where)}}
    )
    client.execute()
    nbformat.write(nb, where / "profiles.ipynb")
    return nb


def _html_outputs(nb) -> list[str]:
    return [o["data"]["text/html"] for c in nb.cells for o in c.outputs if "text/html" in o.get("data", {})]


def test_the_notebook_shows_each_result_as_html_and_a_short_repr(executed_notebook):
    cells = executed_notebook.cells
    for cell in cells:
        assert not [o for o in cell.outputs if o["output_type"] == "error"], cell.outputs
    plain = [
        o["data"]["text/plain"] for c in cells[:4] for o in c.outputs if o["output_type"] == "execute_result"
    ]
    assert [p.split(" ", 1)[0] for p in plain] == ["<ModuleProfile", "<ModuleProfile", "<DiffProfile", "<Job"]
    assert all(len(p) < 200 for p in plain)
    assert len(_html_outputs(executed_notebook)) == 5
    assert cells[5].outputs[0]["text"].strip() == "BertLMHeadModel_0.BertModel_0.BertEncoder_0"


def test_the_outputs_render_offline_in_chromium(executed_notebook, tmp_path):
    from selenium.webdriver.common.by import By

    from .browser import start_chromium

    outputs = _html_outputs(executed_notebook)
    body = "".join(f'<div class="output" id="out{i}">{h}</div>' for i, h in enumerate(outputs))
    page = tmp_path / "outputs.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{body}</body></html>')
    driver = start_chromium()
    try:
        driver.get_log("browser")
        driver.get(page.as_uri())
        errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, errors
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        assert driver.execute_script("return window.pwned === undefined")
        assert not driver.find_elements(By.CSS_SELECTOR, "img, script, iframe")
        expected = {
            0: ["ResNet18", "layer1.0.conv1", "(not in any module)"],
            1: ["BertLMHeadModel_0.BertModel_0.BertEncoder_0 (BertEncoder)", "Linear_25"],
            2: ["transformer.h.2.mlp.c_fc (Linear)", "lm_head"],
            3: ["DistributedDataParallel.forward"],
            4: [EVIL.replace("\x00", "\ufffd")],
        }
        for i, names in expected.items():
            svg = driver.find_element(By.CSS_SELECTOR, f"#out{i} svg.traceprof-icicle")
            assert svg.size["width"] > 500 and svg.size["height"] >= 60
            rects = svg.find_elements(By.TAG_NAME, "rect")
            assert len(rects) >= 5 and all(r.size["width"] > 0 for r in rects[:20])
            titles = driver.execute_script(
                "return [...arguments[0].querySelectorAll('rect > title')].map((t) => t.textContent)", svg
            )
            assert len(titles) == len(rects)
            for name in names:
                assert any(name in t for t in titles), (i, name, titles[:5])
            drawn = [t.text for t in svg.find_elements(By.TAG_NAME, "text")]
            assert drawn and all(t for t in drawn)
        cards = driver.find_element(By.ID, "out1").text
        assert "GPU BUSY / STEP" in cards and "309.4 us" in cards and "MFU" in cards
    finally:
        driver.quit()
