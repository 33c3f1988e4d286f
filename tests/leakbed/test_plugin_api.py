"""The public plugin module (issue 39.4): what importing it loads, every name it exports, the generic contracts, the
API version and the deprecation mechanism."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from pydantic import Field

import leakbed.plugin as plugin
from leakbed.core.errors import LeakbedError

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "scipy", "sklearn", "torch", "flwr", "ray", "grpc", "matplotlib", "rich", "typer", "h5py", "datasets")
MAX_MODULES = 450  # 343 measured with numpy 2.4 and pydantic 2.14 (was 1,629 with pandas, scipy and scikit-learn)


class TopK(plugin.Params):
    top_k: int = Field(1, ge=1, le=10, description="classes named [count]")


def test_importing_the_plugin_module_loads_no_heavy_library() -> None:
    """In a fresh interpreter: ``import leakbed.plugin`` loads numpy and pydantic, none of ``HEAVY``, and a bounded
    number of modules; the lazy names (torch, Flower) load on first use."""
    code = (
        "import sys, json; import leakbed.plugin as p; loaded = set(sys.modules); "
        f"heavy = [m for m in {HEAVY!r} if m in loaded]; n = len(loaded); p.build_model; "
        "print(json.dumps({'heavy': heavy, 'modules': n, 'torch_after_use': 'torch' in sys.modules}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["heavy"] == [], found
    assert 100 < found["modules"] <= MAX_MODULES, found
    assert found["torch_after_use"], "the lazy model helpers never loaded torch: they are not what they claim"


def test_every_exported_name_resolves_and_the_lazy_ones_are_typed() -> None:
    """Each name of ``__all__`` is there; each lazily loaded name is imported under ``TYPE_CHECKING`` (so a type checker
    sees its real type, not Any) from the module ``_LAZY`` loads it from; an unknown name says what may be used."""
    for name in plugin.__all__:
        assert getattr(plugin, name) is not None, name
    tree = ast.parse((REPO / "leakbed" / "plugin.py").read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                typed.update({alias.name: imp.module for alias in imp.names})
    assert typed == dict(plugin._LAZY)
    assert set(plugin._LAZY) <= set(plugin.__all__) and sorted(dir(plugin)) == sorted(plugin.__all__)
    with pytest.raises(AttributeError, match="leakbed.plugin has no 'Nope'; a plugin may use: API_VERSION, "):
        plugin.Nope  # noqa: B018


def test_the_api_version_is_major_minor() -> None:
    major, minor = plugin.API_VERSION
    assert isinstance(major, int) and isinstance(minor, int) and major >= 1 and minor >= 0
    page = (REPO / "docs" / "explanation" / "deprecation-policy.md").read_text()
    assert f"`API_VERSION` is `({major}, {minor})`" in page  # the policy page states the version it describes


def test_an_attack_gets_its_params_model_from_its_subscript() -> None:
    class Named(plugin.Attack[TopK]):
        name = "named"

    class Both(plugin.Attack[TopK]):
        name = "both"
        params = TopK

    class Bare(plugin.Attack):  # type: ignore[type-arg]  # the old form: params set by hand
        name = "bare"
        params = TopK

    assert Named.params is TopK and Both.params is TopK and Bare.params is TopK
    assert plugin.Attack.params is plugin.NoParams and plugin.ReidAttack.params is plugin.NoParams

    class Reid(plugin.ReidAttack[TopK]):
        name = "reid-sub"

    assert Reid.params is TopK


def test_a_params_model_other_than_the_subscript_is_refused_at_import() -> None:
    with pytest.raises(LeakbedError, match=r"\.Wrong: params = NoParams, but it subclasses Attack\[TopK\]$"):

        class Wrong(plugin.Attack[TopK]):
            name = "wrong"
            params = plugin.NoParams

    with pytest.raises(LeakbedError, match=r"\.WrongDefense: params = NoParams, but it subclasses Defense\[TopK\]$"):

        class WrongDefense(plugin.Defense[TopK]):
            name = "wrong-defense"
            params = plugin.NoParams


def test_a_defense_gets_its_params_model_from_its_subscript() -> None:
    class Hide(plugin.Defense[TopK]):
        name = "hide"

    assert Hide.params is TopK and plugin.Defense.params is plugin.NoParams


def test_a_deprecated_name_warns_once_and_gives_its_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(plugin._DEPRECATED, "OldParams", ("Params", (1, 0)))
    monkeypatch.delitem(vars(plugin), "OldParams", raising=False)
    with pytest.warns(plugin.LeakbedDeprecationWarning, match=r"OldParams is deprecated since API 1\.0 and goes in API 2\.0: use "
                      r"leakbed\.plugin\.Params"):  # fmt: skip
        assert plugin.OldParams is plugin.Params
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plugin.OldParams is plugin.Params  # once per process
    monkeypatch.delitem(vars(plugin), "OldParams")
