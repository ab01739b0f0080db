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
from traceprof.result.names import Parts, own_parts, short_name_map

_DIFF_STYLE = """
.tp-diff-pair { display: flex; gap: 16px; align-items: flex-start; margin-bottom: 12px; }
.tp-diff-icicle { position: relative; margin-bottom: 4px; }
.tp-diff-cell { position: absolute; overflow: hidden; white-space: nowrap; font-size: 11px;
  line-height: 21px; padding-left: 4px; box-sizing: border-box; cursor: pointer; border-radius: 2px;
  color: #212121; }
.tp-diff-cell:hover { filter: brightness(0.92); }
.tp-diff-change-head { gap: 6px; }
.tp-diff-key { display: inline-block; width: 12px; height: 10px; border-radius: 2px; margin-left: 8px; }
.tp-diff-table td { vertical-align: top; }
.tp-ops td.tp-diff-node { font-weight: 500; white-space: normal; overflow-wrap: anywhere; min-width: 120px; }
.tp-diff-table-wrap { max-height: none; }
.tp-ops td.tp-diff-inside { white-space: normal; width: 50%; color: #424242; font-size: 12px; }
.tp-diff-inside-item { margin-right: 12px; overflow-wrap: anywhere; }
.tp-diff-inside-item span { white-space: nowrap; }
.tp-diff-noise td, .tp-diff-noise td span { color: #9e9e9e; }
.tp-diff-same { color: #757575; }
"""


def diff_script() -> str:
    return frontend_script(
        ("index.js", "diff.js"), "renderDiff(data('traceprof-diff'), data('traceprof-report'));\n"
    )


def diff_short_names(diff) -> dict[str, str]:
    """Short display names of the diff's nodes by key (traceprof.result.names), told apart among
    every node of the whole diff (also those a shaped diff does not show: at ``--top 1``
    ``h.2.mlp.c_fc`` is not ``c_fc``) and the shaped diff's own ``(k more)`` rows."""
    paths: dict[str, Parts] = {}
    for tree in (diff.full, diff) if diff.full is not None else (diff,):
        for node in tree.walk():  # parents first
            if node.key in paths:
                continue
            parent = tree.nodes[node.parent] if node.parent >= 0 else None
            above = paths[parent.key] if parent is not None else ()
            up = parent.qualified_name if parent is not None else None
            paths[node.key] = above + own_parts(node.name, node.qualified_name, up)
    return short_name_map(paths)


def diff_html(diff) -> bytes:
    from traceprof.version import __version__

    doc = _clean(diff_document(diff))
    names = f"{os.path.basename(diff.base.path)} → {os.path.basename(diff.new.path)}"
    page = {
        "title": names,
        "footer": f"traceprof {__version__} · {DIFF_JSON_SCHEMA} · {diff.base.path} → {diff.new.path}",
        # the rows' names, by node key: computed over the whole diff, not the rows a page shows
        "short_names": diff_short_names(diff),
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


def render_html(diff, opts) -> bytes:
    return diff_html(diff)
