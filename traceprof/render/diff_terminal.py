"""Colors for the diff's text tree on a terminal: slower red, faster green, noise dimmed,
added and removed modules marked. Styling never changes the text (pipes, files and
``NO_COLOR=1`` get the plain text)."""

from __future__ import annotations

import re

from rich.text import Text

_SLOWER = re.compile(r"\(\+[^)]*\)|\[added\]")
_FASTER = re.compile(r"\(-[^)]*\)|\[removed\]")
_STYLES = (
    (re.compile(r"^traceprof diff$|^[a-z ]+:(?=\s)"), "bold"),
    (re.compile(r"^warning:.*$"), "yellow"),
    (re.compile(r"^\s*[\w.()\[\]: -]+?(?= \(|:)"), "bold cyan"),
)


def styled(text: str) -> Text:
    out = Text()
    for line in text.splitlines(keepends=True):
        piece = Text(line)
        if "(noise)" in line:
            piece.stylize("dim")
        else:
            piece.highlight_regex(_SLOWER, "red")
            piece.highlight_regex(_FASTER, "green")
        for pattern, style in _STYLES:
            piece.highlight_regex(pattern, style)
        out.append_text(piece)
    return out
