"""Colors and tree guides for a renderer's text on a terminal (the CLI uses it only when standard
output is a terminal and ``NO_COLOR`` is unset; files and pipes get the plain text).

Styling never changes the text's layout: indentation of the module tree becomes guides of the
same width (``"│ "`` for two spaces), so the plain text is recovered by removing the styles and
turning the guides back into spaces.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.text import Text

#: a line's styles: each pattern's matches get its style, later ones over earlier ones
Styles = tuple[tuple[re.Pattern, str], ...]


GUIDE = "│ "
_INDENT = re.compile(r"^((?:  )+)(?=[()\d])")  # module lines, their continuations and ")"
_STYLES: Styles = (
    (re.compile(r"^-{5,}.*-{5,}$|^={5,}$|^traceprof module profile$|^Layer \(type.*$"), "bold"),
    (re.compile(r"^(warning|unsupported):.*$"), "red"),
    (re.compile(r"^\w[\w /+()*=-]*:(?=\s)"), "bold"),  # "fwd latency:", "trace:"
    (re.compile(r"\((?:[\w.\-]+|not in any module)\)(?=[:( ]|$)"), "bold cyan"),  # (layer1)
    (re.compile(r"(?<=: )[A-Z]\w*(?=\()|(?<=─)[A-Z]\w*(?=:)|^[A-Z]\w*(?=\()"), "magenta"),  # class
    (re.compile(r"\b\d+(?:\.\d+)? (?:us|ms|s)\b"), "green"),
    (re.compile(r"(?:<)?\b\d+(?:\.\d+)?%"), "yellow"),
    (re.compile(r"\b\d+(?:\.\d+)? [kMGTPE]?(?:FLOP/s|FLOP|MAC|B/s|B)\b"), "blue"),
)


def styled(text: str) -> Text:
    """``text`` with tree guides and colors, for a terminal."""
    return styled_lines(text, _guided)


def _guided(line: str) -> Text:
    """A line of a report: its indentation as tree guides, then its styles."""
    out = Text()
    indent = _INDENT.match(line)
    if indent:
        depth = len(indent.group(1)) // 2
        out.append(GUIDE * depth, style="dim")
        line = line[indent.end() :]
    out.append_text(highlighted(line, _STYLES))
    return out


def styled_lines(text: str, style_line: Callable[[str], Text]) -> Text:
    """``text`` styled line by line (each line with its end) by ``style_line``."""
    out = Text()
    for line in text.splitlines(keepends=True):
        out.append_text(style_line(line))
    return out


def highlighted(line: str, styles: Styles) -> Text:
    """``line`` with the styles of the patterns it matches."""
    piece = Text(line)
    for pattern, style in styles:
        piece.highlight_regex(pattern, style)
    return piece


def plain(styled_text: str) -> str:
    """The plain text back from what :func:`styled` printed (ANSI codes removed, guides undone)."""
    unguided = re.sub(r"\x1b\[2m((?:│ )+)\x1b\[0m", lambda m: "  " * (len(m.group(1)) // 2), styled_text)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", unguided)
