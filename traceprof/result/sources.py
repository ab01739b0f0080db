"""Where a module tree comes from: :class:`Source`, the events its nodes were built from
(traceprof.analysis.hierarchy finds them; ``ModuleProfile.source`` keeps it). The JSON, the
Parquet metadata and the TensorBoard index write its value (``"traceprof"``)."""

from __future__ import annotations

import enum


class Source(str, enum.Enum):
    TRACEPROF = "traceprof"
    LIGHTNING = "lightning"
    NN_MODULE = "nn.Module"
    ANNOTATIONS = "annotations"
    NONE = "none"

    def __str__(self) -> str:
        """The value (``"traceprof"``), in text as in the outputs, on every Python version."""
        return self.value

    @property
    def description(self) -> str:
        """The events the source reads ("user annotations (record_function)")."""
        return _DESCRIPTIONS[self]

    @property
    def has_modules(self) -> bool:
        """Whether a tree from this source is made of modules (not of user annotations)."""
        return self not in _NOT_MODULES

    @property
    def named(self) -> bool:
        """Whether the tree's nodes carry the modules' qualified names (traceprof's and
        Lightning's scopes): two such trees match by name, whatever their sources."""
        return self in NAMED_SOURCES

    @property
    def nodes_description(self) -> str:
        """Where a tree's nodes come from, and, when they are not modules, that they are not
        (the profile's ``source_description``)."""
        return _DESCRIPTIONS[self] + (f", {_NOT_MODULES[self]}" if self in _NOT_MODULES else "")


#: sources whose nodes have the modules' qualified names (:attr:`Source.named`)
NAMED_SOURCES: tuple[Source, ...] = (Source.TRACEPROF, Source.LIGHTNING)

_DESCRIPTIONS = {
    Source.TRACEPROF: "traceprof module scopes",
    Source.LIGHTNING: "PyTorch Lightning [pl][module] scopes",
    Source.NN_MODULE: "python_function nn.Module events (with_stack=True)",
    Source.ANNOTATIONS: "user annotations (record_function)",
    Source.NONE: "no module or user annotation events in the trace",
}
#: what the nodes of a tree of each source are when they are not modules (the header says it)
_NOT_MODULES = {
    Source.ANNOTATIONS: "not modules: the trace has no module events",
}
