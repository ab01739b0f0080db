"""The diff of two traces (:class:`DiffProfile`): both sides' summaries (:class:`SideSummary`),
the nodes in display order, and the questions asked of it (where the step's change went, the
modules that changed most, whether the new run is slower than allowed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec

from traceprof.compare.nodes import DiffNode
from traceprof.compare.shape import DEFAULT_SORT, shape_diff
from traceprof.errors import ModuleLookupError, OptionError
from traceprof.result.metric import TimeMetric
from traceprof.result.model import NodeKind, did_you_mean, find_named, pre_order

if TYPE_CHECKING:
    from traceprof.result.shaping import SortKey


class SideSummary(msgspec.Struct, frozen=True):
    path: str
    device: str  # "CPU" or the GPU's name
    has_gpu: bool
    source: str  # hierarchy source
    steps: tuple[int, ...]
    wall_us: float  # mean step wall time
    time_us: float  # mean step GPU busy time (CPU time on CPU-only traces)
    wall_spread_us: float | None
    modules_us: float  # the module roots' time
    outside_us: float  # the "(not in any module)" bucket's time, and compiled roots' (no module)
    collectives_us: float  # collective kernels (NCCL, RCCL), inside modules or not
    collectives_outside_us: float = 0.0  # those of them in the bucket
    #: the trace's complete steps (what ``steps`` are without a step asked for)
    complete_steps: tuple[int, ...] = ()
    #: memory (ModuleProfile.memory_summary): the device, the whole forward's activations per
    #: step, the step's peak and its categories ((name, bytes), result.memory's order); None and
    #: () when the trace has no [memory] events or lifetimes
    memory_device: str | None = None
    activation_bytes: float | None = None
    peak_bytes: float | None = None
    peak_categories: tuple[tuple[str, float | None], ...] = ()

    @property
    def step_alone(self) -> bool:
        """One step asked for (``diff(step=N)``) out of several complete steps: no spread."""
        return len(self.steps) == 1 and len(self.complete_steps) > 1

    @property
    def idle_us(self) -> float:
        """Wall time of the step the GPU was not busy (on CPU-only traces: wall minus CPU)."""
        return self.wall_us - self.time_us


class DiffProfile(msgspec.Struct, frozen=True):
    """The diff of two traces: nodes in display order (siblings by |Δ|, largest first)."""

    base: SideSummary
    new: SideSummary
    metric: TimeMetric
    matched_by: str  # "qualified name" or "class path"
    nodes: tuple[DiffNode, ...]
    roots: tuple[int, ...]
    warnings: tuple[str, ...]
    #: the diff before :meth:`shaped` (None: this is it): what "most changed" ranks
    full: DiffProfile | None = None
    #: shaped by a depth or a top-N: the text tree is an overview (docs/diff.md "Shaping")
    overview: bool = False

    def shaped(
        self,
        *,
        depth: int | None = None,
        top: int | None = None,
        sort: SortKey | str = DEFAULT_SORT,
        ignore: tuple[str, ...] | list[str] = (),
    ) -> DiffProfile:
        """The diff shaped as ``traceprof analyze`` shapes a profile (docs/diff.md "Shaping"):
        siblings ordered by ``sort`` (the size of the change of a
        :class:`~traceprof.result.transforms.SortKey`'s quantity, largest first; ``"order"``:
        as the modules first ran), the ``top`` largest children of each node kept and the rest
        folded into one ``(k more)`` node, nodes down to ``depth`` (0: the roots), modules
        matching an ``ignore`` pattern (fnmatch on class or qualified name) hidden. Every
        number shown stays as it is: a hidden node's change stays in its parent's."""
        return shape_diff(self, depth=depth, top=top, sort=sort, ignore=ignore)

    def most_changed(self) -> list[tuple[DiffNode, float]]:
        """The modules by |Δ of their own time| and that Δ (:meth:`ranked`), over every module of
        the diff, also those a :meth:`shaped` diff does not show."""
        whole = self.full or self
        return [(n, whole.own_delta_us(n)) for n in whole.ranked()]

    @property
    def wall_delta_us(self) -> float:
        return self.new.wall_us - self.base.wall_us

    @property
    def wall_delta_ratio(self) -> float | None:
        return self.wall_delta_us / self.base.wall_us if self.base.wall_us > 0 else None

    @property
    def wall_spread_us(self) -> float | None:
        s = [x for x in (self.base.wall_spread_us, self.new.wall_spread_us) if x is not None]
        return max(s) if s else None

    def where(self) -> tuple[tuple[str, float], ...]:
        """Where the step's difference went: modules and outside modules (each without its
        collective kernels), collectives, idle; they add up to the step's wall-time Δ."""
        b, n = self.base, self.new

        def inside(s: SideSummary) -> float:
            return s.collectives_us - s.collectives_outside_us

        parts = (
            ("modules", (n.modules_us - inside(n)) - (b.modules_us - inside(b))),
            (
                "outside modules",
                (n.outside_us - n.collectives_outside_us) - (b.outside_us - b.collectives_outside_us),
            ),
            ("collectives", n.collectives_us - b.collectives_us),
            ("idle", n.idle_us - b.idle_us),
        )
        return tuple((k, v if abs(v) >= 0.001 else 0.0) for k, v in parts)  # float rounding

    def walk(self, start: int | None = None) -> Iterator[DiffNode]:
        """Nodes in pre-order, as :meth:`ModuleProfile.walk
        <traceprof.result.model.ModuleProfile.walk>` walks a profile's."""
        return pre_order(self.nodes, self.roots, start)

    def find(self, name: str) -> DiffNode:
        """A node by qualified name (either side's) or key, else as
        :meth:`ModuleProfile.find <traceprof.result.model.ModuleProfile.find>` looks: a class
        or short name, then a part of one. Raises ``ModuleLookupError`` (a KeyError) with
        close matches."""
        return find_named(self.nodes, name, "either trace", keys=lambda n: (n.key,))

    def __repr__(self) -> str:
        from traceprof.render.notebook import diff_repr  # presentation lives in render/

        return diff_repr(self)

    def _repr_html_(self) -> str:
        """The step's change, the largest changes and an icicle, for Jupyter (docs/notebooks.md)."""
        from traceprof.render.notebook import diff_html

        return diff_html(self)

    def modules(self) -> list[DiffNode]:
        return [n for n in self.nodes if n.kind is NodeKind.MODULE]

    def own_delta_us(self, node: DiffNode) -> float:
        """``node``'s Δ without its children's: the change in its own work."""
        return node.delta_us - sum(self.nodes[c].delta_us for c in node.children)

    def ranked(self) -> list[DiffNode]:
        """Module nodes by |Δ of their own time| (without their children's), largest first:
        where the change is, rather than every ancestor that contains it."""
        return sorted(self.modules(), key=lambda n: (-abs(self.own_delta_us(n)), n.id))

    def slower(self, percent: float, module: str | None = None) -> str | None:
        """A one-line reason when the new run is slower than the base by more than ``percent``
        % (the step's wall time, or ``module``'s time over all passes), else None."""
        if module is None:
            base, new, what = self.base.wall_us, self.new.wall_us, "the step"
        else:
            try:
                node = self.find(module)
            except ModuleLookupError as e:
                if e.matches:  # several modules answer the name: the error names them
                    raise
                raise OptionError(
                    f"module {module!r} is in neither trace{did_you_mean(e.suggestions)}"
                ) from None
            base, new, what = node.base_us, node.new_us, f"module {module}"
        from traceprof import units

        if base <= 0:
            if new <= 0:
                return None
            return f"{what} takes {units.duration(new)} in the new run, 0 before"
        ratio = (new - base) / base
        if ratio * 100 > percent:
            return (
                f"{what} is {units.percent(ratio)} slower ({units.duration(base)} -> "
                f"{units.duration(new)} per step), more than {percent:g}%"
            )
        return None

    def rows(self) -> list[dict]:
        from traceprof.compare.records import diff_rows

        return diff_rows(self)

    def to_dataframe(self):
        """One row per node and pass, sorted by |Δ| (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows())
