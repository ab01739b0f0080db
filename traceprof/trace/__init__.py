"""What a trace is once read: the raw Kineto spellings (:mod:`~traceprof.trace.schema`, the only
place that names them), the columnar :class:`~traceprof.trace.columns.Trace`, and the hardware
tables (:mod:`~traceprof.trace.hardware`)."""
