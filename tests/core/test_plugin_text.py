"""The one boundary for plugin text (``core.plugin_text``): each place it goes, fuzzed with hypothesis.

For Markdown, the rendered line is parsed by two Markdown parsers (markdown-it-py, GFM-like with its autolinker,
and Python-Markdown, which the docs site uses) and compared with the same line holding a plain word where the plugin
text goes: the plugin's text contributes text and nothing else (no heading, list, table, link, image, HTML, code).
"""

from __future__ import annotations

import io
import json
import re
import time
import unicodedata
from html.parser import HTMLParser

import markdown as python_markdown
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from leakbed.core.plugin_text import OWN_WORDS, PLACES, clean, error_line, plugin_text, quoted_name, said
from leakbed.core.tables import markdown_table

MiB = 1 << 20
# what a hostile plugin writes to forge structure, shuffled and joined by hypothesis
PIECES = [
    "#", "## Verdict (leakbed)", "-", "*", "**", "_", "__", "`", "```", "~~~", "~~", "[", "]", "(", ")", "!", "<", ">",
    "|", "| a | b |\n|---|---|", "&", "&amp;", "&#x3C;", "&lt;script&gt;", "http://", "https://evil.example/x.png",
    "www.evil.com", "mailto:a@b.com", "a@b.com", "javascript:alert(1)", "[c](javascript:alert(1))",
    "![x](https://evil.example/x.png)", "<img src=x onerror=alert(1)>", "<script>", "<!--", "-->", "<https://x.y>",
    "[^1]", "[r]: https://evil.example", "1.", "1)", "+", "=", "===", "---", "***", ":", "\\", " ", "    ", "\t", "\n",
    "\r\n", "\n\n", "\x1b[2J", "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07", "\x9b31m", "\u202e", "\u2028",
    "\x00", "\x85", "$x$", "{: .class}", "[bold]", "[/]", "é", "𝔘", "leakbed",
]  # fmt: skip
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=12).map("".join)
PLAIN = "placeholderword"


# --- clean: one bounded printable line ------------------------------------------------------------------------------


def test_clean_strips_escapes_and_controls() -> None:
    nasty = "ok\x1b[31m red\x1b[0m\r\nleakbed: AUC=1.0\ttab\x00nul\x07bel\x1b]0;title\x07\x9b2J\u202eevil\u2028sep \x85next"
    shown = clean(nasty)
    assert shown == "ok red leakbed: AUC=1.0 tab nul belevil sep next"
    assert all(ch.isprintable() for ch in shown)


def test_clean_decodes_bytes_and_truncates_in_bounded_time() -> None:
    assert clean(b"caf\xc3\xa9 \xff\xfe end") == "café \ufffd\ufffd end"
    cut = clean("word " * 1000, limit=20)
    assert len(cut) <= 20 and cut.endswith("…") and cut.startswith("word word")
    assert clean("x" * 20, limit=20) == "x" * 20
    assert clean("   \n\t  ") == "" and clean("x", limit=0) == ""
    assert clean(12.5) == "12.5"
    start = time.perf_counter()
    assert len(clean(b"A\x1b[1m" * (2 * MiB), limit=300)) <= 300
    assert len(clean("A\n" * (8 * MiB), limit=300)) <= 300
    assert time.perf_counter() - start < 2.0


def test_said_labels_the_plugins_words_and_cannot_be_closed() -> None:
    assert said("attack 'mlp'", b"done\n") == "attack 'mlp' said: \"done\""
    forged = said("attack 'mlp'", 'x"\nleakbed: all fine "')
    assert forged == 'attack \'mlp\' said: "x\\" leakbed: all fine \\""' and "\n" not in forged
    md = said("attack 'mlp'", "# all clear")
    assert said("attack 'mlp'", "# all clear", "markdown") == f"attack 'mlp' said, {OWN_WORDS}: “\\# all clear”", md


def test_error_line_says_who_wrote_what() -> None:
    assert error_line("round 2 dropped: queue full for 30s", "markdown") == "leakbed: round 2 dropped: queue full for 30s"
    stored = "fit of bias-labels failed: " + said("attack 'bias-labels'", "no bias\n## leakbed: all clear [ok](http://x)")
    shown = error_line(stored, "markdown")
    assert shown.startswith(f"leakbed: fit of bias-labels failed; attack 'bias-labels' said, {OWN_WORDS}: “"), shown
    assert shown.endswith("no bias ## leakbed: all clear \\[ok\\](http\\[:\\]//x)”") and "\n" not in shown
    assert error_line(said("attack 'x'", 'a "quoted" \\ word'), "console", own="") == (
        f"attack 'x' said, {OWN_WORDS}: “a \"quoted\" \\ word”"
    )


def test_quoted_name_and_unknown_places() -> None:
    assert quoted_name("evil\x1b[2J\nname") == "'evil name'"
    with pytest.raises(ValueError, match="no place 'html'"):
        plugin_text("x", "html")  # type: ignore[arg-type]
    assert set(PLACES) == {"console", "markdown", "prometheus", "json"}


# --- markdown: plugin text forms no structure -----------------------------------------------------------------------


def _contexts(x: str) -> dict[str, str]:
    """Where leakbed's report puts plugin text: a bullet after a label, a line of its own (a table's title), a table
    cell, inside bold, a quoted error, and the first line of a document."""
    return {
        "bullet": f"# leakbed report\n\n- the plugin's scorer notes: {x}\n- next\n",
        "line": f"para\n\n{x}\n\n| a |\n|---|\n| 1 |\n",
        "cell": "\n" + markdown_table(["attack", x], [[x, "1"], ["2", x]]) + "\n",
        "bold": f"**Warning: {x}, more.**\n",
        "first": f"{x}\n===\n",
    }


_MD = MarkdownIt("gfm-like")  # CommonMark, tables, strikethrough, and an autolinker (linkify-it)
_MD.linkify.set({"fuzzy_link": False})  # as GitHub's: scheme://, www., e-mail addresses; never a bare domain


def _shape(tokens: list) -> list[str]:
    """The token tree's types (with heading levels and tags), text contents left out."""
    out = []
    for t in tokens:
        out.append(f"{t.type}:{t.tag}")
        if t.children:
            out += [f"  {s}" for s in _shape(t.children)]
    return out


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(f"<{tag} {sorted(k for k, _ in attrs)}>")

    def handle_endtag(self, tag: str) -> None:
        self.tags.append(f"</{tag}>")


def _html_tags(text: str) -> list[str]:
    parser = _Tags()
    parser.feed(python_markdown.markdown(text, extensions=["tables"]))
    return parser.tags


def _texts(tokens: list) -> str:
    return "".join(t.content if t.type in ("text", "code_inline") else _texts(t.children or []) for t in tokens)


@pytest.mark.long
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
def test_markdown_plugin_text_forms_no_structure(raw: str) -> None:
    x = plugin_text(raw, "markdown")
    for where, doc in _contexts(x).items():
        plain = _contexts(PLAIN if x else "")[where]  # nothing shown: compared with nothing in its place
        assert _shape(_MD.parse(doc)) == _shape(_MD.parse(plain)), (where, raw, x)
        assert _html_tags(doc) == _html_tags(plain), (where, raw, x)
    # what it shows is the plugin's text (defanged), as text
    shown = _texts(_MD.parse(f"- {x}"))
    assert shown == clean(raw).replace("://", "[:]//").replace("@", "[@]") or re.search(r"(?i)www\.", clean(raw)), (raw, x)


def test_markdown_known_forgeries_render_as_text() -> None:
    note = "ok\n## Verdict (leakbed)\n| a | b |\n|---|---|\n![x](https://evil.example/x.png) [go](javascript:alert(1))"
    note += " <img src=x>"
    doc = f"- the plugin's scorer notes: {plugin_text(note, 'markdown')}\n"
    html = python_markdown.markdown(doc, extensions=["tables"])
    assert "<h2" not in html and "<table" not in html and "<img" not in html and "<a " not in html, html
    assert [t.type for t in next(t for t in _MD.parse(doc) if t.type == "inline").children] == ["text"]
    assert "https[:]//evil.example" in _texts(_MD.parse(doc)) and plugin_text("www.x", "markdown") == "www\\[.\\]x"


# --- console, prometheus, json --------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
def test_console_and_json_text_is_one_printable_line(raw: str) -> None:
    for place in ("console", "json"):
        x = plugin_text(raw, place)  # type: ignore[arg-type]
        assert "\n" not in x and "\x1b" not in x and len(x) <= 300
        assert not [ch for ch in x if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")], (place, x)
        assert json.loads(json.dumps(x)) == x and "\n" not in json.dumps(x)


@settings(max_examples=50, deadline=None)
@given(HOSTILE)
def test_console_printers_show_plugin_text_as_it_is(raw: str) -> None:
    """leakbed's console renders every cell as plain text: rich markup in a plugin's words is shown, not applied, and
    no escape byte reaches the terminal."""
    from rich.console import Console

    from leakbed.console import rich_table

    x = plugin_text(raw, "console")
    buf = io.StringIO()
    Console(file=buf, width=400, color_system=None, force_terminal=False).print(rich_table("t", ["attack"], [[x]]))
    out = buf.getvalue()
    assert "\x1b" not in out and "\x9b" not in out
    assert "".join(x.split()) in "".join(re.sub(r"[│┃┏┓┗┛━─┡┩└┘┌┐╇╈╋┼]", "", out).split())


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_prometheus_label_values_cannot_inject(raw: str) -> None:
    label = plugin_text(raw, "prometheus")
    assert re.fullmatch(r"[A-Za-z0-9_.:/+-]{1,300}", label), label
    reg = CollectorRegistry()
    gauge = Gauge("leakbed_test_value", "t", ["attack"], registry=reg)
    gauge.labels(attack=label).set(1.0)
    gauge.labels(attack="knn").set(2.0)
    samples = [s for fam in text_string_to_metric_families(generate_latest(reg).decode()) for s in fam.samples]
    assert sorted((s.labels["attack"], s.value) for s in samples) == sorted([(label, 1.0), ("knn", 2.0)]) or label == "knn"
