"""Short display names of tree nodes: the shortest tail of each node's path that tells it apart.

A node's path is the list of names from the root down to it (``ModuleNode.path``,
``JobModule.key``). Its *parts* (:func:`path_parts`) are what a reader sees of each level: on a
trace of traceprof's module table (or Lightning's) the path's elements are qualified names
(``transformer.h``, ``transformer.h.0``) and a level's part is the attribute below the one above
it (``h``, ``0``); annotations and ``with_stack`` scope names are parts as they stand, dots and
all (DLRM's ``("## forward ##", "DistributedDataParallel.forward")`` has two parts, not three).
Views that name a node outside a tree (a diff's rows, a job's stragglers, a heat map's rows, the
``--ops`` heading) show :func:`short_names`: the last part, or as many trailing parts as it takes
for no two *different* paths of the set to look the same (``layer.3.attention.self`` and
``layer.4.attention.self``), never starting at an index (``h.2``, not ``2``). Every kind of node
follows the one rule (``(not in any module)/## backward ##`` is not ``## backward ##``, the
module).
Trees show the node's own part (its ``name``), since the indentation already gives the path.
The full name stays one hover (HTML ``title``) or one column (``qualified_name``) away, and every
data format keeps it unchanged: short names are for reading only, never a key.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

#: what separates the attributes of a qualified name, and the parts of a short name
SEPARATOR = "."

Parts = tuple[str, ...]
K = TypeVar("K", bound=Hashable)


def path_parts(path: Sequence[str], name: str = "") -> Parts:
    """The parts of a tree path: an element that extends the one above it by attributes
    (``transformer.h`` under ``transformer``, or anything under a root named ``""``) gives those
    attributes; any other element is one part as it stands. With ``name`` (the node's own tree
    label, e.g. ``(3 more)`` for a folded row): the last part is that name."""
    parts: list[str] = []
    above: str | None = None
    for element in path:
        if above is not None and (above == "" or element.startswith(above + SEPARATOR)):
            parts += (element[len(above) + 1 :] if above else element).split(SEPARATOR)
        else:
            parts.append(element)
        above = element
    if name:
        parts[-1:] = [name]
    return tuple(p for p in parts if p)


def own_parts(name: str, qualified_name: str, parent_qualified_name: str | None) -> Parts:
    """A node's parts below its parent in a tree that keeps no paths (a diff's nodes): its
    name, or, where its qualified name is an attribute path some levels below the parent's
    (a container never called, so no node between), those attributes."""
    if parent_qualified_name is not None:
        below = parent_qualified_name + SEPARATOR if parent_qualified_name else ""
        rest = qualified_name[len(below) :] if qualified_name.startswith(below) else ""
        if rest != name and rest.endswith(SEPARATOR + name):
            return tuple(rest.split(SEPARATOR))
    return (name,)


def _is_index(part: str) -> bool:
    # ASCII digits only (str.isdigit also takes "²" and "٣"; the page's script must agree)
    return part.isascii() and part.isdigit()


def _widened(parts: Parts, k: int) -> int:
    """``k``, or more parts while the tail would start with an index (``h.2``, not ``2``: the
    number alone does not say what it counts)."""
    while k < len(parts) and _is_index(parts[-k]):
        k += 1
    return k


def short_names(paths: Sequence[Sequence[str]]) -> list[str]:
    """For each path (its parts, :func:`path_parts`), its shortest tail of whole parts that no
    other distinct path in ``paths`` shares, joined by ``.`` (equal paths get equal short
    names); order kept. A tail never starts with an index (``h.2.mlp``, not ``2.mlp``). A path
    that is another's tail in full (``self`` beside ``attention.self``) is kept whole."""
    parts = [tuple(p) for p in paths]
    k = [_widened(p, 1) for p in parts]
    pending = list(range(len(parts)))
    while pending:
        owners: dict[Parts, set[Parts]] = {}
        for p, n in zip(parts, k):
            owners.setdefault(p[-n:], set()).add(p)
        pending = [i for i in pending if len(owners[parts[i][-k[i] :]]) > 1 and k[i] < len(parts[i])]
        for i in pending:
            k[i] = _widened(parts[i], k[i] + 1)
    return [SEPARATOR.join(p[-n:]) for p, n in zip(parts, k)]


def short_name_map(paths: Mapping[K, Sequence[str]]) -> dict[K, str]:
    """``{key: short name}`` for a mapping of each node's key to its parts (see
    :func:`short_names`)."""
    keys = list(paths)
    return dict(zip(keys, short_names([paths[key] for key in keys])))
