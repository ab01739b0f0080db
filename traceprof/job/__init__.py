"""A distributed job: the traces of its ranks analyzed one by one by an engine and reduced into
one result per module x rank x pass (:func:`~traceprof.job.analyze.analyze_job`), and its flat
records."""
