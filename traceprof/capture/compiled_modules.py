"""Which modules of a model run compiled code, and eager scopes around modules compiled in place.

A ``torch.compile`` wrapper (``OptimizedModule``, at the root or in place of a submodule) stands
for the module it wraps; a module compiled in place (``module.compile()``) runs a compiled
``_call_impl``; a module may have methods compiled on the instance (Lightning's
``from_compiled``, ``model.forward = torch.compile(model.forward)``). The capture session gives
the modules inside compiled code no hooks (Dynamo would guard on them), and opens the compiled
module's scope eagerly around its compiled entry points (``traceprof.capture.scopes``).

This module imports torch only inside functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceprof.trace.schema import traceprof_scope_name

__all__ = [
    "compiled_in_place",
    "compiled_methods",
    "compiled_module_scopes",
    "inside_compiled",
    "is_compiled_model",
    "named_model_modules",
    "runs_compiled",
]


def _optimized_module_class() -> Any:
    """``torch._dynamo.eval_frame.OptimizedModule`` if Dynamo was imported (else nothing is compiled)."""
    import sys

    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls = getattr(eval_frame, "OptimizedModule", None)
    return cls if isinstance(cls, type) else None


def named_model_modules(model: Any) -> list[tuple[str, Any, Any]]:
    """``(qualified_name, module, call_target)`` for every module of ``model``, compiled or not.

    Like ``model.named_modules()`` (shared modules once, under their first name), but a
    ``torch.compile`` wrapper (``OptimizedModule``, at the root or as a submodule:
    ``model.blocks[0] = torch.compile(block)``) stands for the module it wraps: ``module`` is the
    original module, named without ``_orig_mod.``, and ``call_target`` is the wrapper, whose
    hooks run eagerly around the compiled call. For every other module ``call_target`` is the
    module itself.
    """
    optimized = _optimized_module_class()
    out: list[tuple[str, Any, Any]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", model)]
    while stack:
        name, wrapper = stack.pop()
        module = wrapper
        while optimized is not None and isinstance(module, optimized):
            module = module._orig_mod
        if id(module) in seen:
            continue
        seen.add(id(module))
        out.append((name, module, wrapper))
        children = [
            (f"{name}.{n}" if name else str(n), c) for n, c in module._modules.items() if c is not None
        ]
        stack.extend(reversed(children))  # depth first, in registration order
    return out


def compiled_in_place(module: Any) -> Any:
    """The compiled ``_call_impl`` of a module compiled with ``module.compile()``, else ``None``."""
    return getattr(module, "__dict__", {}).get("_compiled_call_impl")


def compiled_methods(module: Any) -> dict[str, Any]:
    """Methods of ``module`` replaced on the instance by ``torch.compile``d callables, by name:
    ``model.forward = torch.compile(model.forward)``, or Lightning's ``from_compiled`` (what
    ``trainer.fit(torch.compile(lit_module))`` does), which compiles ``forward``,
    ``training_step`` and the other step methods this way. Functions that
    ``torch.compiler.disable`` wrapped are not compiled."""
    out = {}
    for name, value in getattr(module, "__dict__", {}).items():
        if (
            callable(value)
            and getattr(value, "_torchdynamo_orig_callable", None) is not None
            and not getattr(value, "_torchdynamo_disable", False)
        ):
            out[str(name)] = value
    return out


def runs_compiled(name: str, module: Any, call_target: Any) -> bool:
    """The module's calls run compiled code: a ``torch.compile`` wrapper, compiled in place, or
    with compiled methods (:func:`compiled_methods`)."""
    return (
        call_target is not module or compiled_in_place(module) is not None or bool(compiled_methods(module))
    )


def inside_compiled(named: list[tuple[str, Any, Any]]) -> set[str]:
    """Names of the modules of ``named`` (:func:`named_model_modules`) that are called from
    inside compiled code: the descendants of modules that :func:`runs_compiled`.

    Hooks on these would be traced into the graphs, and Dynamo guards on the hook ids (per
    module, so blocks compiled one by one would each recompile, and every graph traced with the
    hooks would recompile once they are removed); they give no scope there anyway.
    """
    roots = [name for name, module, target in named if runs_compiled(name, module, target)]
    return {
        name
        for name, _, _ in named
        if any(name != root and (root == "" or name.startswith(root + ".")) for root in roots)
    }


def is_compiled_model(model: Any) -> bool:
    """``model`` is, or holds, a ``torch.compile`` wrapper or a module compiled in place."""
    return any(runs_compiled(*entry) for entry in named_model_modules(model))


class compiled_module_scopes:
    """Give every call of a module compiled in place (``module.compile()``) an eager scope.

    ``Module.compile()`` makes ``Module.__call__`` run ``module._compiled_call_impl``, a compiled
    ``_call_impl``: the module's hooks then run inside compiled code, so hook-based scopes never
    open for it. And Dynamo compiles one graph for all blocks of one class (module paths in the
    graph are relative to ``L['self']``), so which block ran is known only at run time. While
    active, this wraps ``_compiled_call_impl`` of each such module of ``model`` so that its calls
    run inside a scope ``[traceprof:1]<Class>: <qualified.name>`` while a profiler is on. Inside
    an outer compiled region the wrapper calls straight through. Restored on exit.

    For traces taken with a bare ``torch.profiler``; the capture session does this itself.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self._patched: list[tuple[Any, Any, Any]] = []

    def __enter__(self) -> compiled_module_scopes:
        import torch

        is_compiling = torch.compiler.is_compiling
        record = getattr(torch._C._profiler, "_RecordFunctionFast", None) or torch.profiler.record_function
        for name, module, _ in named_model_modules(self.model):
            impl = compiled_in_place(module)
            if impl is None:
                continue
            scope = traceprof_scope_name(type(module).__name__, name)
            wrapped = _scoped_call(impl, scope, is_compiling, record)
            module.__dict__["_compiled_call_impl"] = wrapped
            self._patched.append((module, impl, wrapped))
        return self

    def __exit__(self, *exc: object) -> None:
        while self._patched:
            module, impl, wrapped = self._patched.pop()
            if module.__dict__.get("_compiled_call_impl") is wrapped:
                module.__dict__["_compiled_call_impl"] = impl


def _scoped_call(impl: Any, scope: str, is_compiling: Callable[[], bool], record: Any) -> Any:
    import torch.autograd.profiler as autograd_profiler

    def scoped(*args: Any, **kwargs: Any) -> Any:
        if is_compiling() or not autograd_profiler._is_profiler_enabled:
            return impl(*args, **kwargs)
        with record(scope):
            return impl(*args, **kwargs)

    scoped.__wrapped__ = impl  # type: ignore[attr-defined]
    return scoped
