"""The one boundary every string from plugin code crosses on its way to an output leakbed writes.

Plugin text is whatever an attack or defense plugin chose: its names and entry-point values, its errors and last
words, its scorer's notes, table cells, figure and export names, its log tails. It is hostile: it may carry terminal
escapes that repaint a console, newlines that forge a leakbed line, Markdown or HTML that forges a report section, a
table, an image loaded from elsewhere or a ``javascript:`` link, or quotes that break a Prometheus label. So it is
never written anywhere as it came: ``plugin_text(text, place)`` first makes it one bounded line of printable text
(``clean``), then escapes it for the place it goes:

- ``console``: no control, escape (CSI, OSC, DCS..., 7- and 8-bit) or invisible bidi byte; printed as plain text,
  never as rich markup (``leakbed.console``'s printers render every cell with ``rich.text.Text``);
- ``markdown``: nothing can form structure: every inline marker is backslash-escaped (no emphasis, code, link, image,
  HTML, entity, table cell or strikethrough), a block marker cannot start it (no heading, list, quote, fence), and
  what an autolinker would turn into a link (``scheme://``, ``www.``, ``@``) is defanged: a report never loads or
  links anything a plugin named;
- ``prometheus``: a label value of ``[A-Za-z0-9_.:/+-]`` only;
- ``json``: one bounded printable line (``json.dumps`` does the quoting).

``said`` labels text as a plugin's own words, and ``error_line`` renders a stored line that may hold such words for
the report or the console. Nothing else in leakbed escapes plugin text (``tests/core/test_plugin_text.py`` checks).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, get_args

__all__ = ["OWN_WORDS", "PLACES", "Place", "clean", "error_line", "plugin_text", "quoted_name", "said"]

Place = Literal["console", "markdown", "prometheus", "json"]
PLACES: tuple[str, ...] = get_args(Place)
OWN_WORDS = "in its own words (not leakbed's)"

_ANSI = re.compile(
    r"""
    (?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]              # CSI ... final byte (7- or 8-bit)
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])        # OSC, DCS, SOS, PM, APC: a string ...
    [^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?          # ... up to BEL or ST (or the end)
  | \x1b[ -/]*[0-~]                                # any other ESC sequence
    """,
    re.VERBOSE,
)
_SPECIAL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]|[^\x00-\x7f]")
_MD_INLINE = re.compile(r"([\\`*_\[\]<>!|~&])")  # every character CommonMark or GFM reads as inline structure
_MD_LEAD = re.compile(r"^(?:[#+=:-]|\d{1,9}[.)])")  # what would start a block: heading, list, setext, definition
_MD_LINKS = re.compile(r"(?i)(://|\bwww\.|@)")  # what autolinkers (GFM's, linkify) turn into links
_DEFANGED = {"://": "[:]//", "@": "[@]"}
_PROM = re.compile(r"[^A-Za-z0-9_.:/+-]")
_SAID = re.compile(r"attack '([^']*)' said: ?")  # how ``said`` labels an attack's words in a stored line


def _visible(ch: str) -> str:
    """A space for controls (C0, C1, line separators), nothing for invisible format marks (bidi overrides)."""
    cat = unicodedata.category(ch)
    if cat == "Cc" or cat in ("Zl", "Zp"):
        return " "
    if cat == "Cf":
        return ""
    if cat == "Cs":
        return "\ufffd"
    return ch


def clean(text: object, limit: int = 300) -> str:
    """Plugin text as one line of printable characters, at most ``limit`` long (ending in "…" when cut).

    Escape sequences go whole, other controls become spaces, invisible format marks go, whitespace runs collapse to
    one space. Bytes are decoded as UTF-8 (invalid bytes replaced). The work is bounded by ``limit``, not by the
    text: only a window of it is ever looked at.
    """
    if limit <= 0:
        return ""
    window = limit * 4 + 4096  # enough to fill ``limit`` after stripping typical escapes; bounds the work
    cut = False
    if isinstance(text, bytes | bytearray | memoryview):
        raw = bytes(text[: window * 4]) if len(text) > window * 4 else bytes(text)
        cut = len(raw) < len(text)
        text = raw.decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    if len(text) > window:
        text, cut = text[:window], True
    text = _ANSI.sub("", text)
    text = _SPECIAL.sub(lambda m: _visible(m.group()), text)
    text = " ".join(text.split())
    if len(text) > limit or (cut and text):
        return text[: limit - 1].rstrip() + "…"
    return text


def _markdown(text: str) -> str:
    text = _MD_LINKS.sub(lambda m: _DEFANGED.get(m.group(1), m.group(1)[:-1] + "[.]"), text)
    text = _MD_INLINE.sub(r"\\\1", text)
    return _MD_LEAD.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], text)


def plugin_text(text: object, place: Place, limit: int = 300) -> str:
    """``text`` (a plugin's) made safe for ``place``: console, markdown, prometheus (a label value) or json."""
    one = clean(text, limit)
    if place == "markdown":
        return _markdown(one)
    if place == "prometheus":
        return _PROM.sub("_", one)[:limit] or "_"
    if place in ("console", "json"):
        return one
    raise ValueError(f"plugin_text: no place {place!r} (one of {', '.join(PLACES)})")


def quoted_name(text: object, limit: int = 80) -> str:
    """A plugin-chosen name inside one of leakbed's messages: cleaned, in quotes (``'evil'``)."""
    return repr(clean(text, limit))


def said(who: str, text: object, place: Place = "json", limit: int = 300) -> str:
    """The plugin's ``text`` labelled as its words, ``who`` (leakbed's, e.g. ``attack 'mlp'``) said it.

    In a line (json, console): ``attack 'mlp' said: "..."``, its quotes and backslashes escaped so that it cannot
    close the quote and go on as leakbed. In Markdown: ``attack 'mlp' said, in its own words (not leakbed's): “...”``.
    """
    if place == "markdown":
        return f"{who} said, {OWN_WORDS}: “{plugin_text(text, 'markdown', limit)}”"
    words = plugin_text(text, place, limit).replace("\\", "\\\\").replace('"', '\\"')
    return f'{who} said: "{words}"'


def error_line(text: object, place: Place, own: str = "leakbed: ", limit: int = 500) -> str:
    """A stored line (a pool error, a scorer's failure) for ``place``, saying who wrote what: leakbed's words after
    ``own``; where the line carries an attack's words (``said``), those are marked as its and quoted."""
    one = clean(text, 4 * limit)
    found = _SAID.search(one)
    if not found:
        return f"{own}{plugin_text(one, place, limit)}"
    before, words = one[: found.start()].rstrip(" :;,"), one[found.end() :]
    if len(words) >= 2 and words[0] == words[-1] == '"':
        words = words[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    who = plugin_text(repr(found.group(1)), place, 80)
    quote = f"attack {who} said, {OWN_WORDS}: “{plugin_text(words, place, 300)}”"
    return f"{own}{plugin_text(before, place, 200)}; {quote}" if before else quote
