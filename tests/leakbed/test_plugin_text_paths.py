"""Every place that renders plugin text goes through ``core.plugin_text``, and no other escaping path is left.

Two checks. The code: no module but ``core.plugin_text`` strips escapes or escapes Markdown, HTML or rich markup, the
old helpers (``words``, ``quoted``, ``untrusted``, ``error_text``) are gone, and every module that shows or files a
plugin's text imports the boundary. The outputs: a run folder whose every plugin-chosen string (a scorer's notes,
table titles and cells, figure names, exports and metric names, the attacks' errors and last words, a scorer's
failure, a device's failure reason, a defense's note) is a forgery of report structure and terminal control is
reported and printed; the report, parsed as GitHub would (markdown-it-py, GFM-like with its autolinker), holds no
heading, table, link, image or HTML that leakbed did not write, and the console holds no escape byte.
"""

from __future__ import annotations

import ast
import io
import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from leakbed.report import PLUGIN_SECTION, write_report

SRC = Path(__file__).resolve().parents[2] / "leakbed"
BOUNDARY = SRC / "core" / "plugin_text.py"
# what an escaping path looks like: escape bytes in a pattern, character classes, markup escapers
ESCAPING = [r"\\x1b", r"\\x9b", r"\\u202e", r"import unicodedata", r"markup\.escape", r"html\.escape", r"\[\\\\`\*_",
            r"markupsafe"]  # fmt: skip
GONE = {"words", "quoted", "untrusted", "error_text"}
# modules that show or file a plugin's text (names, entry points, errors, last words, notes, tables, exports)
RENDERERS = [
    "report.py", "console.py", "server/metrics.py", "referee/scorers.py",
    "referee/score_redteam.py", "workers/hostile.py", "workers/lane.py", "workers/scoring.py", "workers/numbers.py",
    "workers/one_shot.py", "workers/checks.py", "workers/introspect.py", "workers/inventory.py", "core/entry_points.py",
    "defenses/registry.py", "commands/plugins.py",
]  # fmt: skip


def test_no_other_escaping_path_remains() -> None:
    found = []
    for path in SRC.rglob("*.py"):
        if path == BOUNDARY or "service_pb2" in path.name:
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(SRC)}: {pattern}" for pattern in ESCAPING if re.search(pattern, text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name in GONE:
                found.append(f"{path.relative_to(SRC)}: def {node.name}")
    assert found == [], found


def test_every_renderer_goes_through_the_boundary() -> None:
    missing = []
    for rel in RENDERERS:
        tree = ast.parse((SRC / rel).read_text(encoding="utf-8"))
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "leakbed.core.plugin_text"]
        if not imports:
            missing.append(rel)
    assert missing == [], missing


# --- the outputs ----------------------------------------------------------------------------------------------------

FORGED = ("ok\x1b[2J\x1b]0;pwned\x07\x9b31m\n## Verdict (leakbed)\n| a | b |\n|---|---|\n"
          "![x](https://evil.example/x.png) [go](javascript:alert(1)) <img src=https://evil.example/y.png> "
          "www.evil.example mail@evil.example \u202e`code` **all clear** &amp; <script>x</script>\n# leakbed report\n"
          "- [ ] x")  # fmt: skip
ESCAPES = re.compile("[\x1b\x9b\x07\u202e]")


def _run(root: Path) -> Path:
    forged_table = {FORGED: {"header": [FORGED, "x"], "rows": [[FORGED, "1"], ["2", FORGED]]}}
    prior = {
        "prior": "random", "time": "timestamps", "users": 4, "rounds": 1, "attack_layers": ["fc2.weight"],
        "attackers": {"mlp": {"ap": 0.5, "chance_ap": 0.25, "x_chance": 2.0, "top1": 0.5, "top5": 1.0, "n_updates": 24,
                              "per_round": {"1": {"top1": 0.5}}, "coverage": 1.0, "rows_missing": 0}},
        "attackers_failed": {"hostile-x": FORGED, "hostile-y": f"scorer failed: attack 'hostile-y' said: \"{FORGED}\""},
        "suite": {"open-world": {"auc": 0.5, "notes": [FORGED], "tables": forged_table,
                                 "figures": ["https://evil.example/z.png", "../../../etc/x.png", "fig.png", "missing.png"]}},
        "plugin_scored": {"evil": {"ap": 0.9, "x_chance": 3.0, "scored_by": "plugin", "notes": [FORGED],
                                   "tables": forged_table, "exports": {FORGED: {"ap": 0.5}, "knn": {"ap": 1.0}},
                                   "a-_b": 1.0, "c_-d": 2.0}},
        "utility": {"1": {"utility": 0.3}},
        "pool": {"tapped": 4, "analysed": 4, "dropped": 0, "failed": 0, "max_lag_rounds": 0,
                 "errors": [f"fit of hostile-x failed: attack 'hostile-x' said: \"{FORGED}\"", FORGED]},
        "rounds_log": {"1": {"failed": 1, "rejected": 0}},
        "replies": {"sampled": 4, "failed": 1, "rejected": 0, "used": 3, "failed_share": 0.25, "max_failed_share": 0.5,
                    "too_many_failed": False, "why": {FORGED: 1}, "users": 4, "users_in_updates": 3},
        "privacy": [{"defense": "dp-fedavg", "epsilon": 1.0, "delta": 1e-5, "noise_multiplier": 1.0, "clip": 1.0,
                     "adopters": 4, "accountant": "RDP", "note": FORGED}],
        "fl_seconds": 1.0, "attack_fit_seconds": 1.0,
    }  # fmt: skip
    (root / "random").mkdir(parents=True)
    (root / "random" / "metrics.json").write_text(json.dumps(prior))
    (root / "random" / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # a figure leakbed's scorer wrote
    return root


def _walk(tokens: list) -> list:
    out = []
    for t in tokens:
        out.append(t)
        out += _walk(t.children or [])
    return out


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = _run(tmp_path_factory.mktemp("forged") / "run")
    return run, write_report(run).read_text(encoding="utf-8")


def test_the_report_holds_no_structure_a_plugin_wrote(reported: tuple[Path, str]) -> None:
    _, text = reported
    md = MarkdownIt("gfm-like")
    md.linkify.set({"fuzzy_link": False})
    tokens = _walk(md.parse(text))
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "html_inline", "html_block", "fence", "code_block", "code_inline", "blockquote_open"}
    images = sorted(t.attrs["src"] for t in tokens if t.type == "image")
    assert images == ["random/fig.png", "reid_by_round.png"], images  # leakbed's own files only, no remote or path
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["leakbed report", "Per prior", "random prior", "Further attacks", "open-world (random prior)",
                        PLUGIN_SECTION, "evil (random prior), scored by its plugin"], headings  # fmt: skip
    tables = [i for i, t in enumerate(tokens) if t.type == "table_open"]
    assert len(tables) == 3  # the closed-world table and the two result tables leakbed laid out, nothing else
    assert not ESCAPES.search(text) and "\n## Verdict" not in text and "\n# leakbed report" not in text[10:]
    assert not [t for t in tokens if t.type == "s_open" or t.type == "strong_open" and "all clear" in str(t)]
    # the plugin's words are there, as text, and its number apart from the referee's
    assert "Verdict (leakbed)" in text and "https\\[:\\]//evil.example" in text and "- its export evil/knn: ap 100.0%" in text


def test_the_report_keeps_the_referees_table_free_of_the_plugins_numbers(reported: tuple[Path, str]) -> None:
    run, text = reported
    table = text.split("| attacker |", 1)[1].split("\n\n", 1)[0]
    assert "MLP" in table and "evil" not in table and "90.0" not in table
    combined = json.loads((run / "metrics.json").read_text())
    assert set(combined["random"]) == {"mlp"} and combined["plugin_scored"]["random"]["evil"]["scored_by"] == "plugin"


def test_the_console_prints_no_escape_byte_and_no_forged_line(reported: tuple[Path, str], capsys, monkeypatch) -> None:
    from leakbed import console
    from leakbed.commands import experiment

    run, _ = reported
    monkeypatch.setenv("COLUMNS", "300")
    experiment.print_tables(run)
    out = capsys.readouterr().out
    assert not ESCAPES.search(out) and PLUGIN_SECTION in out and "evil (plugin-scored)" in out
    assert not [line for line in out.splitlines() if line.lstrip().startswith(("## Verdict", "leakbed: all clear"))]
    buf = io.StringIO()
    monkeypatch.setattr("sys.stderr", buf)
    assert console.fail(f"attack 'x' ({FORGED.replace(chr(10), ' ')}) failed to load") == 2  # one line: the first
    line = buf.getvalue()
    assert line.count("\n") == 1 and not ESCAPES.search(line) and "[go](javascript:alert(1))" in line
    plain = io.StringIO()
    Console(file=plain, color_system=None).print(console.rich_table("t", ["a"], [["[bold red]x[/bold red]"]]))
    assert "[bold red]x[/bold red]" in plain.getvalue()  # rich markup in a cell is shown, not applied
