"""The package graph as the code has it: for each of leakbed's packages, the packages of ours it imports (imports
inside functions counted), read from the source with ``ast``; the architecture test enforces DESIGN.md's table."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "defenses", "client", "attacks", "referee", "server", "studies", "leakbed")

INTRO = """# Who imports whom

The packages of ours each package imports, read from the source (imports inside functions included).
`tests/test_architecture.py` fails when an arrow leaves DESIGN.md's table or closes a cycle, between
packages or between the files of one. See [Architecture](../explanation/architecture.md).

*Generated from the source by `leakbed/reference/imports_page.py`.*

| package | imports (files importing it) |
|---|---|
"""


def edges() -> dict[str, dict[str, int]]:
    """package -> {imported package of ours: number of its files that import it}."""
    out: dict[str, dict[str, int]] = {}
    for pkg in PACKAGES:
        counts: dict[str, int] = {}
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            found = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
            for target in found & set(PACKAGES) - {pkg}:
                counts[target] = counts.get(target, 0) + 1
        out[pkg] = dict(sorted(counts.items()))
    return out


def page() -> str:
    rows = [
        f"| `{pkg}` | {', '.join(f'`{t}` ({n})' for t, n in targets.items()) or 'nothing of ours'} |"
        for pkg, targets in edges().items()
    ]
    return INTRO + "\n".join(rows) + "\n"
