"""HTML page of a diff: one self-contained file with the base and new icicles side by side on one
scale, an icicle coloured by the change, and the largest changes with what changed inside them.

The frontend is index.js (its helpers) followed by diff.js, inlined into one module script
with the diff's JSON document embedded; nothing is loaded from the network (the same
Content-Security-Policy as the single-trace report).
"""

from __future__ import annotations

import os

from traceprof.compare.records import DIFF_JSON_SCHEMA, _clean, diff_document
from traceprof.render.html import frontend_script, html_page

_DIFF_STYLE = """
.tp-diff-icicle { position: relative; margin-bottom: 12px; }
.tp-diff-cell { position: absolute; overflow: hidden; white-space: nowrap; font-size: 11px;
  line-height: 21px; padding-left: 2px; box-sizing: border-box; cursor: default; }
.tp-diff-summary div { font-family: monospace; margin: 2px 0; }
.tp-diff-warning { color: #b00; }
.tp-diff-table { border-collapse: collapse; font-size: 12px; }
.tp-diff-table td, .tp-diff-table th { border-bottom: 1px solid #ddd; padding: 2px 6px;
  text-align: left; }
.tp-diff-slower td:nth-child(5) { color: #b00; }
.tp-diff-faster td:nth-child(5) { color: #080; }
.tp-diff-noise td { color: #888; }
"""


def diff_script() -> str:
    return frontend_script(
        ("index.js", "diff.js"), "renderDiff(data('traceprof-diff'), data('traceprof-report'));\n"
    )


def diff_html(diff) -> str:
    from traceprof.version import __version__

    doc = _clean(diff_document(diff))
    names = f"{os.path.basename(diff.base.path)} → {os.path.basename(diff.new.path)}"
    page = {
        "title": names,
        "footer": f"traceprof {__version__} · {DIFF_JSON_SCHEMA} · {diff.base.path} → {diff.new.path}",
    }
    noscript = (
        "This page draws its charts with JavaScript; the diff is in the element "
        "#traceprof-diff (traceprof's diff JSON document, docs/diff.md)."
    )
    return html_page(
        f"diff · {names}",
        noscript,
        diff_script(),
        {"traceprof-diff": doc, "traceprof-report": page},
        extra_style=_DIFF_STYLE,
    )


def render_html(diff, opts) -> str:
    return diff_html(diff)
