"""The package graph as the code has it: for each of leakbed's packages, the packages of ours it imports (imports
inside functions counted), read from the source with ``ast``; the architecture test enforces DESIGN.md's table."""

from __future__ import annotations

import ast
from pathlib import Path

from leakbed.core.tables import markdown_table

PKG = Path(__file__).resolve().parents[1]  # the leakbed package
ROOT = PKG.parent
ROOMS = ("core", "defenses", "client", "attacks", "workers", "referee", "server", "studies")
PACKAGES = (*ROOMS, "leakbed")  # a room by its last part; "leakbed" = the product's own modules

INTRO = """# Who imports whom

The packages of ours each package imports, read from the source (imports inside functions and relative imports
included). Every room is a subpackage of `leakbed` and is named here by its last part; `leakbed` is the product's own
modules beside them. `tests/test_architecture.py` fails when an arrow leaves DESIGN.md's table or closes a cycle,
between packages or between the files of one, or when a trusted module imports attack code. See
[Architecture](../explanation/architecture.md).

*Generated from the source by `leakbed/reference/imports_page.py`.*

"""


def _files(pkg: str) -> list[Path]:
    if pkg != "leakbed":
        paths = (PKG / pkg).rglob("*.py")
    else:
        paths = (p for p in PKG.rglob("*.py") if p.relative_to(PKG).parts[0] not in ROOMS)
    return sorted(p for p in paths if "_pb2" not in p.name)


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "leakbed":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "leakbed"


def _imported_rooms(path: Path) -> set[str]:
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = list(rel if path.name == "__init__.py" else rel[:-1])
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {_room(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join([*package[: len(package) - (node.level - 1)], *([module] if module else [])])
            found |= {_room(module), *(_room(f"{module}.{a.name}") for a in node.names)}
    return {r for r in found if r}


def edges() -> dict[str, dict[str, int]]:
    """package -> {imported package of ours: number of its files that import it}."""
    out: dict[str, dict[str, int]] = {}
    for pkg in PACKAGES:
        counts: dict[str, int] = {}
        for path in _files(pkg):
            for target in _imported_rooms(path) - {pkg}:
                counts[target] = counts.get(target, 0) + 1
        out[pkg] = dict(sorted(counts.items()))
    return out


def attack_importers() -> list[str]:
    """The files outside ``leakbed/attacks/`` that import attack code (``leakbed.attacks.*``), relative to the
    repository."""
    return [str(p.relative_to(ROOT)) for pkg in PACKAGES if pkg != "attacks" for p in _files(pkg)
            if "attacks" in _imported_rooms(p)]


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
        + "Attack code (`leakbed/attacks/`: the contract and leakbed's own attacks) runs only in sandboxes. Outside "
        + "`leakbed/attacks/`, these files import it: the entry points that run inside a sandbox "
        + "(`leakbed/workers/inside/`) and the module a plugin imports (`leakbed/plugin.py`); no other may.\n\n"
        + "\n".join(importers)
        + "\n"
    )
