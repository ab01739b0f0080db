"""No test asserts a duration: on a loaded machine any bound on wall-clock time fails (a 5 s
bound took 5.08 s and 9.5 s). Tests bound work by counts (events, calls, bytes, memory);
timings live in the benchmarks (scripts/bench_*.py, docs/performance.md).

The check reads every test module's syntax tree: an ``assert`` may not involve a clock reading
(``time.time()``, ``perf_counter()``, ``monotonic()``, ``process_time()``, their ``_ns`` forms)
nor a name computed from one (``start = time.perf_counter()``, ``took = time.perf_counter() -
start``). A wait with a deadline stays allowed where the deadline only ends the loop and the
assertion is about what happened (``while not done and time.monotonic() < deadline: ...``,
then ``assert done``).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: functions that read a clock (the attribute or the name they are called by)
CLOCKS = frozenset(
    f"{name}{suffix}"
    for name in ("time", "perf_counter", "monotonic", "process_time")
    for suffix in ("", "_ns")
)


def _reads_clock(node: ast.AST, clocked: set[str]) -> bool:
    """Whether the expression ``node`` calls a clock or uses a name computed from one."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in CLOCKS:
                return True
        if isinstance(sub, ast.Name) and sub.id in clocked:
            return True
    return False


def duration_asserts(source: str, filename: str = "<test>") -> list[str]:
    """``file:line`` of each assert in ``source`` that involves a clock reading."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = list(ast.walk(scope)) if not isinstance(scope, ast.Module) else list(scope.body)
        clocked: set[str] = set()
        # names bound to clock readings, to the fixed point (a name from a name from a clock)
        changed = True
        while changed:
            changed = False
            for node in body:
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                if not _reads_clock(value, clocked):
                    continue
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and name.id not in clocked:
                            clocked.add(name.id)
                            changed = True
        for node in body:
            if isinstance(node, ast.Assert) and _reads_clock(node.test, clocked):
                found.append(f"{filename}:{node.lineno}")
    return sorted(set(found), key=lambda s: int(s.rsplit(":", 1)[1]))


def test_no_test_asserts_a_duration():
    found: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        found += duration_asserts(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert not found, "tests asserting a wall-clock duration (bound counts instead): " + ", ".join(found)


def test_the_check_finds_duration_asserts():
    bad = """
import time
from time import perf_counter

def test_fast():
    start = time.perf_counter()
    work()
    assert time.perf_counter() - start < 5.0

def test_elapsed_name():
    t0 = perf_counter()
    work()
    took = perf_counter() - t0
    assert took < 2, took

def test_deadline_asserted():
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, "nothing happened"
"""
    assert duration_asserts(bad) == ["<test>:8", "<test>:14", "<test>:19"]
    good = """
import time

def test_counts():
    deadline = time.monotonic() + 60
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done()
    old = time.time() - 3600  # a file's age, set; not a duration measured
    os.utime(path, (old, old))
    assert calls == 3
"""
    assert duration_asserts(good) == []
