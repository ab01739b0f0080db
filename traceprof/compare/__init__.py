"""A diff of two traces (or two jobs): each side's profile, the matching of nodes, what changed
inside each (:func:`~traceprof.compare.diff.diff`), and its flat records."""
