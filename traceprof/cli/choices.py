"""The names the command line's options accept and list in their help, importable without the
tables they come from: ``traceprof --help``, ``--version`` and a usage error import click and
the command line only, not numpy, msgspec, the renderers or the analysis (docs/performance.md
"Start-up"). Each tuple is a copy of a table kept elsewhere, named beside it;
``tests/test_cli.py`` holds each copy to its table, so a new format, column, sort key or
hierarchy source fails the tests until it is named here too."""

from __future__ import annotations

#: ``analyze --format``: the names of ``traceprof.render.REGISTRY`` (and of ``JOB_REGISTRY``,
#: which has the same ones), sorted
FORMATS = ("csv", "html", "json", "parquet", "table", "tree")
#: ``diff --format``: the names of ``traceprof.render.diff.DIFF_REGISTRY``, sorted
DIFF_FORMATS = ("csv", "html", "json", "parquet", "tree")
#: ``analyze --columns``: the columns of ``traceprof.render.table.COLUMNS``, in its order
TABLE_COLUMNS = (
    "input",
    "output",
    "params",
    "params_percent",
    "kernel",
    "weight_shape",
    "mult_adds",
    "macs",
    "flops",
    "flop_rate",
    "mfu",
    "fwd",
    "bwd",
    "other",
    "activations",
    "share",
    "kernels",
    "calls",
    "trainable",
    "name",
)
#: the table's columns without ``--columns`` (``traceprof.render.table.DEFAULT_COLUMNS``): all
#: but those shown only when asked for (their ``Column.by_default`` is False)
DEFAULT_TABLE_COLUMNS = tuple(
    c for c in TABLE_COLUMNS if c not in ("weight_shape", "flops", "flop_rate", "calls", "trainable", "name")
)
#: ``--sort``: the values of ``traceprof.result.transforms.SortKey``, in its order
SORT_KEYS = ("order", "gpu", "fwd", "bwd", "other", "cpu", "kernels", "calls", "flops", "name")
#: ``--hierarchy``: auto, then the values of ``traceprof.analysis.hierarchy.Source`` but NONE
SOURCES = ("auto", "traceprof", "lightning", "nn.Module", "annotations")
#: the variable that moves or turns off the cache (``traceprof.read.cache.DIR_ENV``)
CACHE_DIR_ENV = "TRACEPROF_CACHE"
