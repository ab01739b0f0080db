"""The result of an analysis: :class:`~traceprof.result.model.ModuleProfile` and its records
(memory, timeline), its flat records and dataframes, and the transforms that reshape it (depth,
top-k, sort, ignore)."""
