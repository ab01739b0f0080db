"""TensorBoard: the written logdir, a real TensorBoard serving it (traceprof's plugin,
torch-tb-profiler's PyTorch Profiler tab, scalars, text), and the traceprof tab rendered by a
headless Chromium.

The screenshot in the README is rewritten with
``TRACEPROF_UPDATE_SCREENSHOTS=1 python -m pytest tests/test_tensorboard.py``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from traceprof.tensorboard import events, layout, write_logdir
from traceprof.tensorboard.tb_profiler import convert_document
from traceprof.trace import schema

from .browser import start_chromium
from .conftest import REPO, SAMPLE_TRACES, SHARED_TRACES
from .tbserver import free_port, get, get_json, start_process, stop_process, wait_for
from .tracebuilder import TraceBuilder

BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
SAMPLE = SAMPLE_TRACES / "resnet18_train_cpu.pt.trace.json.gz"
BERT_RUN, SAMPLE_RUN = "h100_bert_small_inference", "resnet18_train_cpu"
TINY_RUN = "tiny_gpu_scopes"
SCREENSHOT = REPO / "docs/images/tensorboard-traceprof.png"
START_TIMEOUT_S = 60
LOAD_TIMEOUT_S = 90


# ---- helpers -------------------------------------------------------------------------------------


def tiny_gpu_trace_with_scopes(path: Path) -> Path:
    """A small GPU trace with traceprof module scopes (as traceprof.capture writes them on a GPU):
    Net -> fc (one 30 us kernel), act (one 10 us kernel), inside ProfilerStep#1."""
    b = TraceBuilder()
    b.top["deviceProperties"] = [
        {
            "id": 0,
            "name": "Test GPU",
            "totalGlobalMem": 1 << 34,
            "computeMajor": 9,
            "computeMinor": 0,
            "numSms": 132,
        }
    ]
    b.step(1, 0, 1000)
    b.scope("", "Net", 10, 500)
    b.scope("fc", "Linear", 20, 100)
    b.op("aten::addmm", 30, 50)
    b.launch(40, 200, 30)
    b.scope("act", "ReLU", 150, 50)
    b.op("aten::relu", 160, 20)
    b.launch(165, 300, 10)
    ops = [e for e in b.events if e["cat"] == "cpu_op"]
    for e in b.events:  # a launch carries the External id of the op around it, as in real traces
        if e["cat"] == "cuda_runtime":
            op = [o for o in ops if o["ts"] <= e["ts"] < o["ts"] + o["dur"]][-1]
            e["args"]["External id"] = op["args"]["External id"]
    return b.write(path, gz=True)


def add_flops(profile_json: Path) -> None:
    """Give a written profile FLOPs fields, as traceprof's JSON carries them where it has FLOPs
    (``{forward,backward}_total_flops``): the plugin must show whatever fields are present."""
    doc = json.loads(profile_json.read_text())
    flops = {"": 3.1e9, "fc": 3e9, "act": 1e8}
    for node in doc["nodes"]:
        node["forward_total_flops"] = flops.get(node["qualified_name"], 0.0)
        node["backward_total_flops"] = 0.0
    profile_json.write_text(json.dumps(doc))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tiny = tiny_gpu_trace_with_scopes(tmp_path_factory.mktemp("inputs") / f"{TINY_RUN}.json.gz")
    return [BERT, SAMPLE, tiny]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, inputs):
    before = {p: sha256(p) for p in inputs}
    logdir = tmp_path_factory.mktemp("logdir")
    runs = write_logdir(inputs, logdir)
    assert [r.name for r in runs] == [BERT_RUN, SAMPLE_RUN, TINY_RUN]
    # a second write of the same trace adds a run beside the first one
    again = subprocess.run(
        [sys.executable, "-m", "traceprof", "tensorboard", str(BERT), "--logdir", str(logdir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert f"run {BERT_RUN}-2" in again.stdout
    # the PyTorch Profiler tab needs internet access (Google Charts); the output says so
    assert "PyTorch Profiler tab (torch-tb-profiler)" in again.stdout
    assert "it needs internet access" in again.stdout
    assert "The traceprof tab needs none" in again.stdout
    assert {p: sha256(p) for p in inputs} == before, "an input trace was modified"
    add_flops(logdir / TINY_RUN / layout.PLUGIN_DIR / layout.MEAN_PROFILE)
    return logdir


@pytest.fixture(scope="module")
def tensorboard(logdir, tmp_path_factory):
    """A real TensorBoard on 127.0.0.1 serving the logdir; always stopped afterwards."""
    log = tmp_path_factory.mktemp("tb") / "tensorboard.log"
    port = free_port()
    proc = start_process(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        log,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(
            "TensorBoard to answer",
            lambda: get(f"{url}/data/plugins_listing")[0] == 200,
            START_TIMEOUT_S,
            proc,
            log,
        )
        want = {BERT_RUN, f"{BERT_RUN}-2", SAMPLE_RUN, TINY_RUN}

        def tb_profiler_loaded():
            status, body = get(f"{url}/data/plugin/pytorch_profiler/runs")
            return status == 200 and not body["loading"] and want <= set(body["runs"])

        wait_for("torch-tb-profiler to load the runs", tb_profiler_loaded, LOAD_TIMEOUT_S, proc, log)
        yield url
    finally:
        stop_process(proc)


# ---- the logdir ----------------------------------------------------------------------------------


def test_one_run_per_trace_with_plugin_data_trace_copy_and_event_file(logdir):
    runs = layout.find_runs(str(logdir))
    assert list(runs) == [BERT_RUN, f"{BERT_RUN}-2", SAMPLE_RUN, TINY_RUN]
    for name, run_dir in runs.items():
        files = sorted(os.listdir(run_dir))
        index = layout.read_run_index(run_dir)
        assert index["run"] == name
        copy = index["tb_profiler"]["trace_copy"]
        assert copy.endswith(schema.TBP_TRACE_FILE_SUFFIX) and copy in files
        assert any(f.startswith("events.out.tfevents.") for f in files)
        assert not any(f.endswith(".tmp") for f in files)
        profile = json.loads(Path(run_dir, layout.PLUGIN_DIR, layout.MEAN_PROFILE).read_text())
        assert profile["schema"].startswith("traceprof.profile/")
    sample = layout.read_run_index(runs[SAMPLE_RUN])
    assert sample["mean_of_steps"] == [2, 3]
    assert [s["step"] for s in sample["steps"]] == [2, 3]
    assert sample["tb_profiler"]["module_scopes_converted"] > 0
    assert layout.read_run_index(runs[BERT_RUN])["tb_profiler"]["launch_categories_renamed"] > 0


def test_the_trace_copy_has_what_torch_tb_profiler_reads():
    doc = json.loads(gzip.decompress(BERT.read_bytes()))
    cats_before = {e.get("cat") for e in doc["traceEvents"]}
    stats = convert_document(doc)
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert {"cuda_runtime", "cuda_driver", "gpu_user_annotation"} <= cats_before
    assert not cats & {"cuda_runtime", "cuda_driver", "gpu_user_annotation"}
    assert "Runtime" in cats and stats.launch_categories_renamed == 110 + 22


def test_traceprof_scopes_become_nested_module_events(tmp_path):
    trace = tiny_gpu_trace_with_scopes(tmp_path / "t.json.gz")
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    stats = convert_document(doc)
    assert stats.module_scopes_converted == 3
    modules = {e["name"]: e["args"] for e in doc["traceEvents"] if e["cat"] == "python_function"}
    assert set(modules) == {"nn.Module: Net", "nn.Module: fc (Linear)", "nn.Module: act (ReLU)"}
    net = modules["nn.Module: Net"]
    assert net["Python parent id"] == -1
    assert modules["nn.Module: fc (Linear)"]["Python parent id"] == net["Python id"]
    assert modules["nn.Module: act (ReLU)"]["Python parent id"] == net["Python id"]
    assert all("Python module id" in a for a in modules.values())


def test_scalars_use_flops_and_a_peak_when_the_profile_has_them():
    node = {
        "id": 0,
        "kind": "module",
        "depth": 0,
        "path": [""],
        "qualified_name": "",
        "name": "Net",
        "forward_total_gpu_busy_us": 40.0,
        "backward_total_gpu_busy_us": 0.0,
        "forward_total_flops": 3e9,
        "backward_total_flops": 1e9,
    }
    doc = {
        "stats": {"kernels": 2, "memcpys": 0, "memsets": 0},
        "roots": [0],
        "nodes": [node],
        "steps": {"gpu_busy_us": 40.0, "wall_us": 100.0, "cpu_us": 50.0, "kernels": 2},
    }
    points = {p.tag: p.value for p in events.scalars(doc, [(7, doc)], peak_flops=4e14)}
    assert points["gpu_busy_us/step"] == 40 and points["gpu_busy_us/Net"] == 40
    assert points["tflops/step"] == pytest.approx(100)  # 4 GFLOP in 40 us of GPU busy time
    assert points["mfu/step"] == pytest.approx(0.25)
    # the profile's own achieved figures win; a peak given by the user sets the MFU
    doc["flops"] = {"achieved": {"flop_per_s": 5e13, "mfu": 0.1}}
    points = {p.tag: p.value for p in events.scalars(doc, [(7, doc)], peak_flops=None)}
    assert points["tflops/step"] == pytest.approx(50) and points["mfu/step"] == pytest.approx(0.1)
    no_flops = {**doc, "flops": {}, "nodes": [{k: v for k, v in node.items() if "flops" not in k}]}
    tags = {p.tag for p in events.scalars(no_flops, [(7, no_flops)], peak_flops=1e14)}
    assert not tags & {"tflops/step", "mfu/step"}


COPY_CASES = sorted(SAMPLE_TRACES.glob("*.json.gz")) + [
    SHARED_TRACES / f
    for f in (
        "module_tree/h100_bert_small_inference.json.gz",
        "module_tree/mi300_resnet_activation_checkpoint_training.json.gz",
        "gpu_attribution/alexnet_benchmark.json.gz",
        "gpu_attribution/torch_compile_triton.json.gz",
        "small/mi250_minitoy_training.json.gz",
        "cpu_only/cpu_only_rank34.pt.trace.json.gz",
    )
]


# torch-tb-profiler on pandas 3
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
@pytest.mark.parametrize("trace", COPY_CASES, ids=lambda p: p.name.split(".")[0])
def test_torch_tb_profiler_loads_every_copy(trace, tmp_path):
    """The copy of each trace loads in torch-tb-profiler 0.4.3's own parser (the code its server
    runs per run), with GPU time where the trace has GPU work, and a module view where it has
    modules."""
    import logging

    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    from traceprof.tensorboard.tb_profiler import tb_profiler_copy

    data, stats = tb_profiler_copy(trace)
    copy = tmp_path / "w.pt.trace.json.gz"
    copy.write_bytes(data)
    logging.getLogger("pytorch_profiler").setLevel(logging.CRITICAL)
    profile_data = RunProfileData.parse("w", None, str(copy), str(tmp_path))
    run = RunGenerator("w", None, profile_data).generate_run_profile()
    parts = {p["name"]: p["value"] for p in run.overview["performance"][0]["children"]}
    events = json.loads(gzip.decompress(data))["traceEvents"]
    if any(e.get("cat") == "kernel" for e in events):
        assert parts["Kernel"] > 0 and parts["Runtime"] > 0
        assert stats.launch_categories_renamed > 0
    if stats.module_scopes_converted or any(e.get("name", "").startswith("nn.Module: ") for e in events):
        modules = run.get_module_view()["data"]
        assert modules and modules[0]["host_duration"] > 0


def test_cli_errors_are_one_line_and_write_nothing(tmp_path):
    target = tmp_path / "logdir"
    for args, code, message in (
        ([str(tmp_path / "missing.json")], 2, "no such file or directory"),
        ([str(tmp_path)], 2, "no .json or .json.gz trace files"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "traceprof", "tensorboard", *args, "--logdir", str(target)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == code
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("traceprof: error: ") and message in lines[0]
    assert not target.exists()


def test_without_tensorboard_installed_the_error_names_the_extra(monkeypatch, tmp_path):
    from traceprof.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'traceprof\[tensorboard\]'"):
        write_logdir([SAMPLE], tmp_path / "tb")
    assert not (tmp_path / "tb").exists()


def test_analyze_writes_a_run_with_its_tensorboard_option(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceprof",
            "analyze",
            str(SAMPLE),
            "--depth",
            "0",
            "--tensorboard",
            str(tmp_path / "tb"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("traceprof module profile")
    assert f"wrote TensorBoard run {SAMPLE_RUN}" in proc.stderr
    assert list(layout.find_runs(str(tmp_path / "tb"))) == [SAMPLE_RUN]


# ---- a real TensorBoard --------------------------------------------------------------------------


def test_both_tabs_are_listed(tensorboard):
    listing = get_json(f"{tensorboard}/data/plugins_listing")
    assert listing["traceprof"]["enabled"]
    assert listing["traceprof"]["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": "/data/plugin/traceprof/index.js",
    }
    assert listing["pytorch_profiler"]["enabled"]
    status, script = get(f"{tensorboard}/data/plugin/traceprof/index.js")
    assert status == 200 and b"export async function render" in script


def test_traceprof_plugin_serves_the_module_profile(tensorboard):
    base = f"{tensorboard}/data/plugin/traceprof"
    runs = {r["name"]: r for r in get_json(f"{base}/runs")["runs"]}
    assert set(runs) == {BERT_RUN, f"{BERT_RUN}-2", SAMPLE_RUN, TINY_RUN}

    bert = get_json(f"{base}/profile?run={BERT_RUN}")
    root = bert["nodes"][0]
    assert root["class_name"] == "BertLMHeadModel"
    assert root["forward_total_gpu_busy_us"] > 100  # 309.4 us per step on the H100

    tiny = get_json(f"{base}/profile?run={TINY_RUN}")
    by_name = {n["qualified_name"]: n for n in tiny["nodes"]}
    assert by_name["fc"]["forward_total_gpu_busy_us"] == pytest.approx(30)
    assert by_name[""]["forward_total_gpu_busy_us"] == pytest.approx(40)

    sample = get_json(f"{base}/profile?run={SAMPLE_RUN}")
    conv1 = next(n for n in sample["nodes"] if n["qualified_name"] == "conv1")
    assert conv1["forward_total_cpu_us"] > 0 and conv1["backward_total_cpu_us"] > 0
    assert conv1["params_total"] == 9408 and conv1["input_shapes"][0]["shape"][1] == 3
    step3 = get_json(f"{base}/profile?run={SAMPLE_RUN}&step=3")
    assert step3["steps"]["numbers"] == [3]

    assert get(f"{base}/profile?run=nope")[0] == 404
    assert get(f"{base}/profile?run={SAMPLE_RUN}&step=99")[0] == 404


def _tb_profiler(url: str, route: str, run: str, **params):
    workers = get_json(f"{url}/data/plugin/pytorch_profiler/workers?run={run}&view=Overview")
    assert len(workers) == 1
    query = urllib.parse.urlencode({"run": run, "worker": workers[0], "span": "default", **params})
    return get_json(f"{url}/data/plugin/pytorch_profiler/{route}?{query}")


def test_pytorch_profiler_tab_shows_gpu_time_of_a_modern_trace(tensorboard):
    views = get_json(f"{tensorboard}/data/plugin/pytorch_profiler/views?run={BERT_RUN}")
    assert {"Overview", "Operator", "Kernel", "Trace", "Module"} <= set(views)

    overview = _tb_profiler(tensorboard, "overview", BERT_RUN)
    parts = {p["name"]: p["value"] for p in overview["performance"][0]["children"]}
    assert parts["Kernel"] > 100 and parts["Runtime"] > 0

    ops = _tb_profiler(tensorboard, "operation/table", BERT_RUN, group_by="Operation")["data"]
    assert sum(op.get("device_self_duration", 0) for op in ops) > 100

    kernels = _tb_profiler(tensorboard, "kernel/table", BERT_RUN, group_by="Kernel")["data"]
    assert kernels["rows"]

    modules = _tb_profiler(tensorboard, "module", BERT_RUN)["data"]
    assert modules[0]["name"] == "BertLMHeadModel_0"
    assert modules[0]["device_duration"] > 100

    tree = _tb_profiler(tensorboard, "tree", BERT_RUN)
    assert tree["name"] == "CallTreeRoot" and tree["children"]

    status, trace = get(
        f"{tensorboard}/data/plugin/pytorch_profiler/trace?run={BERT_RUN}&worker={BERT_RUN}&span=default"
    )
    assert status == 200
    assert any(e.get("cat") == "Runtime" for e in trace["traceEvents"])


def test_pytorch_profiler_tab_shows_traceprof_module_scopes(tensorboard):
    modules = _tb_profiler(tensorboard, "module", TINY_RUN)["data"]
    assert modules[0]["name"] == "Net"
    children = {m["name"]: m for m in modules[0]["children"]}
    assert children["fc (Linear)"]["device_duration"] == pytest.approx(30)
    assert children["act (ReLU)"]["device_duration"] == pytest.approx(10)

    # the traceprof-captured sample (a CPU training trace): module tree with host time
    sample = _tb_profiler(tensorboard, "module", SAMPLE_RUN)["data"]
    assert sample[0]["name"] == "ResNet18" and sample[0]["host_duration"] > 0
    names = {m["name"] for m in sample[0]["children"]}
    assert {"conv1 (Conv2d)", "layer1 (Sequential)", "fc (Linear)"} <= names
    tree = json.dumps(_tb_profiler(tensorboard, "tree", SAMPLE_RUN))
    assert "nn.Module: layer1.0.conv1 (Conv2d)" in tree


def test_scalars_and_text_summary_in_tensorboards_own_tabs(tensorboard):
    def tags():
        t = get_json(f"{tensorboard}/data/plugin/scalars/tags")
        return t if BERT_RUN in t and SAMPLE_RUN in t else None

    scalar_tags = wait_for("the scalars", tags, LOAD_TIMEOUT_S)
    assert {"gpu_busy_us/step", "wall_us/step", "kernels/step"} <= set(scalar_tags[BERT_RUN])
    assert any(t.startswith("gpu_busy_us/BertLMHeadModel_0") for t in scalar_tags[BERT_RUN])
    points = get_json(f"{tensorboard}/data/plugin/scalars/scalars?run={BERT_RUN}&tag=gpu_busy_us/step")
    assert [p[1] for p in points] == [6] and points[0][2] > 100
    sample = get_json(f"{tensorboard}/data/plugin/scalars/scalars?run={SAMPLE_RUN}&tag=cpu_us/step")
    assert [p[1] for p in sample] == [2, 3] and all(p[2] > 0 for p in sample)

    profile = get_json(f"{tensorboard}/data/plugin/traceprof/profile?run={BERT_RUN}")
    if isinstance(profile.get("flops", {}).get("achieved", {}).get("mfu"), float):
        assert {"tflops/step", "mfu/step"} <= set(scalar_tags[BERT_RUN])

    texts = get_json(f"{tensorboard}/data/plugin/text/text?run={BERT_RUN}&tag=module_tree")
    assert "\nBertLMHeadModel(\n" in texts[0]["text"]  # the DeepSpeed-style tree
    assert "DeepSpeed Flops Profiler" in texts[0]["text"] or "fwd latency" in texts[0]["text"]


def test_serve_starts_tensorboard_on_localhost(tmp_path):
    port = free_port()
    proc = start_process(
        [
            sys.executable,
            "-m",
            "traceprof",
            "tensorboard",
            str(SAMPLE),
            "--logdir",
            str(tmp_path / "tb"),
            "--serve",
            "--port",
            str(port),
        ],
        tmp_path / "serve.log",
    )
    try:
        url = f"http://127.0.0.1:{port}"
        runs = wait_for(
            "traceprof tensorboard --serve",
            lambda: get_json(f"{url}/data/plugin/traceprof/runs")["runs"],
            START_TIMEOUT_S,
            proc,
            tmp_path / "serve.log",
        )
        assert [r["name"] for r in runs] == [SAMPLE_RUN]
    finally:
        stop_process(proc)
    assert "starting TensorBoard on 127.0.0.1" in (tmp_path / "serve.log").read_text()


# ---- headless Chromium ---------------------------------------------------------------------------


def test_chromium_renders_the_module_tree(tensorboard, tmp_path):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = start_chromium()
    try:
        driver.get(f"{tensorboard}/#traceprof")
        wait = WebDriverWait(
            driver, 60, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
        )
        frame = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe"))
        driver.switch_to.frame(frame)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
        Select(driver.find_element(By.ID, "tp-run")).select_by_value(BERT_RUN)
        wait.until(lambda d: "BertLMHeadModel_0" in d.find_element(By.CSS_SELECTOR, "tr.tp-row").text)
        driver.find_element(By.XPATH, "//button[text()='Expand all']").click()

        rows = driver.find_elements(By.CSS_SELECTOR, "tr.tp-row")
        assert len(rows) > 50  # 84 modules and the (not in any module) groups
        root_cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
        assert root_cells[0].endswith("BertLMHeadModel_0")
        assert root_cells[1] == "309.4 us"  # forward GPU busy time per step
        assert driver.find_elements(By.CSS_SELECTOR, ".tp-icicle-svg .tp-cell")
        header = [th.text for th in driver.find_elements(By.CSS_SELECTOR, ".tp-tree th")]
        assert header[:5] == ["Module", "Forward", "Backward", "Other", "Share of step"]
        driver.switch_to.default_content()
        update = os.environ.get("TRACEPROF_UPDATE_SCREENSHOTS") == "1"
        target = SCREENSHOT if update else tmp_path / SCREENSHOT.name
        target.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(target))
        assert target.stat().st_size > 10_000

        # "All columns" shows every other field of the profile's nodes
        driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe"))
        for box in driver.find_elements(By.ID, "tp-all-columns"):
            box.click()
            assert len(driver.find_elements(By.CSS_SELECTOR, ".tp-tree th")) > len(header)

        # a profile with FLOPs gets FLOPs and throughput columns
        Select(driver.find_element(By.ID, "tp-run")).select_by_value(TINY_RUN)

        def header_cells(d):
            return [th.text for th in d.find_elements(By.CSS_SELECTOR, ".tp-tree th")]

        wait.until(lambda d: "Throughput" in header_cells(d))
        header = header_cells(driver)
        assert {"Fwd FLOPs", "Bwd FLOPs"} <= set(header)
        fc = next(
            r
            for r in driver.find_elements(By.CSS_SELECTOR, "tr.tp-row")
            if r.find_element(By.TAG_NAME, "td").text.endswith("Linear")
        )
        cells = dict(zip(header, (c.text for c in fc.find_elements(By.TAG_NAME, "td"))))
        assert cells["Forward"] == "30.0 us"
        assert cells["Fwd FLOPs"] == "3.00 GFLOP"
        assert cells["Throughput"] == "100.00 TFLOP/s"  # 3 GFLOP in 30 us of GPU busy time
    finally:
        driver.quit()


def test_chromium_tab_shows_a_modules_kernels_the_timeline_and_the_memory_peak(tensorboard, tmp_path):
    """The same module views as the HTML report's, in the TensorBoard tab, offline: no request
    leaves TensorBoard's own origin and the console has no error."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from . import viewer_checks

    driver = start_chromium()
    try:
        driver.get(f"{tensorboard}/#traceprof")
        wait = WebDriverWait(
            driver, 60, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
        )
        driver.switch_to.frame(wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "iframe")))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.tp-row"))
        Select(driver.find_element(By.ID, "tp-run")).select_by_value(BERT_RUN)
        wait.until(lambda d: "BertLMHeadModel_0" in d.find_element(By.CSS_SELECTOR, "tr.tp-row").text)
        encoder = "BertLMHeadModel_0.BertModel_0.BertEncoder_0"
        viewer_checks.click_module_row(driver, encoder)
        title, names = viewer_checks.top_kernels(driver)
        assert title == f"Kernels of {encoder}" and len(names) >= 5

        head = "BertLMHeadModel_0.BertOnlyMLMHead_0"
        clicked = viewer_checks.click_kernel_of(driver, head)
        assert clicked["module"].startswith(head) and clicked["selected"].startswith(head)
        label, on_curve = viewer_checks.memory_peak(driver)
        assert label.startswith("peak 101.31 MB · ") and on_curve == label

        origin = tensorboard.rstrip("/")
        fetched = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        assert fetched and all(u.startswith(origin) for u in fetched), fetched
        viewer_checks.screenshot(driver, "tp-timeline", "tensorboard-timeline.png", tmp_path)
        driver.switch_to.default_content()
        top = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        assert all(u.startswith(origin) for u in top), top
        errors = [m for m in driver.get_log("browser") if m["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()
