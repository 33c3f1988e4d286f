"""One Markdown table writer for every report, study, benchmark and generated page."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

Align = Literal["left", "right", "center"] | None
_RULES = {None: "---", "left": ":---", "right": "---:", "center": ":---:"}
_BAR = re.compile(r"(\\*)\|")  # a "|" with the backslashes before it


def _bar(found: re.Match[str]) -> str:
    slashes = found.group(1)
    return found.group(0) if len(slashes) % 2 else f"{slashes}\\|"  # an odd run already escapes it


def cell(text: object) -> str:
    """``text`` as one table cell: on one line, each ``|`` not yet escaped by a backslash escaped."""
    return _BAR.sub(_bar, " ".join(str(text).splitlines()))


def markdown_table(header: Sequence[object], rows: Sequence[Sequence[object]], align: Sequence[Align] | None = None) -> str:
    """A Markdown (GitHub) table, without a final newline: ``| a | b |``, the rule line (``align``: one of left,
    right, center or None per column; default ``---``), one line per row, each as given (a plugin's ragged table
    stays ragged rather than failing a report). Cells are escaped by ``cell``."""
    width = len(header)
    if align is not None and len(align) != width:
        raise ValueError(f"markdown_table: {len(align)} alignments for {width} columns")
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "".join(f"{_RULES[a]}|" for a in (align or [None] * width)))
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
