"""The runs of compiled graphs in a trace matched to the compiled-kernel table: which graph each
run (a ``## Call CompiledFxGraph <key> ##`` scope) ran, and which call site of it each of the
run's direct children (its kernel calls) is. A run whose key is ``None`` (the FX graph cache
bypassed) is found by its kernels' ``graph_<id>_`` prefix and its direction, else by its region's
compile id. The children are matched to the call sites in order: numpy where they follow the
sites one to one, else walked (:func:`walk`)."""

from __future__ import annotations

import bisect

import numpy as np

from traceprof.analysis.link import Links
from traceprof.trace import schema
from traceprof.trace.columns import Trace
from traceprof.trace.model import CompiledTable

#: site codes: a site whose event the table does not know, one whose event is not in the trace
_ANY, _ABSENT = -1, -2


class GraphRuns:
    """The runs of a trace (their scope events, ascending) and the table's graphs, in order."""

    def __init__(
        self,
        trace: Trace,
        links: Links,
        table: CompiledTable,
        keys: list[str | None],
        is_call: np.ndarray,
        runs: np.ndarray,
    ) -> None:
        self.trace, self.links = trace, links
        self.keys, self.is_call, self.runs = keys, is_call, runs
        self.graph_keys = tuple(table.graphs)
        self.graphs = [table.graphs[k] for k in self.graph_keys]

    def children(self) -> tuple[np.ndarray, np.ndarray]:
        """The direct children of every run, by run then time, and the run of each."""
        ev, parent = self.trace.events, self.links.parent
        child = np.flatnonzero((parent >= 0) & (self.links.depth >= 0))
        child = child[self.is_call[parent[child]]]
        child = child[np.lexsort((ev.ts[child], parent[child]))]
        return child, parent[child]

    def graphs_of_runs(
        self, children: np.ndarray, run_of_child: np.ndarray, backward: np.ndarray
    ) -> np.ndarray:
        """Each run's graph (its position in graph_keys; -1: not in the table)."""
        ev = self.trace.events
        position = {k: i for i, k in enumerate(self.graph_keys)}
        by_key = {g.key: i for i, g in enumerate(self.graphs) if g.key is not None}
        codes = ev.name[self.runs]
        out = np.full(len(self.runs), -1, np.int64)
        nokey: list[int] = []
        for code in np.unique(codes).tolist():
            key = self.keys[code]
            at = codes == code
            if key == schema.COMPILED_CALL_NO_KEY:
                nokey.extend(np.flatnonzero(at).tolist())
            elif key is not None:
                out[at] = position.get(key, by_key.get(key, -1))
        if nokey:
            out[nokey] = self._graphs_without_key(np.array(nokey), children, run_of_child, backward)
        return out

    def _graphs_without_key(
        self, runs_at: np.ndarray, children: np.ndarray, run_of_child: np.ndarray, backward: np.ndarray
    ) -> np.ndarray:
        """Graphs of runs named ``None``: by the ``graph_<id>_`` prefix of their kernel events
        and their direction, else by their region's compile id."""
        ev, links = self.trace.events, self.links
        prefix_of = [m.group(0) if (m := schema.COMPILED_KERNEL_PREFIX_RE.match(s)) else "" for s in ev.names]
        # the prefixes of each run's children
        run_pos = np.searchsorted(self.runs, run_of_child)
        want = np.zeros(len(self.runs), bool)
        want[runs_at] = True
        pairs = distinct(np.stack([run_pos, ev.name[children]], axis=1)[want[run_pos]])[0]
        prefixes: dict[int, set[str]] = {}
        for r, code in pairs.tolist():
            if prefix_of[code]:
                prefixes.setdefault(r, set()).add(prefix_of[code])
        # the compile id of each run's region: around the run, or around its forward's run
        is_region = ev.named(lambda s: s.startswith(schema.COMPILED_REGION_PREFIX))
        region = links.nearest(is_region)
        scope = self.runs[runs_at].astype(np.int64)
        fwd = links.forward_op[np.maximum(links.backward_node[scope], 0)]
        scope = np.where(backward[runs_at] & (links.backward_node[scope] >= 0) & (fwd >= 0), fwd, scope)
        compile_ids = [
            ev.names[ev.name[r]][len(schema.COMPILED_REGION_PREFIX) :] if r >= 0 else None
            for r in region[scope].tolist()
        ]
        candidates = [i for i, g in enumerate(self.graphs) if g.key is None]
        out = np.full(len(runs_at), -1, np.int64)
        for k, r in enumerate(runs_at.tolist()):
            is_bwd = bool(backward[r])
            same = [
                i
                for i in candidates
                if (self.graphs[i].direction == schema.COMPILED_BACKWARD_DIRECTION) == is_bwd
            ]
            by_prefix = [i for i in same if prefixes.get(r, set()) & set(self.graphs[i].event_prefixes)]
            if len(by_prefix) == 1:
                out[k] = by_prefix[0]
                continue
            by_region = [i for i in same if compile_ids[k] in self.graphs[i].compile_ids]
            if len(by_region) == 1:
                out[k] = by_region[0]
        return out

    def match(
        self, children: np.ndarray, run_of_child: np.ndarray, run_graph: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Whether each child matched a call site of its run's graph, and which (its index)."""
        ev = self.trace.events
        code_of = {s: i for i, s in enumerate(ev.names)}
        matched = np.zeros(len(children), bool)
        site_of = np.full(len(children), -1, np.int64)
        run_pos = np.searchsorted(self.runs, run_of_child)
        start = np.searchsorted(run_of_child, self.runs, side="left")
        count = np.searchsorted(run_of_child, self.runs, side="right") - start
        pos = np.arange(len(children)) - start[run_pos]
        names = ev.name[children].astype(np.int64)
        for g in np.unique(run_graph[run_graph >= 0]).tolist():
            calls = self.graphs[g].calls
            sites = np.array(
                [_ANY if c.event is None else code_of.get(c.event, _ABSENT) for c in calls] or [_ABSENT],
                np.int64,
            )
            of_g = np.flatnonzero(run_graph == g)
            # fast: runs whose children follow the call sites one to one
            whole = of_g[count[of_g] == len(calls)]
            mine = np.zeros(len(self.runs), bool)
            mine[whole] = True
            rows = np.flatnonzero(mine[run_pos])
            expected = sites[np.minimum(pos[rows], len(sites) - 1)]
            ok = (expected == names[rows]) | (expected == _ANY)
            bad_runs = np.zeros(len(self.runs), bool)
            bad_runs[run_pos[rows[~ok]]] = True
            good = rows[~bad_runs[run_pos[rows]]]
            matched[good] = True
            site_of[good] = pos[good]
            # the others: walked in order
            rest = np.setdiff1d(of_g, whole[~bad_runs[whole]])
            for r in rest.tolist():
                lo = int(start[r])
                names_r = names[lo : lo + int(count[r])].tolist()
                for j, k in enumerate(walk(names_r, sites.tolist()[: len(calls)])):
                    if k >= 0:
                        matched[lo + j] = True
                        site_of[lo + j] = k
        return matched, site_of


def walk(names: list[int], sites: list[int]) -> list[int]:
    """The call site each child takes, walking both in order: the next site with the child's
    name, else the next site if its event is not known; the previous child's site again for a
    repeat of its event that the next site does not have; -1: none. The sites of each name are
    looked up by bisection, so that children matching no site cost ``log`` of the sites each,
    not a scan of the rest (N children against N sites: N log N, not N**2)."""
    positions: dict[int, list[int]] = {}
    for j, site in enumerate(sites):
        positions.setdefault(site, []).append(j)
    out: list[int] = []
    at = 0
    for name in names:
        found = -1
        if out and out[-1] >= 0 and sites[out[-1]] == name and (at >= len(sites) or sites[at] != name):
            # the same event again, and the next site is another: one call that leaves its event
            # more than once (a GEMM template calls its micro-kernel, which records itself, once
            # per block)
            out.append(out[-1])
            continue
        of_name = positions.get(name)
        if of_name:
            k = bisect.bisect_left(of_name, at)
            if k < len(of_name):
                found = of_name[k]
        if found < 0 and at < len(sites) and sites[at] == _ANY:
            found = at
        if found >= 0:
            at = found + 1
        out.append(found)
    return out


def distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct rows, the first position of each, and the distinct row of each row."""
    if not len(rows):
        return (
            rows.reshape(0, rows.shape[1] if rows.ndim == 2 else 0),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    uniq, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return uniq, first, inverse.ravel()
