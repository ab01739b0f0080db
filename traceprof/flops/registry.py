"""The registry of FLOP and byte formulas, keyed by op name as traces spell it (``aten::mm``).

Three kinds of entries:

- a **formula**: a function ``OpArgs -> OpCost`` for one op or a family of ops. An op with a
  formula is counted, and ops running inside it are not (see :mod:`traceprof.analysis.op_costs`);
  a formula registered as ``composite`` (``aten::lstm``, ``aten::gru_cell``: ops that run other
  ops) is a fallback, counted only when nothing inside the op is counted;
- **no cost** (zero FLOPs by definition): ops that compute nothing themselves (views,
  metadata, predicates, allocation, wrappers such as ``aten::to`` whose copy is done by an
  ``aten::copy_`` inside, communication). They are never unsupported; ops inside them are still
  looked at;
- not registered: an op traceprof has no formula for. It is listed as unsupported, with its
  count and share of time, unless ops inside it explain its time (see :mod:`.count`).

Each formula belongs to a :class:`Family`, so that a registry can be narrowed to some families
(``registry.only(Family.MATMUL)``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator

import msgspec

from traceprof.flops.shapes import OpArgs, OpCost

Formula = Callable[[OpArgs], OpCost]


class Family(str, enum.Enum):
    MATMUL = "matmul"
    CONV = "conv"
    ATTENTION = "attention"
    NORM = "norm"
    SOFTMAX = "softmax"
    ACTIVATION = "activation"
    POINTWISE = "pointwise"
    REDUCTION = "reduction"
    EMBEDDING = "embedding"
    LOSS = "loss"
    POOLING = "pooling"
    OPTIMIZER = "optimizer"
    RNN = "rnn"  # LSTM, GRU and Elman RNN layers and cells
    SORTING = "sorting"  # selection by value and sorting: topk, sort, median... (comparisons)
    MEMORY = "memory"  # copies, fills, gathers, selection by index or mask: bytes, no FLOPs
    NO_COST = "no cost"  # views, allocation, wrappers, communication


#: family codes (the position of each family), for per-op arrays
FAMILIES: tuple[Family, ...] = tuple(Family)
#: op families whose FLOPs run on matrix units (tensor cores) and that
#: torch.utils.flop_counter.FlopCounterMode counts
MATRIX_FAMILIES = frozenset({Family.MATMUL, Family.CONV, Family.ATTENTION})


class Entry(msgspec.Struct, frozen=True):
    name: str
    family: Family
    formula: Formula | None  # None: no cost of its own
    composite: bool = False  # counted only when no op inside it is counted

    @property
    def has_cost(self) -> bool:
        return self.formula is not None


class Registry:
    """Op name -> :class:`Entry`. Namespaces (``c10d``) can be marked as having no cost."""

    def __init__(
        self,
        entries: Iterable[Entry] = (),
        free_namespaces: Iterable[str] = (),
        free_prefixes: Iterable[str] = (),
    ) -> None:
        self._entries: dict[str, Entry] = {e.name: e for e in entries}
        self._free_namespaces = set(free_namespaces)
        self._free_prefixes = tuple(free_prefixes)

    # --- building

    def formula(self, *names: str, family: Family, composite: bool = False) -> Callable[[Formula], Formula]:
        """Decorator: register ``fn`` as the formula of every op in ``names``. ``composite``:
        the ops run other ops that do the work (``aten::lstm`` runs ``aten::mkldnn_rnn_layer``
        or linear layers); the formula counts only when nothing inside the op is counted."""

        def register(fn: Formula) -> Formula:
            for name in names:
                if name in self._entries:
                    raise ValueError(f"{name} is registered twice")
                self._entries[name] = Entry(name, family, fn, composite)
            return fn

        return register

    def no_cost(self, *names: str) -> None:
        for name in names:
            if name in self._entries:
                raise ValueError(f"{name} is registered twice")
            self._entries[name] = Entry(name, Family.NO_COST, None)

    def no_cost_namespace(self, *namespaces: str) -> None:
        """Every op ``<namespace>::...`` has no cost (communication libraries)."""
        self._free_namespaces.update(namespaces)

    def no_cost_prefix(self, *prefixes: str) -> None:
        """Events whose name starts with a prefix have no cost (``nccl:`` scopes)."""
        self._free_prefixes = self._free_prefixes + tuple(prefixes)

    # --- queries

    def get(self, name: str) -> Entry | None:
        entry = self._entries.get(name)
        if entry is not None:
            return entry
        if self._free_namespaces and name.split("::", 1)[0] in self._free_namespaces and "::" in name:
            return Entry(name, Family.NO_COST, None)
        if self._free_prefixes and name.startswith(self._free_prefixes):
            return Entry(name, Family.NO_COST, None)
        return None

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def combined(cls, *tables: Registry) -> Registry:
        """One registry holding the entries of ``tables``, in their order; an op in two tables
        is an error, as it is within one."""
        out = cls()
        for table in tables:
            for entry in table:
                if entry.name in out._entries:
                    raise ValueError(f"{entry.name} is registered twice")
                out._entries[entry.name] = entry
            out._free_namespaces.update(table._free_namespaces)
            out._free_prefixes += table._free_prefixes
        return out

    def only(self, *families: Family) -> Registry:
        """A registry with the formulas of ``families`` and every no-cost entry."""
        keep = set(families) | {Family.NO_COST}
        return Registry(
            (e for e in self._entries.values() if e.family in keep),
            self._free_namespaces,
            self._free_prefixes,
        )
