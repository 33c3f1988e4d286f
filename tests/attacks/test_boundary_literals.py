"""No attack module names the referee's files or reaches for the truth through a string: the
import and name scan of ``test_boundary.py`` extended to every string literal (docstrings aside)
and to imports inside functions. Exempt: ``attacks/redteam.py`` and ``attacks/breakout.py``, the
adversary whose probes must fail (``tests/redteam``), and ``attacks/scoring.py``, what a plugin's own
scorer gets in the scoring sandbox (the truth fields it declared, by name; no attack's lane is handed
it). The process plumbing (pool, sandbox) lives in ``workers/`` now, outside this room. An attack's
declarations for the catalog and the referee are exempt: ``source``, ``threat`` and the parameters'
descriptions are text, ``scorer`` names a scorer kind of the referee's (or the plugin's own scorer), and
a ``Scoring(truth=...)`` names the truth fields a plugin's own scorer receives in the scoring sandbox."""

from __future__ import annotations

import ast

from leakbed.referee.seal import KEY_FILE, TRUTH_FILE
from tests.conftest import REPO, room_of

EXEMPT = {"redteam.py", "breakout.py", "scoring.py"}
FORBIDDEN_LITERALS = (TRUTH_FILE, KEY_FILE, "truth", "referee", "config.toml", "user_id", "partition-id", "/proc/")
FORBIDDEN_MODULES = ("referee", "server", "client", "leakbed", "defenses", "flwr", "ray")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


DECLARATIONS = ("scorer", "source", "threat", "SOURCE", "THREAT")  # class attributes, or the constants they take


def _declarations(tree: ast.AST) -> set[int]:
    """The values of a plugin's ``scorer``, ``source`` and ``threat`` declarations and its parameters' descriptions."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in DECLARATIONS for t in targets):
                ids.add(id(node.value))
        if isinstance(node, ast.keyword) and node.arg == "description":  # a parameter's documented meaning
            ids |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Scoring":  # a plugin scorer's truth fields
            ids |= {id(c) for k in node.keywords if k.arg == "truth" for c in ast.walk(k.value) if isinstance(c, ast.Constant)}
    return ids


def _modules():
    return [p for p in sorted((REPO / "leakbed" / "attacks").rglob("*.py")) if p.name not in EXEMPT and "_pb2" not in p.name]


def test_no_string_literal_names_the_truth():
    for path in _modules():
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree) | _declarations(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                bad = [w for w in FORBIDDEN_LITERALS if w in node.value.lower()]
                assert not bad, f"{path.name}:{node.lineno} string {node.value[:60]!r} names {bad}"


def test_no_import_anywhere_in_a_module_reaches_another_room():
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):  # function bodies included
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert room_of(name) not in FORBIDDEN_MODULES, f"{path.name}:{node.lineno} imports {name}"


def test_the_scan_would_catch_a_cheat(tmp_path):
    """The checks can fail: a module that opens ../referee/truth.jsonl from inside a function."""
    cheat = (
        "def fit(store):\n    import leakbed.referee.truth\n"
        '    return (store.root.parent / "referee" / "truth.jsonl").read_text()\n'
    )
    tree = ast.parse(cheat)
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any(w in v for v in literals for w in FORBIDDEN_LITERALS)
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported == ["leakbed.referee.truth"]
