"""The folders are the architecture (DESIGN.md): who may import whom, counting imports inside
functions, with no cycle; the server reaches the referee only to seal; one name per attack."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict

from tests.conftest import REPO

PACKAGES = ("core", "defenses", "client", "attacks", "referee", "server", "leakbed")
# DESIGN.md's table: the packages of ours each may import
ALLOWED = {
    "core": set(),
    "defenses": {"core"},
    "client": {"core", "defenses"},
    "attacks": {"core"},
    "referee": {"core", "attacks"},
    "server": {"core", "attacks", "referee"},
    "leakbed": {"core", "defenses", "client", "attacks", "referee", "server"},
}
SERVER_MAY_USE_OF_REFEREE = {"referee.seal"}  # sealing only


def imports(package: str) -> dict[str, set[str]]:
    """module imported -> {file:line}, for every import in ``package`` (nested ones included)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in (REPO / package).rglob("*.py"):
        if "_pb2" in path.name:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                found[name].add(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def edges() -> dict[str, set[str]]:
    return {p: {m.split(".")[0] for m in imports(p)} & set(PACKAGES) - {p} for p in PACKAGES}


def test_every_top_level_package_is_in_the_table():
    ours = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()} - {"tests", "benchmarks"}
    assert ours == set(PACKAGES)


def test_imports_follow_the_design_table():
    for pkg, targets in edges().items():
        bad = targets - ALLOWED[pkg]
        where = [sorted(imports(pkg)[m])[:2] for m in imports(pkg) if m.split(".")[0] in bad]
        assert not bad, f"{pkg} imports {sorted(bad)}: {where}"


def test_no_cycles_between_packages():
    graph = edges()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    assert all(p not in reach(p) for p in PACKAGES)


def test_the_server_uses_the_referee_only_to_seal():
    used = {m for m in imports("server") if m.split(".")[0] == "referee"}
    assert {m.rsplit(".", 1)[0] if m.count(".") > 1 else m for m in used} <= SERVER_MAY_USE_OF_REFEREE, used


def test_the_shared_import_graph_tool_agrees():
    """``python3 ../shared/tools/import_graph.py`` prints the package graph; it must find no cycle."""
    tool = REPO.parent / "shared" / "tools" / "import_graph.py"
    out = subprocess.run([sys.executable, str(tool)], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "0 cycles" in out.stdout, out.stdout


def test_each_attack_resolves_on_both_sides():
    from attacks.suite import known_attacks
    from referee.scorers import SCORERS

    assert set(known_attacks()) == set(SCORERS)
    assert {"matching", "open-world", "redteam"} <= set(SCORERS)


def test_an_unknown_suite_attack_is_refused_before_anything_starts():
    import pytest

    from core.config import ConfigError
    from leakbed.registry import check_suite
    from tests.conftest import tiny_config

    with pytest.raises(ConfigError, match="unknown attack 'nope'"):
        check_suite(tiny_config("attack.suite=['nope']"))
    check_suite(tiny_config("attack.suite=['matching']"))
