"""Short display names of modules: the shortest tail of each qualified name that tells it apart.

A qualified name is the full path from the root: an attribute path from traceprof's module
table (``encoder.layer.3.attention.self``) or, on a ``with_stack`` trace, the path of scope
names (``BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_3``). Views that name a module
outside a tree (a diff's rows, a job's stragglers, a heat map's rows, the ``--ops`` heading) show
:func:`short_names`: the last part, or as many trailing parts as it takes for no two *different*
names of the set to look the same (``layer.3.attention.self`` and ``layer.4.attention.self``),
never starting at an index (``h.2``, not ``2``).
Trees show :func:`last_part`, since the indentation already gives the path. The full name stays
one hover (HTML ``title``) or one column (``qualified_name``) away, and every data format keeps
it unchanged: short names are for reading only, never a key.
"""

from __future__ import annotations

from collections.abc import Sequence

#: what separates the parts of a qualified name
SEPARATOR = "."


def last_part(qualified_name: str) -> str:
    """The name's last part (``"attention.self"`` → ``"self"``); the name when it has one."""
    return qualified_name.rsplit(SEPARATOR, 1)[-1]


def _tail(parts: list[str], k: int) -> str:
    return SEPARATOR.join(parts[-k:])


def _widened(parts: list[str], k: int) -> int:
    """``k``, or more parts while the tail would start with an index (``h.2``, not ``2``: the
    number alone does not say what it counts)."""
    while k < len(parts) and parts[-k].isdigit():
        k += 1
    return k


def short_names(qualified_names: Sequence[str]) -> list[str]:
    """For each name, its shortest tail of whole parts that no other distinct name in
    ``qualified_names`` shares (equal names get equal short names); order kept. A tail never
    starts with an index (``h.2.mlp``, not ``2.mlp``). A name that is another's tail in full
    (``self`` beside ``attention.self``) is kept whole."""
    parts = [q.split(SEPARATOR) for q in qualified_names]
    k = [_widened(p, 1) for p in parts]
    pending = list(range(len(parts)))
    while pending:
        owners: dict[str, set[str]] = {}
        for i in range(len(parts)):
            owners.setdefault(_tail(parts[i], k[i]), set()).add(qualified_names[i])
        pending = [i for i in pending if len(owners[_tail(parts[i], k[i])]) > 1 and k[i] < len(parts[i])]
        for i in pending:
            k[i] = _widened(parts[i], k[i] + 1)
    return [_tail(p, n) for p, n in zip(parts, k)]


def short_name_map(qualified_names: Sequence[str]) -> dict[str, str]:
    """``{qualified name: short name}`` over the distinct names given (see :func:`short_names`)."""
    distinct = list(dict.fromkeys(qualified_names))
    return dict(zip(distinct, short_names(distinct)))
