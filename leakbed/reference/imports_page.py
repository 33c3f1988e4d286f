"""The package graph as the code has it: for each of leakbed's packages, the packages of ours it imports (imports
inside functions counted), read from the source with ``ast``; the architecture test enforces DESIGN.md's table."""

from __future__ import annotations

import ast
from pathlib import Path

from core.tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "defenses", "client", "attacks", "workers", "referee", "server", "studies", "leakbed")

INTRO = """# Who imports whom

The packages of ours each package imports, read from the source (imports inside functions included).
`tests/test_architecture.py` fails when an arrow leaves DESIGN.md's table or closes a cycle, between
packages or between the files of one, or when a trusted module imports attack code. See
[Architecture](../explanation/architecture.md).

*Generated from the source by `leakbed/reference/imports_page.py`.*

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


def attack_importers() -> list[str]:
    """The files outside ``attacks/`` that import attack code (``attacks.*``), relative to the repository."""
    found = []
    for pkg in PACKAGES:
        if pkg == "attacks":
            continue
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.append(node.module)
                if any(n.split(".")[0] == "attacks" for n in names):
                    found.append(str(path.relative_to(ROOT)))
                    break
    return found


def page() -> str:
    rows = [
        [f"`{pkg}`", ", ".join(f"`{t}` ({n})" for t, n in targets.items()) or "nothing of ours"]
        for pkg, targets in edges().items()
    ]
    importers = [f"- `{p}`" for p in attack_importers()] or ["- none"]
    return (
        INTRO
        + markdown_table(["package", "imports (files importing it)"], rows)
        + "\n\n## Who imports attack code\n\n"
        + "Attack code (`attacks/`: the contract and leakbed's own attacks) runs only in sandboxes. Outside `attacks/`, "
        + "these files import it: the entry points that run inside a sandbox (`workers/inside/`) and the module a plugin "
        + "imports (`leakbed/plugin.py`); no other may.\n\n"
        + "\n".join(importers)
        + "\n"
    )
