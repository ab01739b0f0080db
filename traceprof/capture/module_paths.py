"""Module paths of a compiled graph's nodes: Dynamo's spellings resolved to qualified names.

Every FX node that Dynamo traces from a module's ``forward`` carries ``meta["nn_module_stack"]``:
``{key: (source_name, class)}``, outermost first, where ``key`` is ``str(id(module))`` (with
``"@<n>"`` for the module's later calls in the frame) and ``source_name`` is how the compiled
frame reached the module, spelled by Dynamo's ``Source.name``:

- ``L['self'].transformer.h.0.attn``: ``torch.compile(model)``, the frame is ``model.forward``;
- ``L['args'][0].model.layers.0``: ``forward`` wrapped by a decorator (``func(self, *args,
  **kwargs)``: transformers' ``can_return_tuple``, ``auto_docstring``), the model is the
  wrapper's first positional argument;
- ``L['self'].blocks[0]``, ``L['self']._modules['fc']``, ``getattr(L['self'], 'fc')``,
  ``___odict_getitem(L['self']._modules, 'fc')``: item and attribute spellings of one child;
- ``L['self']._orig_mod.fc``: a ``torch.compile`` wrapper put in place of a submodule;
- ``L['fn'].__self__.fc`` (a bound method), ``L['fn'].__closure__[0].cell_contents.fc`` (a
  closure), ``G['model'].fc`` (a global): models reached through the compiled function.

:class:`ModulePaths` resolves them for one graph. Where the recorder knows the profiled model,
the key's module id gives the module's qualified name in it, whatever the spelling; the frame's
root (the module the compiled frame ran on: the model, or a block compiled alone) is the one
module that every stack entry of the graph is consistent with (the entry's trailing accessors
name the last parts of its qualified name). Paths in the table are relative to that root, so
that a graph shared by blocks compiled one by one reads the same for each block. Without the
model (or for a module that is not the model's), the spelling alone gives the path:
:func:`module_path`. A spelling that neither resolves is kept as it is, with a warning.

This module imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["ModulePaths", "SourceName", "module_path", "parse_source"]

#: ``L['self']``, ``G['model']``: a frame's local or global
_LOCAL_RE = re.compile(r"""(L|G|SYNTHETIC_LOCAL)\[(?:'([^']*)'|"([^"]*)")\]""")
_ATTR_RE = re.compile(r"\.(\w+)")
_ITEM_RE = re.compile(r"""\[(?:(-?\d+)|'([^']*)'|"([^"]*)")\]""")
#: calls Dynamo spells an access with: ``getattr(<x>, 'fc')``, ``___odict_getitem(<x>, 'fc')``
_CALL_FORMS = ("getattr(", "___odict_getitem(", "dict.__getitem__(", "list.__getitem__(")
_LITERAL_RE = re.compile(r"""\s*,\s*(?:(-?\d+)|'([^']*)'|"([^"]*)")\s*\)""")
#: accessors that reach the object a local holds: a bound method's object, a wrapped function,
#: a closure's cell
_REACH = frozenset({"__self__", "__func__", "__wrapped__", "__closure__", "cell_contents"})
#: accessors between a module and its child that name no module: a compile wrapper's module, a
#: module's child dict
_SKIP = frozenset({"_orig_mod", "_modules"})
_PASS_THROUGH = _REACH | _SKIP
#: names of a wrapper's variadic arguments: ``L['args'][0]`` is the wrapped method's ``self``
_VARARGS = frozenset({"args", "kwargs"})
#: a stack entry's key: the module's id, then ``@<n>`` for its later calls in the frame
_KEY_RE = re.compile(r"(\d+)(?:@\d+)?\Z")


class SourceName(NamedTuple):
    """A parsed source name: the local (``L['self']``) and its accessors, each ``(kind, text)``
    with ``kind`` ``"attr"`` (``.x``), ``"index"`` (``[0]``) or ``"key"`` (``['x']``), in order."""

    local: str
    local_name: str
    accessors: tuple[tuple[str, str], ...]


def parse_source(source: str) -> SourceName | None:
    """``source`` parsed, or ``None`` when it is no spelling of a module reached from a local."""
    parsed = _parse(source, 0, 0)
    if parsed is None or parsed[1] != len(source):
        return None
    return parsed[0]


def _parse(text: str, pos: int, depth: int) -> tuple[SourceName, int] | None:
    if depth > 64:  # nested calls past any real spelling
        return None
    form = next((f for f in _CALL_FORMS if text.startswith(f, pos)), None)
    if form is not None:
        inner = _parse(text, pos + len(form), depth + 1)
        if inner is None:
            return None
        base, end = inner
        literal = _LITERAL_RE.match(text, end)
        if literal is None:
            return None
        index, name = literal.group(1), _first(literal.group(2), literal.group(3))
        if index is not None:
            accessor = ("index", index)
        else:
            accessor = ("attr" if form == "getattr(" else "key", name or "")
        source = base._replace(accessors=(*base.accessors, accessor))
        pos = literal.end()
    else:
        local = _LOCAL_RE.match(text, pos)
        if local is None:
            return None
        source = SourceName(local.group(0), _first(local.group(2), local.group(3)) or "", ())
        pos = local.end()
    while pos < len(text):
        attr = _ATTR_RE.match(text, pos)
        if attr is not None:
            source = source._replace(accessors=(*source.accessors, ("attr", attr.group(1))))
            pos = attr.end()
            continue
        item = _ITEM_RE.match(text, pos)
        if item is None:
            break
        if item.group(1) is not None:
            accessor = ("index", item.group(1))
        else:
            accessor = ("key", _first(item.group(2), item.group(3)) or "")
        source = source._replace(accessors=(*source.accessors, accessor))
        pos = item.end()
    return source, pos


def _first(*values: str | None) -> str | None:
    return next((v for v in values if v is not None), None)


def _default_split(source: SourceName) -> tuple[str, list[str]]:
    """``(root local, module parts)`` by the spelling alone: the local with the accessors that
    reach the module it holds (a wrapper's ``args[0]``, ``__self__``, a closure's cell), then the
    names of the modules below it (pass-through accessors dropped)."""
    local = source.local
    accessors = list(source.accessors)
    if source.local_name in _VARARGS and accessors and accessors[0][0] != "attr":
        local += _spelled(accessors.pop(0))
    while accessors and (accessors[0][1] in _REACH or (accessors[0][1].isdigit() and _closure(local))):
        local += _spelled(accessors.pop(0))
    return local, [text for _, text in accessors if text not in _SKIP]


def _closure(local: str) -> bool:
    return local.endswith(".__closure__")


def _spelled(accessor: tuple[str, str]) -> str:
    kind, text = accessor
    return {"attr": f".{text}", "index": f"[{text}]"}.get(kind, f"[{text!r}]")


def module_path(source_name: str) -> tuple[str, str | None]:
    """Split a Dynamo module source name into ``(root_local, qualified_name)`` by its spelling.

    ``"L['self'].blocks.0.ln"`` -> ``("L['self']", "blocks.0.ln")``;
    ``"L['self'].blocks[0]"`` -> ``("L['self']", "blocks.0")``; ``"L['args'][0].model"`` ->
    ``("L['args'][0]", "model")``; ``"getattr(L['self'], 'fc')"`` -> ``("L['self']", "fc")``;
    ``"L['model']"`` -> ``("L['model']", "")``. ``_orig_mod`` and ``_modules`` are dropped.
    When the name does not parse: ``(source_name, None)``.
    """
    parsed = parse_source(source_name)
    if parsed is None:
        return source_name, None
    local, parts = _default_split(parsed)
    return local, ".".join(parts)


def module_id(key: str) -> int | None:
    """The module id of a stack entry's key (``"140234@1"`` -> 140234), else ``None``."""
    m = _KEY_RE.match(key)
    return int(m.group(1)) if m else None


class ModulePaths:
    """The module paths of one compiled graph's stack entries, relative to the frame's root.

    ``entries``: the graph's distinct ``(key, source_name)`` stack entries; ``names``: module id
    -> qualified name in the profiled model (empty without a model). :attr:`root` is the
    qualified name of the module the frame ran on (``None``: not known), :meth:`relative` the
    path of one entry relative to it, :attr:`unresolved` the spellings that gave no path.
    """

    def __init__(self, entries: Iterable[tuple[str, str]], names: dict[int, str]) -> None:
        self._names = names
        self._known: set[str] = set(names.values())
        self._entries = {entry: self._absolute(entry[0]) for entry in dict.fromkeys(entries)}
        self.root: str | None = self._find_root()
        self.unresolved: list[str] = []
        self._memo: dict[tuple[str, str], tuple[str, str]] = {}

    def _absolute(self, key: str) -> str | None:
        ident = module_id(key)
        return self._names.get(ident) if ident is not None else None

    def _find_root(self) -> str | None:
        """The module every entry with a known module is consistent with: its trailing
        accessors name the last parts of its qualified name, the ones before reach the root.
        Of several such modules, the one the spelling alone gives; ``None`` when none fits all
        (or no entry's module is known)."""
        common: set[str] | None = None
        preferred: set[str] = set()
        for (_, source), absolute in self._entries.items():
            parsed = parse_source(source)
            if absolute is None or parsed is None:
                continue
            names = [text for _, text in parsed.accessors if text not in _PASS_THROUGH]
            parts = absolute.split(".") if absolute else []
            fits = set()
            for k in range(min(len(names), len(parts)) + 1):
                if k and names[-k] != parts[-k]:
                    break
                root = ".".join(parts[: len(parts) - k])
                if root == "" or root in self._known:
                    fits.add(root)
            common = fits if common is None else common & fits
            _, default = _default_split(parsed)
            if len(default) <= len(parts) and parts[len(parts) - len(default) :] == default:
                preferred.add(".".join(parts[: len(parts) - len(default)]))
        if not common:
            return None
        chosen = common & preferred
        # several fit: the spelling's own; else the deepest (the fewest accessors taken as names)
        return max(chosen or common, key=lambda r: (len(r.split(".")) if r else 0, r))

    def resolve(self, key: str, source: str) -> tuple[str, str]:
        """``(root local, path relative to the root)`` of one stack entry; a spelling that gives
        no path keeps its text as the path (and is listed in :attr:`unresolved`)."""
        entry = (key, source)
        if entry in self._memo:
            return self._memo[entry]
        local, relative = module_path(source)
        absolute = self._entries.get(entry, self._absolute(key))
        root = self.root
        if absolute is not None and root is not None:
            if root == "":
                relative = absolute
            elif absolute == root or absolute.startswith(root + "."):
                relative = absolute[len(root) + 1 :]
        if relative is None:
            relative = source
            self.unresolved.append(source)
        self._memo[entry] = result = (local, relative)
        return result
