"""The analysis of one trace, stage by stage: links between events, the module tree, FLOPs and
bytes of the ops, attribution of GPU work, CPU time, memory and ops to module nodes and passes,
and the step timelines. The result is a :class:`~traceprof.result.model.ModuleProfile`."""
