"""HTML page of a diff: one self-contained file with the base and new icicles side by side on one
scale, an icicle coloured by the change, and the largest changes with what changed inside them.

The frontend is index.js (its helpers) followed by diff.js, inlined into one module script
with the diff's JSON document embedded; nothing is loaded from the network (the same
Content-Security-Policy as the single-trace report).
"""

from __future__ import annotations

import html
import os

from .diff import register_diff
from .diff_records import DIFF_JSON_SCHEMA, _clean, diff_document
from .html import _FORBIDDEN_IN_SCRIPT, _content_security_policy, script_json, static_text

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
    code = static_text("index.js") + "\n" + static_text("diff.js")
    lowered = code.lower()
    for bad in _FORBIDDEN_IN_SCRIPT:
        if bad in lowered:
            raise RuntimeError(f"the diff frontend contains {bad!r}; it cannot be inlined")
    return (f"\n{code}\n"
            "const data = (id) => JSON.parse(document.getElementById(id).textContent);\n"
            "renderDiff(data('traceprof-diff'), data('traceprof-report'));\n")


def diff_html(diff) -> str:
    from .. import __version__

    doc = _clean(diff_document(diff))
    names = f"{os.path.basename(diff.base.path)} → {os.path.basename(diff.new.path)}"
    page = {"title": names,
            "footer": f"traceprof {__version__} · {DIFF_JSON_SCHEMA} · {diff.base.path} → "
                      f"{diff.new.path}"}
    script = diff_script()
    style = static_text("style.css") + _DIFF_STYLE
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{html.escape(_content_security_policy(script))}">
<meta name="generator" content="traceprof {html.escape(__version__)}">
<title>traceprof diff · {html.escape(names)}</title>
<style>
{style}</style>
</head>
<body class="tp-body">
<noscript><div class="tp-message">This page draws its charts with JavaScript; the diff is in the
element #traceprof-diff (traceprof's diff JSON document, docs/diff.md).</div></noscript>
<script type="application/json" id="traceprof-diff">{script_json(doc)}</script>
<script type="application/json" id="traceprof-report">{script_json(page)}</script>
<script type="module">{script}</script>
</body>
</html>
"""


@register_diff("html", (".html", ".htm"),
               "self-contained HTML page: base and new icicles on one scale, a Δ-coloured icicle")
def render_html(diff, opts) -> str:
    return diff_html(diff)
