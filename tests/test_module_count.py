"""One set of nodes and one count of modules in every output: the Python API, the tree's
header, JSON, CSV, the HTML report's card, the notebook and a job all hold the same module nodes
(modules of the module table that no step called among them, with their own uncalled
submodules) and give the same count, ``ModuleProfile.module_nodes`` (result.model.module_node_count).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re

import pytest

import traceprof
from traceprof.render import render
from traceprof.result.model import NodeKind, module_node_count

from .conftest import SAMPLE_TRACES
from .test_rules import forward_model
from .tracebuilder import TraceBuilder

COMPILED = SAMPLE_TRACES / "gpt_train_compiled_cpu.pt.trace.json.gz"


def _row(name: str, cls: str, params: int = 0) -> dict:
    return {
        "name": name,
        "class": cls,
        "params": params,
        "params_total": params,
        "trainable_total": params,
        "frozen_total": 0,
        "buffers_total": 0,
        "extra_repr": "",
        "inputs": [],
        "outputs": None,
    }


def with_unrouted_experts(b: TraceBuilder) -> TraceBuilder:
    """The forward model's trace with a module table that also lists two experts no token was
    routed to, each with a Linear of 8,192 parameters (Switch Transformers' ``expert_4.wi``)."""
    rows = [_row("", "Net", 0), _row("fc", "Linear", 110), _row("act", "ReLU"), _row("experts", "ModuleDict")]
    for k in (3, 4):
        rows += [_row(f"experts.expert_{k}", "DenseActDense"), _row(f"experts.expert_{k}.wi", "Linear", 8192)]
    table = {"format": "traceprof.modules", "version": 1, "rank": 0, "world_size": 1, "modules": rows}
    b.top["traceprof"] = base64.b64encode(json.dumps(table).encode()).decode()
    return b


def _header_count(text: str) -> int:
    [line] = [x for x in text.splitlines() if x.startswith("modules:")]
    return int(re.match(r"modules:\s+([\d,]+) nodes", line)[1].replace(",", ""))


def _same_everywhere(p: traceprof.ModuleProfile) -> int:
    """The module nodes and their count, the same in every output of ``p``; the count."""
    api = [n.qualified_name for n in p.nodes if n.kind is NodeKind.MODULE]
    assert p.module_nodes == module_node_count(p.nodes) == len(api)
    walked = [n.qualified_name for n in p.walk() if n.kind is NodeKind.MODULE]
    assert sorted(walked) == sorted(api)  # every node is reached from the roots
    doc = json.loads(render(p, "json"))
    assert [n["qualified_name"] for n in doc["nodes"] if n["kind"] == "module"] == walked
    assert doc["hierarchy"]["module_nodes"] == len(api)  # the HTML report's card reads it
    rows = list(csv.DictReader(io.StringIO(render(p, "csv"))))
    assert [r["qualified_name"] for r in rows if r["kind"] == "module"] == walked
    assert _header_count(render(p, "tree")) == len(api)
    assert f"<ModuleProfile {p.metadata.path.rsplit('/', 1)[-1]}: {len(api)} modules," in repr(p)
    assert f"{len(api)} from {p.source_description}" in p._repr_html_()
    return len(api)


def test_modules_no_step_called_are_in_every_output(analyze_built):
    p = analyze_built(with_unrouted_experts(forward_model(TraceBuilder())))
    wi = p.find("experts.expert_4.wi")
    assert wi.calls == 0 and wi.info.params == 8192 and wi.total.cpu_us == 0
    assert p.nodes[wi.parent].qualified_name == "experts.expert_4"
    assert _same_everywhere(p) == 8  # Net, fc, act, experts, two experts and their Linears


def test_a_compiled_sample_counts_its_modules_once():
    p = traceprof.analyze(COMPILED)
    p.self_check()
    # the modules the compiler removed (dropouts of p=0) are nodes: counted in the header too
    assert _same_everywhere(p) == 56


def test_a_job_counts_the_modules_matched_not_the_bucket(tmp_path):
    b = with_unrouted_experts(forward_model(TraceBuilder()))
    paths = []
    for rank in range(2):
        b.top["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        paths.append(b.write(tmp_path / f"rank{rank}.json"))
    job = traceprof.analyze_job([str(p) for p in paths], jobs=1)
    one = traceprof.analyze(paths[0])
    assert job.matched_modules == one.module_nodes == 8
    assert any(m.kind is not NodeKind.MODULE for m in job.modules)  # the bucket, not counted
    assert f"modules:   {one.module_nodes} nodes matched across ranks" in render_job_text(job)


def render_job_text(job) -> str:
    from traceprof.render import render_job

    return render_job(job, "tree")


def test_html_card_shows_the_profile_count(analyze_built, tmp_path):
    """The card of the HTML report gives the document's count (not one of its own)."""
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By

    from .browser import start_chromium
    from .test_html_report import open_report

    p = analyze_built(with_unrouted_experts(forward_model(TraceBuilder())))
    page = tmp_path / "experts.html"
    page.write_text(render(p, "html"), encoding="utf-8")
    driver = start_chromium()
    try:
        open_report(driver, page)
        cards = {
            c.find_element(By.CSS_SELECTOR, ".tp-card-key").get_attribute("textContent"): c.find_element(
                By.CSS_SELECTOR, ".tp-card-value"
            ).get_attribute("textContent")
            for c in driver.find_elements(By.CSS_SELECTOR, ".tp-card")
        }
    finally:
        driver.quit()
    assert cards["Modules"] == f"{p.module_nodes} from {p.source_description}"
