"""``core.tables.markdown_table``: the one Markdown table writer of reports, studies, benchmarks and generated pages."""

from __future__ import annotations

import pytest

from leakbed.core.tables import cell, markdown_table


def test_a_table_is_header_rule_and_rows():
    assert markdown_table(["a", "b"], [["1", "2"], ["3", ""]]) == "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 |  |"
    assert markdown_table(["x"], []) == "| x |\n|---|"
    assert markdown_table(["n", 2.5], [[1, None]]) == "| n | 2.5 |\n|---|---|\n| 1 | None |"  # any object, as str


def test_alignment_per_column():
    text = markdown_table(["l", "r", "c", "d"], [], align=["left", "right", "center", None])
    assert text.splitlines()[1] == "|:---|---:|:---:|---|"
    with pytest.raises(ValueError, match="2 alignments for 1 columns"):
        markdown_table(["a"], [], align=["left", "right"])


def test_cells_are_escaped_onto_one_line():
    assert cell("int | None") == r"int \| None"
    assert cell("two\nlines\r\nhere") == "two lines here"
    assert cell(r"already \| escaped") == r"already \| escaped"  # a pipe its writer escaped stays one escape
    assert cell(r"a \\| b") == r"a \\\| b"  # an escaped backslash before a pipe: the pipe still needs its own
    text = markdown_table(["k|v"], [["x|y\nz"]])
    assert text == "| k\\|v |\n|---|\n| x\\|y z |"
    assert all(line.count("|") - line.count(r"\|") == 2 for line in text.splitlines())
