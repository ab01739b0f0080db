"""A job as plain records: the tidy table (one row per module x rank x pass), the per-rank step
summary, the per-module statistics, and the JSON document that holds them all
(docs/jobs.md). Numbers only; nothing is formatted here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import asdict

from traceprof.job.modules import spread_of
from traceprof.result.model import PASSES
from traceprof.result.records import profile_document

if TYPE_CHECKING:  # Job imports this module when its rows are asked for
    from traceprof.job.model import Job
    from traceprof.job.modules import JobModule, Spread

JOB_SCHEMA = "traceprof.job/2"
#: the quantities of a node in the tidy rows, per pass
ROW_FIELDS = ("gpu_busy_us", "gpu_work_us", "cpu_us", "kernels", "flops", "macs")
ROW_COLUMNS = (
    "module",
    "qualified_name",
    "name",
    "class_name",
    "kind",
    "depth",
    "rank",
    "pass",
    "calls",
    *ROW_FIELDS,
    *(f"own_{f}" for f in ROW_FIELDS),
)
#: the rows' column types where their values do not give them (pandas' names: to_dataframe's
#: and the Parquet file's; text columns take pandas' default text type)
ROW_TYPES = {
    "depth": "int64",
    "rank": "int64",
    "calls": "float64",
    **dict.fromkeys(ROW_FIELDS, "float64"),
    **{f"own_{f}": "float64" for f in ROW_FIELDS},
}


def module_id(m: JobModule) -> str:
    """A module's key in the rows: its qualified name where the tree is made of qualified names
    (traceprof scopes, Lightning; the root: its class), else its path joined by '/' (the
    bucket's groups under '(not in any module)')."""
    if m.key and m.key[0] != "\0bucket" and m.key[-1] == m.qualified_name:
        if m.qualified_name and all(m.qualified_name.startswith(k) for k in m.key):
            return m.qualified_name
        if not m.qualified_name and len(m.key) == 1:
            return m.class_name or "(root)"
    return _path_id(m.key)


def _path_id(key) -> str:
    return "/".join(p for p in key if p != "\0bucket")


def _identity(m: JobModule) -> dict:
    """The fields that name a module in the records: its id, names, kind and depth."""
    return {
        "module": module_id(m),
        "qualified_name": m.qualified_name,
        "name": m.name,
        "class_name": m.class_name,
        "kind": m.kind.value,
        "depth": m.depth,
    }


def job_rows(job: Job) -> list[dict]:
    rows = []
    for m in job.modules:
        identity = _identity(m)
        for rank in sorted(m.nodes):
            node = m.nodes[rank]
            for p in PASSES:
                phase = node.phase(p)
                rows.append(
                    {
                        **identity,
                        "rank": rank,
                        "pass": p.value,
                        "calls": float(node.calls),
                        **{f: float(getattr(phase.total, f)) for f in ROW_FIELDS},
                        **{f"own_{f}": float(getattr(phase.own, f)) for f in ROW_FIELDS},
                    }
                )
    return rows


def job_dataframe(job: Job):
    import pandas as pd

    rows = job_rows(job)
    frame = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    return frame.astype(ROW_TYPES)


def _spread(s: Spread | None) -> dict | None:
    return asdict(s) if s is not None else None


def rank_records(job: Job) -> list[dict]:
    out = []
    for jr in job.ranks:
        sel = jr.profile.selection
        out.append(
            {
                "rank": jr.rank,
                "path": jr.path,
                "step": {k: v for k, v in asdict(jr.selected).items() if k != "step"}
                | {"cpu_compute_us": jr.cpu_compute_us},
                "steps": [asdict(t) for t in jr.timeline],
                "gpu_busy_us": sel.gpu_busy_us,
                "cpu_us": sel.cpu_us,
                "wall_us": sel.wall_us,
                "kernels": sel.kernels,
                "flops": sel.flops,
                "straggler": any(s.rank == jr.rank for s in job.stragglers),
                # why its modules' times add up to more than its step's wall time (None: they do not)
                "over_wall": jr.profile.over_wall(),
                # the allocator's peak on its memory device (None: no [memory] events)
                "memory_device": jr.profile.memory_device,
                "memory_peak_bytes": jr.memory_peak_bytes,
                "activation_bytes": jr.profile.memory_summary.activation_bytes
                if jr.profile.memory_summary is not None
                else None,
            }
        )
    return out


def module_records(job: Job) -> list[dict]:
    out = []
    for m in job.modules:
        rec = {
            **_identity(m),
            "parent": module_id_of(job, m.parent),
            "ranks": sorted(m.nodes),
            "total": _spread(m.spread(job.metric)),
            "times": {str(r): v for r, v in m.times(job.metric).items()},
        }
        for p in PASSES:
            rec[p.value] = _spread(m.spread(job.metric, p))
        rec["kernels"] = _spread(m.spread("kernels"))
        rec["flops"] = _spread(m.spread("flops"))
        out.append(rec)
    return out


def module_id_of(job: Job, key) -> str | None:
    if key is None:
        return None
    for m in job.modules:
        if m.key == key:
            return module_id(m)
    return _path_id(key)


def step_spreads(job: Job) -> dict:
    names = (
        "wall_us",
        "gpu_busy_us",
        "compute_us",
        "collective_us",
        "collective_exposed_us",
        "idle_us",
        "cpu_compute_us",
    )
    return {n: _spread(spread_of({r.rank: r.step_time(n) for r in job.ranks})) for n in names}


def job_document(job: Job, with_profiles: bool = False) -> dict:
    doc = {
        "schema": JOB_SCHEMA,
        "world_size": job.world_size,
        "ranks_given": list(job.rank_numbers),
        "missing_ranks": list(job.missing_ranks),
        "steps": list(job.steps),
        "metric": job.metric.value,
        "step_metric": job.step_metric.value,
        "straggler_threshold": job.straggler_threshold,
        "engine": job.engine,
        "warnings": list(job.warnings),
        "step_spread": step_spreads(job),
        "stragglers": [
            {
                "rank": s.rank,
                "step_us": s.step_us,
                "reference": s.reference,
                "reference_us": s.reference_us,
                "excess_us": s.excess_us,
                "excess_fraction": s.excess_fraction,
                "modules": [
                    {"module": module_id(m), "qualified_name": m.qualified_name, "excess_us": e}
                    for m, e in s.modules
                ],
                "reference_ranks": list(s.reference_ranks),
                "other_modules_us": s.other_modules_us,
                "unexplained_us": s.unexplained_us,
            }
            for s in job.stragglers
        ],
        "ranks": rank_records(job),
        "modules": module_records(job),
    }
    if with_profiles:
        doc["profiles"] = {str(r.rank): profile_document(r.profile) for r in job.ranks}
    return doc
