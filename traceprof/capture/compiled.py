"""The compiled-kernel table: which module each kernel of a ``torch.compile`` graph works for.

A compiled model leaves no module scopes inside its graphs: the ops of a submodule are fused
into generated kernels and run from Inductor's wrapper code. While a
:class:`CompiledGraphRecorder` is active, every graph Inductor compiles (forward, backward and
inference graphs; every region of a model with graph breaks; models compiled with
``torch.compile(model)``, ``model.compile()`` or block by block) is recorded: for each call
site of its generated wrapper (a generated C++/Triton kernel, an extern kernel such as
``extern_kernels.mm``, a fallback such as ``torch.ops.aten.convolution_backward.default``) the
name of the event that call leaves in a profiler trace, and the post-grad FX nodes it computes
with their aten op, input and output shapes and dtypes, and module path. :meth:`table` returns
the document (``"format": "traceprof.compiled"``, ``"version": 1``) that the capture session
embeds into the trace under ``"traceprof_compiled"``; ``docs/trace-conventions.md`` describes
every field and how a trace event finds its row.

In short: every run of a compiled graph is a scope ``## Call CompiledFxGraph <key> ##`` whose
``<key>`` is the graph's FX graph cache key (``table["graphs"]`` is keyed by it); the scope's
direct children are the wrapper's call sites in order (``graphs[key]["calls"]``): generated C++
kernels are ``graph_<graph_id>_<kernel>`` events (``cpp.enable_kernel_profile``), extern kernels
and fallbacks ordinary ``aten::<op>`` events. Matching walks the children in time order and takes
for each the next call site whose ``event`` equals its name.

What the recorder changes while active, all undone on exit (also when the block raises):

- ``torch._inductor.config.cpp.enable_kernel_profile = True`` (else C++ kernels leave no event);
- ``torch._inductor.config.trace.provenance_tracking_level = 2`` unless already non-zero (the
  map from each kernel to the post-grad nodes it computes);
- a pass appended to ``post_grad_custom_post_pass`` that only keeps a reference to each
  post-grad graph; its ``uuid()`` enters every FX graph and AOTAutograd cache key, so graphs
  compiled without the recorder (other settings, no pass) are never taken from the caches for
  it: each is compiled for real the first time, and its row is built from its post-grad graph;
- ``torch.fx.experimental.proxy_tensor.proxy_call`` wrapped: when an op is traced as its
  decomposition, its arguments (described) are kept on the node of its first output, so that
  the table can cost the decomposed nodes as the op (``original_inputs``);
- ``ReplacementPatternEntry.replace_with_graph`` wrapped (the one place through which Inductor's
  pattern replacements insert their nodes: ``Match.replace_by_example``,
  ``Match.replace_with_graph`` and registered replacements): a node the replacement creates
  without a module stack of its own is tagged with the stack of the heaviest node it replaced
  (``module_from: "replaced"``; runs only at pattern replacements);
- ``CompiledFxGraph.post_compile`` wrapped: the one place every compiled graph passes through,
  compiled or loaded from a cache. Nothing the recorder does can fail a compile: its errors are
  collected in ``warnings``.

A graph loaded from Inductor's caches has no post-grad graph: its row comes from where the
compile that filled the cache put it: this recorder (a hit inside the session), an earlier
recorder of the process, or a file ``<inductor cache dir>/traceprof/compiled-<salt>/<key>.json``
written at that compile (so a rerun of a script with a warm cache compiles no more than without
traceprof).

:class:`compiled_module_scopes` gives modules compiled in place (``module.compile()``) an eager
scope per call for traces taken without the capture session (the session does the same itself,
see ``traceprof.capture.scopes``).

This module imports torch only inside functions: importing it does not import torch.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any, ClassVar

import msgspec

from traceprof.capture.compiled_modules import (
    compiled_in_place,
    compiled_methods,
    compiled_module_scopes,
    inside_compiled,
    is_compiled_model,
    named_model_modules,
    runs_compiled,
)
from traceprof.capture.compiled_output import (
    failure_table,
    iter_call_sites,
    keep_row,
    kept_row,
    table_document,
    writable_graphs,
)
from traceprof.capture.graph_nodes import (
    assign_modules,
    bindings,
    describe_val,
    encode_value,
    module_outputs,
    module_stack,
)
from traceprof.capture.graph_patches import wrap_post_compile, wrap_proxy_call, wrap_replace_with_graph
from traceprof.capture.module_paths import ModulePaths, module_path
from traceprof.capture.module_table import decode_table, encode_table
from traceprof.capture.wrapper_source import expected_event_name, parse_wrapper_source
from traceprof.trace.model import CompiledCall, CompiledCompile, CompiledGraph, CompiledInput, CompiledTable
from traceprof.trace.schema import COMPILED_KERNEL_PREFIX_RE, COMPILED_TABLE_KEY
from traceprof.trace.schema import COMPILED_TABLE_FORMAT as TABLE_FORMAT
from traceprof.trace.schema import COMPILED_TABLE_VERSION as TABLE_VERSION

__all__ = [
    "COMPILED_TABLE_KEY",
    "TABLE_FORMAT",
    "TABLE_VERSION",
    "CompiledGraphRecorder",
    "RecorderUnavailable",
    "compiled_in_place",
    "compiled_methods",
    "compiled_module_scopes",
    "decode_table",
    "encode_table",
    "encode_value",
    "expected_event_name",
    "failure_table",
    "inside_compiled",
    "is_compiled_model",
    "iter_call_sites",
    "module_path",
    "named_model_modules",
    "parse_wrapper_source",
    "runs_compiled",
]

#: goes into every FX graph cache key through the recorder's pass (``uuid()``); change it when the
#: recorder changes what it records, so that graphs cached by an older version compile again
_SALT = "8"


class RecorderUnavailable(RuntimeError):
    """This torch lacks a hook the recorder needs (it was written against torch 2.13)."""


# -- the recorder ----------------------------------------------------------------------------------


class _PendingGraph:
    """A post-grad graph seen by the recorder's pass, waiting for its ``post_compile``."""

    __slots__ = ("graph", "paths", "placeholders", "provenance_lengths")

    def __init__(self, graph: Any, provenance_lengths: dict[str, int]) -> None:
        self.graph = graph
        self.paths: ModulePaths | None = None
        self.provenance_lengths = provenance_lengths
        self.placeholders = sum(1 for n in graph.nodes if n.op == "placeholder")


def _provenance_map() -> dict[str, list[str]]:
    import torch._inductor.debug as inductor_debug

    return getattr(inductor_debug, "_inductor_triton_kernel_to_post_grad_node_info", None) or {}


def _with_pass(current: Any, ours: Any, version: str) -> Any:
    """The value of ``post_grad_custom_post_pass`` with our pass after the user's: a list where
    this torch runs several (2.12 on), ours alone where it runs one and none is set (2.11)."""
    try:
        from torch._inductor.custom_graph_pass import get_custom_graph_passes
    except ImportError:  # one pass only
        if current is not None:
            raise RecorderUnavailable(
                f"torch {version} runs one post-grad pass and one is already set"
            ) from None
        return ours
    passes = get_custom_graph_passes(current)
    return [*passes, ours] if passes else ours


def _make_pass(recorder: CompiledGraphRecorder) -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class TraceprofRecordPass(CustomGraphPass):
        """A post-grad pass that only remembers the graph (it changes nothing)."""

        def __call__(self, graph: Any) -> None:
            recorder._on_post_grad_graph(graph)

        def uuid(self) -> str:
            return f"traceprof-compiled-table-v{TABLE_VERSION}-{recorder.salt}"

    return TraceprofRecordPass()


class CompiledGraphRecorder:
    """Record every graph Inductor compiles while active; :meth:`table` returns the table.

    ::

        with CompiledGraphRecorder(model) as rec:
            train_step()                       # the first call compiles: recorded
            with torch.profiler.profile(...) as prof:
                train_step()
                prof.add_metadata(COMPILED_TABLE_KEY, encode_table(rec.table()))

    ``model`` (optional) is the user's model: it names the module each compiled frame ran on
    (``compiles[i]["root"]``: ``"blocks.0"`` for a block compiled alone, ``""`` for the whole
    model) by looking the module ids of ``nn_module_stack`` up in the model's modules at
    compile time. ``salt`` goes into the pass's ``uuid()`` and so into every cache key (a new
    salt compiles everything again). ``persist``: keep each row in a file next to Inductor's
    cache and read it back on a cache hit. Graphs compiled before any recorder was active are not
    recorded (Dynamo reuses them without compiling): enter it before the first call. Graphs an
    earlier recorder of this process recorded are kept when it exits, and ``table(earlier=...)``
    can include them (marked ``"earlier_session": true``): Dynamo keeps running those graphs in
    a later session without compiling them again (a second session, ``profile_once`` twice).

    Only one recorder can be active at a time. ``__enter__`` raises :class:`RecorderUnavailable`
    when this torch lacks a hook the recorder needs, having changed nothing.
    """

    _active: CompiledGraphRecorder | None = None
    _lock = threading.Lock()
    #: graphs and compiles that recorders of this process recorded, for later sessions
    _earlier_graphs: ClassVar[dict[str, CompiledGraph]] = {}
    _earlier_compiles: ClassVar[list[CompiledCompile]] = []
    #: at most this many graphs are kept for later sessions (the oldest are dropped)
    EARLIER_GRAPHS_LIMIT = 2048

    def __init__(self, model: Any = None, *, salt: str = _SALT, persist: bool = True) -> None:
        self.model = model
        self.salt = salt
        self.persist = persist
        self.graphs: dict[str, CompiledGraph] = {}
        self.compiles: list[CompiledCompile] = []
        self.warnings: list[str] = []
        self.changes = 0  #: counts recorded compiles and cache hits: a new table when it grows
        self._local = threading.local()
        self._saved: dict[str, Any] = {}
        self._patched: Any = None  # our post_compile wrapper while installed
        self._original: Any = None
        self._proxy_patched: Any = None  # our proxy_call wrapper while installed
        self._proxy_original: Any = None
        self._replace_patched: Any = None  # our replace_with_graph wrapper while installed
        self._replace_original: Any = None
        self._active_flag = False
        self._torch_version = ""
        self._module_names: dict[int, tuple[str, str]] | None = None  # id -> (name, class)
        self._mutex = threading.RLock()  # a compile on another thread while table() reads

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> CompiledGraphRecorder:
        import torch

        try:
            import torch._inductor.config as inductor_config
            import torch._inductor.custom_graph_pass  # the pass base class
            import torch._inductor.debug  # the provenance map
            from torch._inductor.output_code import CompiledFxGraph
        except Exception as e:
            raise RecorderUnavailable(f"torch {torch.__version__} has no Inductor hooks: {e}") from e
        if "post_compile" not in CompiledFxGraph.__dict__:
            raise RecorderUnavailable(f"torch {torch.__version__}: no CompiledFxGraph.post_compile")
        if not hasattr(inductor_config.trace, "provenance_tracking_level") or not hasattr(
            inductor_config.cpp, "enable_kernel_profile"
        ):
            raise RecorderUnavailable(f"torch {torch.__version__}: no provenance tracking in Inductor")
        with CompiledGraphRecorder._lock:
            if CompiledGraphRecorder._active is not None:
                raise RuntimeError("a CompiledGraphRecorder is already active")
            CompiledGraphRecorder._active = self
        self._torch_version = str(torch.__version__)
        try:
            self._saved = {
                "cpp.enable_kernel_profile": inductor_config.cpp.enable_kernel_profile,
                "trace.provenance_tracking_level": inductor_config.trace.provenance_tracking_level,
                "post_grad_custom_post_pass": inductor_config.post_grad_custom_post_pass,
            }
            inductor_config.cpp.enable_kernel_profile = True
            if not inductor_config.trace.provenance_tracking_level:
                inductor_config.trace.provenance_tracking_level = 2
            ours = _make_pass(self)
            inductor_config.post_grad_custom_post_pass = _with_pass(
                inductor_config.post_grad_custom_post_pass, ours, str(torch.__version__)
            )

            self._original = CompiledFxGraph.__dict__["post_compile"]
            self._patched = wrap_post_compile(self, self._original)
            CompiledFxGraph.post_compile = self._patched  # type: ignore[method-assign]
            import torch.fx.experimental.proxy_tensor as proxy_tensor

            if callable(getattr(proxy_tensor, "proxy_call", None)):  # else: no original_inputs
                self._proxy_original = proxy_tensor.proxy_call
                self._proxy_patched = wrap_proxy_call(self._proxy_original)
                proxy_tensor.proxy_call = self._proxy_patched
            self._install_replace_hook()
            self._active_flag = True
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _install_replace_hook(self) -> None:
        """Wrap ``ReplacementPatternEntry.replace_with_graph`` (a static method) when this torch
        has it; else pattern-made nodes keep the module of their inputs (``"inputs"``)."""
        try:
            from torch._inductor.pattern_matcher import ReplacementPatternEntry
        except Exception:
            return
        original = ReplacementPatternEntry.__dict__.get("replace_with_graph")
        if not isinstance(original, staticmethod):
            return
        self._replace_original = original
        self._replace_patched = staticmethod(wrap_replace_with_graph(original.__func__))
        ReplacementPatternEntry.replace_with_graph = self._replace_patched  # type: ignore[method-assign]

    def _restore_replace_hook(self) -> None:
        if self._replace_patched is None:
            return
        from torch._inductor.pattern_matcher import ReplacementPatternEntry

        if ReplacementPatternEntry.__dict__.get("replace_with_graph") is self._replace_patched:
            ReplacementPatternEntry.replace_with_graph = self._replace_original  # type: ignore[method-assign]
        # else someone patched it after us: our wrapper stays below theirs (it only tags nodes)
        self._replace_patched = self._replace_original = None

    @property
    def active(self) -> bool:
        return self._active_flag

    def _restore(self) -> None:
        """Undo every change, whatever state ``__enter__`` reached; safe to call twice."""
        self._active_flag = False
        errors = []
        try:
            from torch._inductor.output_code import CompiledFxGraph

            if self._patched is not None and CompiledFxGraph.__dict__.get("post_compile") is self._patched:
                CompiledFxGraph.post_compile = self._original  # type: ignore[method-assign]
            # else someone patched it after us: our wrapper stays below theirs, inactive
        except Exception as e:
            errors.append(e)
        self._patched = self._original = None
        if self._proxy_patched is not None:
            import torch.fx.experimental.proxy_tensor as proxy_tensor

            if proxy_tensor.proxy_call is self._proxy_patched:
                proxy_tensor.proxy_call = self._proxy_original
            self._proxy_patched = self._proxy_original = None
        try:
            self._restore_replace_hook()
        except Exception as e:
            errors.append(e)
        if self._saved:
            import torch._inductor.config as inductor_config

            saved, self._saved = self._saved, {}
            for dotted, value in saved.items():
                try:
                    target: Any = inductor_config
                    *path, attr = dotted.split(".")
                    for part in path:
                        target = getattr(target, part)
                    setattr(target, attr, value)
                except Exception as e:
                    errors.append(e)
        with CompiledGraphRecorder._lock:
            if CompiledGraphRecorder._active is self:
                CompiledGraphRecorder._active = None
                self._keep_for_later()
        self._local = threading.local()
        self._module_names = None
        if errors:
            raise errors[0]

    def _keep_for_later(self) -> None:
        """Add this recorder's graphs to the process's earlier graphs (under ``_lock``)."""
        cls = CompiledGraphRecorder
        for key, graph in self.graphs.items():
            if graph.nodes_source == "post_grad_pass" or key not in cls._earlier_graphs:
                cls._earlier_graphs.pop(key, None)
                cls._earlier_graphs[key] = graph
        keys = set(self.graphs)
        cls._earlier_compiles = [c for c in cls._earlier_compiles if c.key not in keys] + [
            c for c in self.compiles if c.table_from is not None
        ]
        while len(cls._earlier_graphs) > cls.EARLIER_GRAPHS_LIMIT:
            cls._earlier_graphs.pop(next(iter(cls._earlier_graphs)))
        kept = set(cls._earlier_graphs)
        cls._earlier_compiles = [c for c in cls._earlier_compiles if c.key in kept]

    # -- hooks ---------------------------------------------------------------------------------

    def _on_post_grad_graph(self, graph: Any) -> None:
        if not self._active_flag:
            return
        try:
            lengths = {k: len(v) for k, v in _provenance_map().items()}
            self._local.pending = _PendingGraph(graph, lengths)
        except Exception as e:  # recording must never break a compile
            self._local.pending = None
            self.warnings.append(f"post-grad pass failed: {type(e).__name__}: {e}")

    def _on_compiled(self, compiled: Any, example_inputs: Any, graph_kwargs: Any) -> None:
        from torch._guards import CompileContext

        pending: _PendingGraph | None = getattr(self._local, "pending", None)
        self._local.pending = None
        if pending is not None and example_inputs is not None and pending.placeholders != len(example_inputs):
            self.warnings.append(
                f"a post-grad graph with {pending.placeholders} inputs does not fit a compiled graph"
                f" with {len(example_inputs)}: recorded as a cache hit"
            )
            pending = None
        graph_kwargs = graph_kwargs or {}
        direction = _direction(graph_kwargs)
        graph_id = graph_kwargs.get("graph_id")
        compile_id = CompileContext.current_compile_id()
        compile_id_s = str(compile_id) if compile_id is not None else None
        key = getattr(compiled, "_fx_graph_cache_key", None)
        table_key = key if key is not None else f"nokey:{graph_id}:{direction}"
        source = getattr(compiled, "source_code", None) or ""

        root: str | None = None
        root_class: str | None = None
        table_from: str | None
        entry = self.graphs.get(table_key)
        if pending is not None:  # a real compile: the table row comes from its post-grad graph
            old_ids = entry.compile_ids if entry is not None else ()
            entry = self._build_entry(
                table_key, key, direction, graph_id, source, pending, bindings(pending.graph, example_inputs)
            )
            entry = msgspec.structs.replace(entry, compile_ids=old_ids)
            root, root_class = self._root_module(pending)
            table_from = "compile"
            if key is not None and self.persist:
                self._persist(key, entry, root, root_class)
        elif entry is not None:  # compiled earlier in this session
            table_from = "session"
            root, root_class = next(
                ((c.root, c.root_class) for c in self.compiles if c.key == table_key and c.root is not None),
                (None, None),
            )
        else:  # a cache hit on a graph that an earlier session or process compiled
            entry, root, root_class, table_from = self._cache_hit(table_key, key, direction, graph_id, source)
        if compile_id_s is not None and compile_id_s not in entry.compile_ids:
            entry = msgspec.structs.replace(entry, compile_ids=(*entry.compile_ids, compile_id_s))
        self.graphs[table_key] = entry
        self.compiles.append(
            CompiledCompile(
                compile_id=compile_id_s,
                direction=direction,
                graph_id=graph_id,
                key=table_key,
                cache="compiled" if pending is not None else "cache_hit",
                root=root,
                root_class=root_class,
                table_from=table_from,
            )
        )
        self.changes += 1

    def _cache_hit(
        self, table_key: str, key: str | None, direction: str, graph_id: Any, source: str
    ) -> tuple[CompiledGraph, str | None, str | None, str | None]:
        """``(row, root, root_class, table_from)`` of a graph loaded from Inductor's caches that
        this session did not compile: recorded elsewhere, else a row without nodes."""
        found = self._recorded_elsewhere(key) if key is not None else None
        if found is not None:
            entry, root, root_class, table_from = found
            # the module under that name in this model (the class may be a new one)
            root_class = self._classes_by_name().get(root or "", root_class) if root is not None else None
            return entry, root, root_class, table_from
        self.warnings.append(
            f"graph {table_key} came from Inductor's cache without its recorded table: its"
            " kernels have no module paths"
        )
        return self._build_entry(table_key, key, direction, graph_id, source, None), None, None, None

    # -- graphs recorded elsewhere ----------------------------------------------------------------

    def _persist(self, key: str, entry: CompiledGraph, root: str | None, root_class: str | None) -> None:
        """Write the row of a graph compiled for real, for cache hits of later processes."""
        try:
            keep_row(key, _SALT, entry, root, root_class)
        except Exception as e:
            self.warnings.append(f"could not keep the table of graph {key}: {type(e).__name__}: {e}")

    def _recorded_elsewhere(self, key: str) -> tuple[CompiledGraph, str | None, str | None, str] | None:
        """``(row, root, root_class, where)`` of a graph an earlier recorder of this process
        (``"process"``) or an earlier process (``"cache_dir"``) compiled, else ``None``."""
        with CompiledGraphRecorder._lock:
            graph = CompiledGraphRecorder._earlier_graphs.get(key)
            if graph is not None and graph.nodes_source == "post_grad_pass":
                compile_ = next(
                    (
                        c
                        for c in CompiledGraphRecorder._earlier_compiles
                        if c.key == key and c.root is not None
                    ),
                    None,
                )
                entry = msgspec.structs.replace(graph, compile_ids=())
                if compile_ is None:
                    return entry, None, None, "process"
                return entry, compile_.root, compile_.root_class, "process"
        if not self.persist:
            return None
        try:
            kept = kept_row(key, _SALT)
        except Exception as e:  # a damaged file: as if there were none
            self.warnings.append(f"could not read the kept table of graph {key}: {type(e).__name__}: {e}")
            return None
        return (*kept, "cache_dir") if kept is not None else None

    # -- building -------------------------------------------------------------------------------

    def _build_entry(
        self,
        table_key: str,
        key: str | None,
        direction: str,
        graph_id: Any,
        source: str,
        pending: _PendingGraph | None,
        bindings: dict[str, int] | None = None,
    ) -> CompiledGraph:
        kernels, sites = parse_wrapper_source(source)
        sites = [{**site, "index": index} for index, site in enumerate(sites)]
        row: dict[str, Any] = {}
        if pending is not None:
            nodes = {n.name: n for n in pending.graph.nodes}
            paths = self._paths(pending)
            row["calls"], row["nodes"] = assign_modules(
                sites, nodes, _provenance_map(), pending.provenance_lengths, paths
            )
            for spelling in dict.fromkeys(paths.unresolved):
                self.warnings.append(
                    f"graph {table_key}: the module path {spelling!r} could not be resolved to a"
                    " module of the model; its nodes keep it as written"
                )
            if direction != "backward":
                row["module_outputs"] = module_outputs(pending.graph, paths, bindings or {})
            # binds symbolic sizes ("s77") to a run's concrete inputs
            row["inputs"] = tuple(
                CompiledInput(name=n.name, val=describe_val(n.meta.get("val")))
                for n in pending.graph.nodes
                if n.op == "placeholder"
            )
        else:
            row["calls"] = tuple(CompiledCall(**site) for site in sites)  # no nodes, no module
        prefixes = sorted(
            {
                m.group(0)
                for k in kernels.values()
                if k["event"]
                for m in [COMPILED_KERNEL_PREFIX_RE.match(k["event"])]
                if m
            }
        )
        return CompiledGraph(
            key=key,
            table_key=table_key,
            direction=direction,
            graph_id=graph_id,
            event_prefixes=tuple(prefixes),
            wrapper="python" if "def call(" in source else ("cpp" if source else "none"),
            nodes_source="post_grad_pass" if pending is not None else "none",
            **row,
        )

    def _modules_by_id(self) -> dict[int, tuple[str, str]]:
        """id of each module of ``self.model`` (and of its compile wrappers) -> (name, class)."""
        if self._module_names is None:  # once per recorder: the model's modules do not change
            self._module_names = {}
            if self.model is not None:
                for name, module, wrapper in named_model_modules(self.model):
                    entry = (name, type(module).__name__)
                    self._module_names.setdefault(id(module), entry)
                    self._module_names.setdefault(id(wrapper), entry)
        return self._module_names

    def _classes_by_name(self) -> dict[str, str]:
        return dict(self._modules_by_id().values())

    def _paths(self, pending: _PendingGraph) -> ModulePaths:
        """The module paths of a post-grad graph's stack entries (once per graph)."""
        if pending.paths is None:
            entries = [
                (key, source)
                for node in pending.graph.nodes
                for key, source, _ in module_stack(node, replaced=True)
            ]
            names = {ident: name for ident, (name, _) in self._modules_by_id().items()}
            pending.paths = ModulePaths(entries, names)
        return pending.paths

    def _root_module(self, pending: _PendingGraph) -> tuple[str | None, str | None]:
        """``(qualified name, class)`` in ``self.model`` of the module the compiled frame ran on
        (:attr:`ModulePaths.root`); ``(None, None)`` without a model, or for a frame that is not
        a module of the model or a graph without module stacks."""
        root = self._paths(pending).root
        return root, self._classes_by_name().get(root) if root is not None else None

    def module_outputs(self) -> dict[str, tuple[None, Any]]:
        """Qualified name in the model -> ``(None, output)``: the outputs of the modules inside
        compiled code, from the forward and inference graphs' ``module_outputs`` under the
        module their frame ran on (the module table's ``(inputs, outputs)`` of a call, inputs
        not known)."""
        with self._mutex:
            roots = {c.key: c.root for c in self.compiles if c.root is not None}
            classes = self._classes_by_name()
            # blocks compiled one by one (``layer.compile()``) share the graph Dynamo compiled
            # for the first of their class: the others (no forward graph of their own) run it
            own = {roots[key] for key, graph in self.graphs.items() if key in roots and graph.module_outputs}
            by_class: dict[str, list[str]] = {}
            for name in self._compiled_roots():
                by_class.setdefault(classes.get(name, ""), []).append(name)
            out: dict[str, tuple[None, Any]] = {}
            for key, graph in self.graphs.items():
                root = roots.get(key)
                if root is None:
                    continue
                sharing = [m for m in by_class.get(classes.get(root, ""), []) if m not in own]
                for under in dict.fromkeys([root, *sharing]):
                    for module, value in (graph.module_outputs or {}).items():
                        name = f"{under}.{module}" if under and module else under or module
                        out.setdefault(name, (None, value))
        return out

    def _compiled_roots(self) -> list[str]:
        """Names of the modules of the model whose calls run compiled code (a compile wrapper,
        compiled in place, compiled methods), in the model's order."""
        if self.model is None:
            return []
        return [
            name
            for name, module, target in named_model_modules(self.model)
            if runs_compiled(name, module, target)
        ]

    # -- output ---------------------------------------------------------------------------------

    def table(self, earlier: Collection[str] = ()) -> dict[str, Any]:
        """The table as a JSON-able document (format ``traceprof.compiled``, version 1).

        ``earlier``: class names; the graphs that earlier recorders of this process recorded for
        a compiled frame whose root module has one of these classes (``compiles[i]
        ["root_class"]``) are included too, with their compiles, each marked
        ``"earlier_session": true``.
        """
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config

        graphs: dict[str, CompiledGraph] = {}
        compiles: list[CompiledCompile] = []
        if earlier:
            graphs, compiles = self._earlier(set(earlier))
        with self._mutex:
            graphs.update(self.graphs)
            compiles.extend(self.compiles)
            graphs, omitted = writable_graphs(graphs)
            warnings = tuple(self.warnings)
        config = {
            "fx_graph_cache": bool(inductor_config.fx_graph_cache),
            "autograd_cache": bool(getattr(functorch_config, "enable_autograd_cache", False)),
            "cpp_wrapper": bool(inductor_config.cpp_wrapper),
            "descriptive_names": str(inductor_config.cpp.descriptive_names),
            "kernel_profile": True,
        }
        table = CompiledTable(
            version=TABLE_VERSION,
            graphs=graphs,
            compiles=tuple(compiles),
            torch_version=self._torch_version,
            warnings=warnings,
            omitted=tuple(omitted),
            salt=self.salt,
            config=config,
        )
        return table_document(table)

    def _earlier(self, classes: set[str]) -> tuple[dict[str, CompiledGraph], list[CompiledCompile]]:
        """The graphs earlier recorders of this process recorded for a compiled frame whose
        root module has one of ``classes`` (and this recorder has not), with their compiles,
        marked as from an earlier session."""
        with CompiledGraphRecorder._lock:
            wanted = {c.key for c in CompiledGraphRecorder._earlier_compiles if c.root_class in classes}
            graphs = {
                key: msgspec.structs.replace(graph, earlier_session=True)
                for key, graph in CompiledGraphRecorder._earlier_graphs.items()
                if key in wanted and key not in self.graphs
            }
            compiles = [
                msgspec.structs.replace(c, earlier_session=True)
                for c in CompiledGraphRecorder._earlier_compiles
                if c.key in graphs
            ]
        return graphs, compiles


def _direction(graph_kwargs: dict[str, Any]) -> str:
    """A compiled graph's direction, from the keywords Inductor compiled it with."""
    if graph_kwargs.get("is_backward"):
        return "backward"
    if graph_kwargs.get("is_inference"):
        return "inference"
    return "forward"
