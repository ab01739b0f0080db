"""Reading trace files: opening, gzip, memory limits, cutting the text into runs of events,
decoding them (in parallel for large traces) into columns, and building the
:class:`~traceprof.trace.columns.Trace` (:func:`~traceprof.read.build.load_trace`)."""
