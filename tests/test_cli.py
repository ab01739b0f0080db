"""The command line: formats, options, output files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import SHARED_TRACES

BERT = SHARED_TRACES / "module_tree/h100_bert_small_inference.json.gz"
MI300 = SHARED_TRACES / "module_tree/mi300_resnet_activation_checkpoint_training.json.gz"


def run(*args, check=True, **env):
    import os

    proc = subprocess.run(
        [sys.executable, "-m", "traceprof", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_default_is_the_tree_on_stdout():
    out = run("analyze", BERT).stdout
    assert "\nBertLMHeadModel(\n" in out  # the DeepSpeed-style report's detailed tree
    assert "(not in any module)" in out


def test_output_format_follows_the_file_extension(tmp_path):
    for name, check in (
        ("p.json", lambda t: json.loads(t)["schema"] == "traceprof.profile/3"),
        ("p.csv", lambda t: t.startswith("id,parent,depth")),
        ("p.txt", lambda t: "traceprof module profile" in t),
    ):
        target = tmp_path / name
        proc = run("analyze", BERT, "-o", target)
        assert proc.stdout == ""
        assert check(target.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv", "p.json", "p.txt"]


def test_depth_top_sort_and_step_options():
    depth0 = run("analyze", MI300, "--depth", "0", "--format", "table").stdout
    assert "├─" not in depth0
    top = run("analyze", MI300, "--top", "2", "--sort", "gpu", "--format", "json").stdout
    doc = json.loads(top)
    root = doc["nodes"][0]
    assert len(root["children"]) <= 3
    step = json.loads(run("analyze", MI300, "--step", "16", "-f", "json").stdout)
    assert step["steps"]["numbers"] == [16]


def test_an_unknown_step_is_a_one_line_error():
    proc = run("analyze", MI300, "--step", "3", check=False)
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines() == [
        f"traceprof: error: {MI300}: step 3 is not in the trace (steps in the trace: 15, 16, 17)"
    ]


def test_raw_numbers_and_hierarchy_choice():
    raw = run("analyze", BERT, "--raw").stdout
    assert " us" not in raw.split("\n\n", 2)[2]
    flat = run("analyze", BERT, "--hierarchy", "annotations").stdout
    assert "warning:   the trace has no user annotations (record_function)" in flat


def test_help_lists_the_options():
    out = run("analyze", "--help").stdout
    for opt in ("--format", "--depth", "--top", "--sort", "--step", "--output", "--hierarchy"):
        assert opt in out


def test_output_files_are_readable_by_others_like_any_new_file(tmp_path):
    import os

    target = tmp_path / "p.json"
    old = os.umask(0o022)
    try:
        from traceprof.output import write_atomic

        write_atomic(str(target), "{}")
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644


def _run_with_terminal(*args, on: str, **env):
    """Run the CLI with ``on`` ("stdout" or "stderr") on a pseudo-terminal, as when a person
    watches, and the other stream on a pipe. Returns (exit code, terminal text, piped text)."""
    import os
    import pty

    master, slave = pty.openpty()
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, on: slave}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "traceprof", *map(str, args)],
            env={**os.environ, "COLUMNS": "250", **env},
            **streams,
        )
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
    piped = (err if on == "stdout" else out).decode()
    return proc.returncode, seen.decode("utf-8", "replace").replace("\r\n", "\n"), piped


def test_progress_bar_on_a_terminal_and_never_on_stdout():
    code, terminal, out = _run_with_terminal(
        "analyze", BERT, "--depth", "0", on="stderr", TRACEPROF_PROGRESS="always"
    )
    assert code == 0
    for stage in ("reading", "decoding", "indexing", "attributing"):
        assert stage in terminal, terminal
    assert "━" in terminal  # the bar itself
    assert out.startswith("traceprof module profile") and "\x1b" not in out
    code, terminal, out = _run_with_terminal(
        "analyze", BERT, "--depth", "0", on="stderr", TRACEPROF_PROGRESS="never"
    )
    assert code == 0 and "decoding" not in terminal
    # small files get no bar by default: it would only flash
    code, terminal, out = _run_with_terminal(
        "analyze", BERT, "--depth", "0", on="stderr", TRACEPROF_PROGRESS="auto"
    )
    assert code == 0 and "decoding" not in terminal


def test_diff_shows_what_it_is_doing_on_a_terminal(tmp_path):
    args = ("diff", BERT, MI300, "--depth", "0")
    code, terminal, out = _run_with_terminal(*args, on="stderr", TRACEPROF_PROGRESS="always")
    assert code == 0
    for stage in ("reading", "decoding", "attributing", "comparing"):
        assert stage in terminal, terminal
    assert out.startswith("traceprof diff") and "\x1b" not in out
    # with the cache: the lookup, then a side from the cache has no stages
    cache = {"TRACEPROF_PROGRESS": "always", "TRACEPROF_CACHE": str(tmp_path)}
    assert _run_with_terminal(*args, on="stderr", **cache)[0] == 0
    code, terminal, out = _run_with_terminal(*args, on="stderr", **cache)
    assert code == 0 and "looking the traces up in the cache" in terminal
    assert "decoding" not in terminal and out.startswith("traceprof diff")
    code, terminal, _ = _run_with_terminal(*args, on="stderr", TRACEPROF_PROGRESS="never")
    assert code == 0 and "comparing" not in terminal


@pytest.mark.parametrize("fmt", ["tree", "table"])
def test_terminal_gets_colors_and_guides_and_the_same_text(fmt):
    from traceprof.render.terminal import GUIDE, plain

    trace = BERT if fmt == "table" else MI300
    piped = run("analyze", trace, "--format", fmt, "--depth", "2", COLUMNS="250").stdout  # as below
    code, shown, _ = _run_with_terminal("analyze", trace, "--format", fmt, "--depth", "2", on="stdout")
    assert code == 0
    assert "\x1b[" in shown  # colors
    if fmt == "tree":
        assert f"\x1b[2m{GUIDE}" in shown  # guides for the module tree's indentation
    assert plain(shown) == piped  # same layout and numbers as the plain text
    code, shown, _ = _run_with_terminal(
        "analyze", trace, "--format", fmt, "--depth", "2", on="stdout", NO_COLOR="1"
    )
    assert code == 0 and "\x1b[" not in shown and shown == piped


def test_formats_without_a_place_for_warnings_print_them_on_stderr(tmp_path):
    qwen = SHARED_TRACES / "module_tree/h100_qwen1.5_0.5b_inference.json.gz"
    proc = run("analyze", qwen, "-f", "csv")
    assert proc.stdout.startswith("id,parent,depth")
    assert proc.stderr.startswith("traceprof: warning: 29.6% of the step's GPU busy time")
    assert "launched before the trace" in proc.stderr
    assert "warning" not in run("analyze", qwen, "-f", "json").stderr  # in the document


@pytest.mark.parametrize("cache", ["off", "hit"])
def test_analyzing_one_trace_imports_only_what_it_uses(cache, tmp_path):
    """Start-up is part of every command: the tree of one trace does not import the job, diff,
    DataFrame, Parquet or TensorBoard code, the progress bar (no terminal here), torch, what
    only writing a file, capturing a trace or the HTML report use (tempfile, shutil, hashlib),
    nor numpy.ma (which np.unique and np.isin import: traceprof.trace.columns.unique instead);
    without the cache, or reading the analysis from it."""
    unused = (
        "traceprof.job.analyze",
        "traceprof.compare.diff",
        "pandas",
        "pyarrow",
        "tensorboard",
        "torch",
        "importlib.resources",
        "rich",
        "tempfile",
        "shutil",
        "hashlib",
        "numpy.ma",
    )
    code = (
        "import sys; from traceprof.cli import main\n"
        "try:\n    main(['analyze', sys.argv[1]])\nexcept SystemExit as e:\n    assert not e.code\n"
        f"print(sorted(m for m in {unused!r} if m in sys.modules))"
    )
    env = dict(os.environ, TRACEPROF_CACHE="off" if cache == "off" else str(tmp_path / "cache"))
    if cache == "hit":
        subprocess.run(
            [sys.executable, "-m", "traceprof", "analyze", str(BERT)],
            env=env,
            check=True,
            capture_output=True,
        )
        assert list((tmp_path / "cache").glob("*-profile-*.tpc"))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(BERT)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


#: what `traceprof --help`, `--version` and a usage error may import of traceprof: the command
#: line and the few small modules its options read (sizes, numbers, messages)
CLI_LAYER = {"errors", "options", "read", "read.limits", "startup", "units", "version"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        [],
        ["nope"],
        ["analyze", "--help"],
        ["analyze"],
        ["analyze", "--bogus"],
        ["analyze", "t.json", "--format", "nope"],
        ["analyze", "t.json", "--depth", "-1"],
        ["analyze", "t.json", "--max-memory", "3Q"],
        ["analyze", "t.json", "--sort", "size"],
        ["analyze", "t.json", "--hierarchy", "x"],
        ["diff", "--help"],
        ["diff", "a.json"],
        ["tensorboard", "--help"],
        ["tensorboard", "t.json"],
        ["cache", "--help"],
        ["cache", "nope"],
    ],
)
def test_help_version_and_usage_errors_import_the_command_line_only(argv):
    """Nothing but click and the command line is imported before a command runs: not numpy,
    msgspec, the readers, the analysis or the renderers (docs/performance.md "Start-up")."""
    code = (
        "import sys; from traceprof.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'msgspec', 'xxhash', 'rich', 'pandas', 'zlib_ng', 'importlib_metadata') "
        "or m == 'importlib.metadata' or m.startswith('traceprof.')))"
    )
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert "exit 0" in proc.stderr or "exit 3" in proc.stderr or "exit 2" in proc.stderr, proc.stderr
    imported = eval(proc.stdout.splitlines()[-1])
    outside = [
        m
        for m in imported
        if not m.startswith("traceprof.cli") and m.removeprefix("traceprof.") not in CLI_LAYER
    ]
    assert outside == [], proc.stderr


def test_the_command_lines_names_are_those_of_their_tables():
    """cli/choices.py copies the names of tables the command line must not import to parse its
    arguments: each copy holds the same names as its table."""
    from traceprof import render
    from traceprof.analysis.hierarchy import Source
    from traceprof.cli import choices
    from traceprof.read import cache
    from traceprof.render import table
    from traceprof.render.diff import DIFF_REGISTRY
    from traceprof.result.transforms import SortKey

    assert choices.FORMATS == tuple(sorted(render.REGISTRY)) == tuple(sorted(render.JOB_REGISTRY))
    assert choices.DIFF_FORMATS == tuple(sorted(DIFF_REGISTRY))
    assert choices.TABLE_COLUMNS == tuple(table.COLUMNS)
    assert choices.DEFAULT_TABLE_COLUMNS == tuple(table.DEFAULT_COLUMNS)
    assert choices.SORT_KEYS == tuple(k.value for k in SortKey)
    assert choices.SOURCES == ("auto", *(s.value for s in Source if s is not Source.NONE))
    assert choices.CACHE_DIR_ENV == cache.DIR_ENV


@pytest.mark.parametrize(
    "argv, code",
    [(["--version"], 0), (["analyze", "missing.json"], 2), (["analyze", str(BERT), "-o", "."], 4)],
)
def test_the_command_ends_after_its_exit_handlers_with_its_status(tmp_path, argv, code):
    """The command ends the process without tearing the interpreter down, but only after the
    exit handlers have run and its output is flushed, with the status main() gives."""
    marker = tmp_path / "handlers ran"
    script = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
        f"sys.argv = ['traceprof', *{argv!r}]\n"
        "from traceprof.cli import run\n"
        "print('unflushed', end='')\n"
        "run()\n"
        "print('not reached')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == code, proc.stderr
    assert marker.read_text() == "yes"
    assert proc.stdout.startswith("unflushed") and "not reached" not in proc.stdout
    direct = subprocess.run(
        [sys.executable, "-m", "traceprof", *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert direct.returncode == code
