"""One profiler scope per ``nn.Module`` call, opened and closed by forward hooks.

Each module gets a forward pre-hook that opens a scope named
``[traceprof:1]<Class>: <qualified.name>`` and a forward hook (``always_call=True``) that closes
it, so a forward that raises still closes its scope. No backward hooks are used (they break
in-place ops and roughly double step time); the analyzer joins backward ops to forward scopes
through sequence numbers.

A module compiled in place (``module.compile()``) runs its hooks inside its compiled code, where
they do nothing; it gets a wrapper around its compiled call instead, which opens the same scope
eagerly (the session gives the submodules of compiled modules no hooks at all, see
``traceprof.capture.session``).

Scopes are ``torch._C._profiler._RecordFunctionFast`` records when torch has them (about
0.6-1.3 us per scope, enter and exit, under an active CPU profiler on the development machine;
they appear in the trace as ``cat: "cpu_op"``), else the operators behind
``torch.profiler.record_function`` (``cat: "user_annotation"``, 4-8 us; ``record_function``
itself 5-10 us). Both nest by time like any other record function. With the Python hook calls,
one module call costs 2.3-3 us more than under the bare profiler in a tight chain of
``nn.Identity``, and 15-25 us inside real models on CPU, where hooks that do nothing already cost
about 10 us (Python code running cold between large kernels). Figures per model and input size:
``docs/capture.md`` and ``scripts/bench_capture_overhead.py``.

Open scopes are kept on a per-thread stack of ``(module, record)`` pairs. The closing hook pops
the entry of its own module, so a hook of another library that raises before ours opened a scope
cannot make us close the wrong one.

This module imports torch; ``traceprof.capture`` imports it only when a session starts.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

import torch

from traceprof.capture.compiled_modules import compiled_methods
from traceprof.capture.module_table import describe_call
from traceprof.trace.schema import traceprof_scope_name as scope_name  # the spelling lives in schema.py


def _record_factory() -> tuple[str, Callable[[str], Any]]:
    """The cheapest scope implementation this torch has: ``(kind, make(name) -> record)``.

    A record has ``__enter__`` and ``__exit__(None, None, None)``.
    """
    fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    if fast is not None:
        return "record_function_fast", fast
    return "record_function", _OpsRecord


class _OpsRecord:
    """``torch.profiler.record_function`` without its Python-side extras (same trace event)."""

    __slots__ = ("handle", "name")
    _enter = staticmethod(torch.ops.profiler._record_function_enter_new)
    _exit = staticmethod(torch.ops.profiler._record_function_exit._RecordFunction)

    def __init__(self, name: str) -> None:
        self.name = name
        self.handle = None

    def __enter__(self) -> None:
        self.handle = self._enter(self.name, None)

    def __exit__(self, *exc: object) -> None:
        with torch._C.DisableTorchFunctionSubclass():
            self._exit(self.handle)


def _is_compiling() -> Callable[[], bool]:
    compiler = getattr(torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    if fn is None:  # torch < 2.3
        try:
            fn = getattr(importlib.import_module("torch._dynamo"), "is_compiling", None)
        except ImportError:
            fn = None
    return fn if fn is not None else (lambda: False)


class ScopeState:
    """What the hooks read and write; switched by the session at step boundaries.

    ``scopes_on``: open scopes (warmup and active steps). ``capture_on``: record the inputs and
    outputs of the first call of each module (active steps). ``calls``: qualified name ->
    ``(inputs, outputs)`` for the current profiling cycle; ``dirty`` when it grew since the table
    was last embedded.
    """

    def __init__(self) -> None:
        self.scopes_on = False
        self.capture_on = False
        self.calls: dict[str, tuple[list, Any]] = {}
        self.dirty = False
        self.local = threading.local()
        self._stacks: list[list] = []
        self._stacks_lock = threading.Lock()

    def stack(self) -> list:
        try:
            return self.local.stack
        except AttributeError:
            stack: list = []
            self.local.stack = stack
            with self._stacks_lock:
                self._stacks.append(stack)
            return stack

    def reset_calls(self) -> None:
        self.calls = {}
        self.dirty = False

    def close_all(self) -> None:
        """Close the scopes still open on this thread, innermost first; forget other threads'.

        Called when a session ends. Scopes stay open only if a ``BaseException`` other than
        ``Exception`` (``KeyboardInterrupt``) left a forward, since ``always_call`` hooks run
        only for ``Exception``.
        """
        mine = self.stack()
        while mine:
            _, record = mine.pop()
            try:
                record.__exit__(None, None, None)
            except Exception:
                pass
        with self._stacks_lock:
            for stack in self._stacks:
                stack.clear()


def _make_hooks(
    state: ScopeState,
    make_record: Callable[[str], Any],
    name: str,
    scope: str,
    is_compiling: Callable[[], bool],
) -> tuple[Callable, Callable]:
    local = state.local
    new_stack = state.stack

    # is_compiling() comes first: under torch.compile the hooks trace to nothing, without
    # Dynamo reading (and guarding on) the session's state.
    def open_scope(module: Any, args: tuple) -> None:
        if is_compiling() or not state.scopes_on:
            return None
        record = make_record(scope)
        record.__enter__()
        try:
            local.stack.append((module, record))
        except AttributeError:
            new_stack().append((module, record))
        return None

    def close_scope(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if is_compiling():
            return None
        stack = getattr(local, "stack", None)
        if not stack:
            return None
        top = stack[-1]
        if top[0] is module:
            stack.pop()
            top[1].__exit__(None, None, None)
        else:  # entries left above ours (should not happen) are closed with it; none: not ours
            for i in range(len(stack) - 2, -1, -1):
                if stack[i][0] is module:
                    while len(stack) > i:
                        stack.pop()[1].__exit__(None, None, None)
                    break
            else:
                return None
        if state.capture_on and name not in state.calls:
            try:
                state.calls[name] = describe_call(args, kwargs, output)
            except Exception:
                state.calls[name] = ([], None)
            state.dirty = True
        return None

    return open_scope, close_scope


def _scoped_compiled_call(
    impl: Callable, module: Any, open_scope: Callable, close_scope: Callable, is_compiling: Callable[[], bool]
) -> Callable:
    """``impl`` (a module's ``_compiled_call_impl``) inside the module's scope, run eagerly.

    The same scope, stack entry and shape capture as the hooks give; an exception closes the
    scope like ``always_call`` hooks do. Inside an outer compiled region it calls straight
    through.
    """

    def scoped(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return impl(*args, **kwargs)
        open_scope(module, args)
        try:
            output = impl(*args, **kwargs)
        except Exception:
            close_scope(module, args, kwargs, None)
            raise
        close_scope(module, args, kwargs, output)
        return output

    scoped.__wrapped__ = impl  # type: ignore[attr-defined]
    return scoped


class ScopeHooks:
    """Hooks that give every call of ``modules`` one scope; ``remove()`` takes them all off.

    ``modules`` is a list of ``(qualified_name, class_name, module)``. A module compiled in place
    (``module.compile()``) runs its hooks inside the compiled code, where they do nothing; it
    gets no hooks but a wrapper around its ``_compiled_call_impl`` that opens the same scope
    eagerly (``remove()`` puts the compiled call back).
    """

    def __init__(self, modules: list[tuple[str, str, Any]], state: ScopeState) -> None:
        self.state = state
        self.kind, make_record = _record_factory()
        is_compiling = _is_compiling()
        self._handles: list[Any] = []
        #: (module, attribute, compiled callable, our wrapper)
        self._patched: list[tuple[Any, str, Any, Any]] = []
        try:
            for name, class_name, module in modules:
                open_scope, close_scope = _make_hooks(
                    state, make_record, name, scope_name(class_name, name), is_compiling
                )
                # compiled entry points other than forward (which runs inside the hooks below):
                # Lightning's compiled training_step, a compiled _call_impl (module.compile())
                entries = {k: v for k, v in compiled_methods(module).items() if k != "forward"}
                impl = getattr(module, "__dict__", {}).get("_compiled_call_impl")
                if impl is not None:
                    entries["_compiled_call_impl"] = impl
                for attribute, compiled in entries.items():
                    wrapper = _scoped_compiled_call(compiled, module, open_scope, close_scope, is_compiling)
                    module.__dict__[attribute] = wrapper
                    self._patched.append((module, attribute, compiled, wrapper))
                if impl is not None:
                    continue
                # prepend: our scope encloses the time of hooks that others registered.
                self._handles.append(module.register_forward_pre_hook(open_scope, prepend=True))
                self._handles.append(
                    module.register_forward_hook(close_scope, with_kwargs=True, always_call=True)
                )
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()
        while self._patched:
            module, attribute, compiled, wrapper = self._patched.pop()
            if module.__dict__.get(attribute) is wrapper:  # not recompiled or replaced since
                module.__dict__[attribute] = compiled
        self.state.scopes_on = False
        self.state.capture_on = False
        self.state.close_all()
