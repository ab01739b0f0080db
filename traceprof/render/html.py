"""HTML report: one self-contained page with the module tree as an icicle chart (the passes,
forward, backward and other, side by side), the ops and kernels of the selected module, the
timeline of a step with the memory curve, and the module table with a filter box.

The page reuses the TensorBoard plugin's frontend (traceprof/tensorboard/static/index.js and
style.css, package data), inlined at render time, and embeds the JSON document of
``--format json`` (``profile_document``) and, apart, the profile's timeline of a step
(``traceprof.timeline/1``); ``renderReport`` in index.js shows them. Nothing is loaded
from the network: no external scripts, styles or fonts, and a Content-Security-Policy that allows
only the page's own script (by its hash) and inline styles.
"""

from __future__ import annotations

import base64
import html
import os

import msgspec

from traceprof.render.json_format import profile_document
from traceprof.render.registry import RenderOptions
from traceprof.result.model import ModuleProfile

_STATIC = ("tensorboard", "static")
# text that would end or disturb a <script> element if it appeared in the inlined frontend
_FORBIDDEN_IN_SCRIPT = ("</script", "<!--", "<script")
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_JSON_BYTE_ESCAPES = tuple((char.encode(), escape.encode()) for char, escape in _JSON_ESCAPES.items())
_ASCII_BYTE_ESCAPES = tuple((char, escape) for char, escape in _JSON_BYTE_ESCAPES if char.isascii())


def static_text(name: str) -> str:
    """A file of the shared frontend (``index.js``, ``style.css``), from the package data: read
    where the package's files are on disk (importlib.resources, 20 to 70 ms to import, only for a
    package that is not, such as one in a zip file)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(package, *_STATIC, name), encoding="utf-8") as f:
            return f.read()
    except OSError:
        pass
    from importlib import resources

    path = resources.files("traceprof")
    for part in (*_STATIC, name):  # one part a call: Traversable.joinpath takes one before 3.11
        path = path.joinpath(part)
    return path.read_text(encoding="utf-8")


def script_json(value) -> bytes:
    """``value`` as JSON (UTF-8) that is safe inside a ``<script>`` element: ``<``, ``>`` and ``&``
    (and the JavaScript line separators) as ``\\uXXXX`` escapes, which JSON.parse reads back as
    they were. ``</script>`` or ``<!--`` in a module name cannot end the element."""
    data = msgspec.json.encode(value)
    # the line separators are not ASCII: all-ASCII text (most) has none to look for, and a
    # search for them took longer than the encoding
    escapes = _ASCII_BYTE_ESCAPES if data.isascii() else _JSON_BYTE_ESCAPES
    for char, escape in escapes:  # on the bytes: a third faster than on the text
        if char in data:
            data = data.replace(char, escape)
    return data


def frontend_script(files: tuple[str, ...], start: str) -> str:
    """A page's one script: the frontend ``files`` (index.js first, whose helpers the others use)
    inlined, then ``start``, the code that shows the page's embedded JSON documents."""
    code = "\n".join(static_text(name) for name in files)
    lowered = code.lower()
    for bad in _FORBIDDEN_IN_SCRIPT:
        if bad in lowered:  # a change to the frontend that a page cannot inline as it is
            raise RuntimeError(f"{', '.join(files)}: contains {bad!r}; it cannot be inlined in a <script>")
    return f"\n{code}\nconst data = (id) => JSON.parse(document.getElementById(id).textContent);\n{start}"


def report_script() -> str:
    """The single-trace report's script: the shared frontend, then the call that shows the
    embedded profile."""
    return frontend_script(
        ("index.js",),
        "const doc = data('traceprof-profile');\n"
        "doc.timeline = data('traceprof-timeline');\n"
        "renderReport(doc, data('traceprof-report'));\n",
    )


def _sha256(data: bytes) -> bytes:
    """SHA-256 of ``data`` by the interpreter's own module where it has one: hashlib loads
    OpenSSL first (10 to 40 ms of a page written from the cache)."""
    import importlib

    for name in ("_sha256", "_sha2"):  # CPython 3.11, 3.12 and later
        try:
            return bytes(importlib.import_module(name).sha256(data).digest())
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256(data).digest()


def _content_security_policy(script: str) -> str:
    digest = base64.b64encode(_sha256(script.encode("utf-8"))).decode("ascii")
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'; "
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )


def report_html(profile: ModuleProfile) -> bytes:
    from traceprof.version import __version__

    doc = profile_document(profile)
    timeline = profile.timeline.document() if profile.timeline else None
    path = profile.metadata.path or ""
    name = os.path.basename(path) or "trace"
    page = {"title": name, "footer": f"traceprof {__version__} · {doc['schema']} · {path}"}
    noscript = (
        "This report draws its chart and table with JavaScript; enable it to see them. "
        "The profile is in the element #traceprof-profile (traceprof's JSON document, "
        "docs/output-formats.md)."
    )
    return html_page(
        name,
        noscript,
        report_script(),
        {"traceprof-profile": doc, "traceprof-report": page, "traceprof-timeline": timeline},
    )


def html_page(title: str, noscript: str, script: str, documents: dict, extra_style: str = "") -> bytes:
    """A self-contained page, as UTF-8: the shared style sheet, the JSON ``documents`` (element
    id -> value) and one module ``script``; a Content-Security-Policy lets only that script run
    and nothing load from the network. The documents, most of the page, are made as bytes and
    never become text: a page of several MB that is not all ASCII (its title has a "·") took 15
    ms to encode."""
    from traceprof.version import __version__

    head = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{html.escape(_content_security_policy(script))}">
<meta name="generator" content="traceprof {html.escape(__version__)}">
<title>traceprof · {html.escape(title)}</title>
<style>
{static_text("style.css")}{extra_style}</style>
</head>
<body class="tp-body">
<noscript><div class="tp-message">{html.escape(noscript)}</div></noscript>
"""
    tail = f"""<script type="module">{script}</script>
</body>
</html>
"""
    parts = [head.encode()]
    for key, value in documents.items():
        parts += (
            f'<script type="application/json" id="{html.escape(key)}">'.encode(),
            script_json(value),
            b"</script>\n",
        )
    parts.append(tail.encode())
    return b"".join(parts)


def render_html(profile: ModuleProfile, opts: RenderOptions) -> bytes:
    return report_html(profile)
