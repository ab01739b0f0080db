"""Colors for the diff's text tree on a terminal: slower red, faster green, noise dimmed,
added and removed modules marked. Styling never changes the text (pipes, files and
``NO_COLOR=1`` get the plain text)."""

from __future__ import annotations

import re

from rich.text import Text

from traceprof.render.terminal import Styles, highlighted, styled_lines

#: a changed line's marks: slower red, faster green
_CHANGE: Styles = (
    (re.compile(r"\(\+[^)]*\)|\[added\]"), "red"),
    (re.compile(r"\(-[^)]*\)|\[removed\]"), "green"),
)
#: a line whose change is within the step-to-step spread: dimmed whole
_NOISE: Styles = ((re.compile(r".+", re.DOTALL), "dim"),)
_STYLES: Styles = (
    (re.compile(r"^traceprof diff$|^[a-z ]+:(?=\s)"), "bold"),
    (re.compile(r"^warning:.*$"), "yellow"),
    (re.compile(r"^\s*[\w.()\[\]: -]+?(?= \(|:)"), "bold cyan"),
)


def styled(text: str) -> Text:
    return styled_lines(
        text, lambda line: highlighted(line, (_NOISE if "(noise)" in line else _CHANGE) + _STYLES)
    )
