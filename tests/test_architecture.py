"""The folders are the architecture (DESIGN.md): who may import whom, counting imports inside
functions, with no cycle between packages nor between the files of one; the server reaches the referee
only to seal and imports no defense; no trusted module imports attack code (only ``workers.inside``, run in a
sandbox, and ``leakbed.plugin``, the module a plugin imports, do); plugins are found by entry points, never by a
name check."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

ROOMS = ("core", "defenses", "client", "attacks", "workers", "referee", "server", "studies")
PACKAGES = (*ROOMS, "leakbed")  # a room by its last part; "leakbed" = the product's own modules beside the rooms
# DESIGN.md's table: the packages of ours each may import
ALLOWED = {
    "core": set(),
    "defenses": {"core"},
    "client": {"core", "defenses"},
    "attacks": {"core"},
    "workers": {"core", "attacks"},  # attacks: its in-sandbox entry points only (test below)
    "referee": {"core", "workers"},
    "server": {"core", "workers", "referee"},
    "studies": {"core", "defenses", "client", "workers", "referee", "server"},
    "leakbed": {"core", "defenses", "client", "attacks", "workers", "referee", "server", "studies"},
}
# the only modules of ours that may import attack code: they run inside a sandbox, or are what a plugin imports
ATTACK_IMPORTERS = ("leakbed/workers/inside/", "leakbed/plugin.py")
SERVER_MAY_USE_OF_REFEREE = {"leakbed.referee.seal"}  # sealing only
SRC = REPO / "leakbed"


def files_of(package: str) -> list[Path]:
    """The files of one room (or of the product: ``leakbed/`` less the rooms)."""
    if package != "leakbed":
        return [p for p in (SRC / package).rglob("*.py") if "_pb2" not in p.name]
    return [p for p in SRC.rglob("*.py") if p.relative_to(SRC).parts[0] not in ROOMS and "_pb2" not in p.name]


def module_of(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


OURS = {module_of(p) for p in SRC.rglob("*.py")}
LOADED_BY_NAME = re.compile(r"(leakbed(?:\.\w+)+)(:\w+)?")


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "leakbed":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "leakbed"


def imported_names(path: Path) -> list[tuple[str, int]]:
    """Every module of ours ``path`` loads: imports at any depth, relative ones resolved, and modules named by a
    string (``importlib.import_module``, ``python -m``, a lazy table, a Flower component: ``"pkg.mod[:attr]"``)."""
    here = module_of(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package[: len(package) - (node.level - 1)]
                base = ".".join([*stem, *([node.module] if node.module else [])])
            found += [(base, node.lineno), *((f"{base}.{a.name}", node.lineno) for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = LOADED_BY_NAME.fullmatch(node.value)  # "leakbed.attacks" alone is also an entry-point group
            if named and named[1] in OURS and (named[1].count(".") >= 2 or named[2]):
                found.append((named[1], node.lineno))
    return found


def imports(package: str) -> dict[str, set[str]]:
    """module imported -> {file:line}, for every import in ``package`` (nested and relative ones, string loads)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in files_of(package):
        for name, line in imported_names(path):
            found[name].add(f"{path.relative_to(REPO)}:{line}")
    return found


def edges() -> dict[str, set[str]]:
    return {p: {r for m in imports(p) if (r := room_of(m))} - {p} for p in PACKAGES}


def test_one_top_level_package():
    """Every room lives under ``leakbed.``: the checkout (and the wheel) has one importable top-level name."""
    ours = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()} - {"tests", "benchmarks"}
    assert ours == {"leakbed"}
    rooms = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()} - {"commands", "reference"}
    assert rooms == set(ROOMS)


def test_imports_follow_the_design_table():
    for pkg, targets in edges().items():
        bad = targets - ALLOWED[pkg]
        where = [sorted(w)[:2] for m, w in imports(pkg).items() if room_of(m) in bad]
        assert not bad, f"{pkg} imports {sorted(bad)}: {where}"


def test_a_relative_import_and_a_string_load_count(tmp_path):
    """The graph sees ``from ..referee import x`` and ``importlib.import_module("leakbed.referee.truth")``."""
    probe = SRC / "core" / "_probe_for_architecture_test.py"
    probe.write_text('import importlib\nfrom ..referee import seal\nimportlib.import_module("leakbed.referee.truth")\n')
    try:
        names = {n for n, _ in imported_names(probe)}
    finally:
        probe.unlink()
    assert "leakbed.referee.seal" in names and "leakbed.referee.truth" in names


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
    used = {m for m in imports("server") if room_of(m) == "referee"}
    assert {".".join(m.split(".")[:3]) for m in used} <= SERVER_MAY_USE_OF_REFEREE, used


def test_no_trusted_module_imports_attack_code():
    """Attack code (built-in or a plugin's) runs only in a sandbox: trusted code knows it as a declaration."""
    for pkg in PACKAGES:
        if pkg == "attacks":
            continue
        for module, places in imports(pkg).items():
            if room_of(module) != "attacks":
                continue
            bad = [w for w in places if not w.startswith(ATTACK_IMPORTERS)]
            assert not bad, f"{module} imported outside a sandbox's entry point: {sorted(bad)[:3]}"


def test_the_shared_import_graph_tool_agrees():
    """``python3 ../shared/tools/import_graph.py`` prints the package graph; it must find no cycle."""
    tool = REPO.parent / "shared" / "tools" / "import_graph.py"
    out = subprocess.run([sys.executable, str(tool)], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "0 cycles" in out.stdout, out.stdout


def file_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (at any depth, inside functions too)."""
    files = {module_of(p): p for p in files_of(package)}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        names = [n for n, _ in imported_names(path)]
        top = "leakbed" if package == "leakbed" else f"leakbed.{package}"
        graph[mod] |= {n for n in names if n in files and n != mod and n != top}
    return graph


def test_no_cycles_between_the_files_of_a_package():
    """A register-on-import catalog made a 14-file cycle in attacks/; entry points make none."""
    for package in PACKAGES:
        graph = file_graph(package)
        state: dict[str, int] = {}

        def visit(
            node: str, path: list[str], graph: dict[str, set[str]] = graph, state: dict[str, int] = state, package: str = package
        ) -> None:
            state[node] = 1
            for nxt in sorted(graph[node]):
                assert state.get(nxt) != 1, f"import cycle in {package}: {' -> '.join([*path, node, nxt])}"
                if nxt not in state:
                    visit(nxt, [*path, node])
            state[node] = 2

        for node in sorted(graph):
            if node not in state:
                visit(node, [])


def test_no_name_checks_of_plugins_outside_their_own_modules():
    """Core, client, server, referee, studies and the product know plugins by entry point, never by name."""
    from leakbed.defenses import registry as defenses
    from leakbed.workers.introspect import published

    names = [*published(), *defenses.names()]
    alternatives = "|".join(map(re.escape, names))
    pattern = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](""" + alternatives + r""")["']""")
    for package in ("core", "client", "workers", "server", "referee", "studies", "leakbed"):
        for path in files_of(package):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                assert not pattern.search(line), f"{path.relative_to(REPO)}:{n} checks a plugin by name: {line.strip()}"


def test_every_built_in_plugin_declares_its_source_threat_and_parameters():
    from leakbed.defenses import registry as defenses
    from leakbed.referee.kinds import KINDS
    from leakbed.workers.introspect import Introspector, published
    from leakbed.workers.sandbox import Limits, available

    decls = Introspector(Limits() if available() == "" else None).declarations(sorted(published()))
    for name, decl in decls.items():
        assert decl.source and decl.threat, f"attack {name} must cite its source and state its threat model"
        assert decl.scoring.kind == "plugin" or decl.scoring.kind in KINDS, f"attack {name}: unknown scorer kind"
        for field in decl.params.fields:
            assert field.description and field.unit, f"attack {name}: {field.name} needs a description with a unit"
    for name in defenses.names():
        d = defenses.defense(name)
        assert d.source and d.threat, f"defense {name} must cite its source and state its threat model"
        for field, info in d.params.model_fields.items():
            assert info.description and "[" in info.description, f"defense {name}: {field} needs a description with a unit"


def test_core_knows_attack_names_and_parameter_tables_only():
    """``core.config`` holds ``attack.suite`` and ``attack.params``: no attack's own section or field."""
    from leakbed.core.config import AttackConfig

    assert "suite" in AttackConfig.model_fields and "params" in AttackConfig.model_fields
    from leakbed.workers.introspect import published

    fields = {f.replace("_", "-") for f in AttackConfig.model_fields}
    assert not fields & set(published()), "core.config names an attack's own section"


def test_no_pickle_anywhere():
    """What a sandbox hands back is read as data, never as code: no pickle module, no ``allow_pickle=True``, no
    ``torch.load`` without ``weights_only=True``, in any package, plugin or benchmark of ours (a test may pickle
    a record to look for an identity in its bytes: it never loads one)."""
    roots = [SRC, REPO / "plugins", REPO / "examples", REPO / "benchmarks"]
    for root in roots:
        for path in root.rglob("*.py"):
            if "_pb2" in path.name or ".venv" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            where = f"{path.relative_to(REPO)}"
            for node in ast.walk(tree):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names = [a.name for a in node.names]
                    names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                    bad = [n for n in names if n.split(".")[0] in {"pickle", "cloudpickle", "dill", "shelve", "joblib"}]
                    assert not bad, f"{where}:{node.lineno} imports a pickle"
                if isinstance(node, ast.keyword) and node.arg == "allow_pickle":
                    value = node.value
                    assert isinstance(value, ast.Constant) and value.value is False, f"{where}:{value.lineno} allows pickle"
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load":
                    owner = node.func.value
                    if isinstance(owner, ast.Name) and owner.id == "torch":
                        weights = {k.arg: k.value for k in node.keywords}.get("weights_only")
                        ok = isinstance(weights, ast.Constant) and weights.value is True
                        assert ok, f"{where}:{node.lineno} torch.load pickles"
