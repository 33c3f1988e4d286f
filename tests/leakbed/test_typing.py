"""``mypy --strict`` over the plugin API (issue 39.4): ``[tool.mypy]`` in pyproject.toml checks ``leakbed.plugin``, the
modules that define its names, the example plugin and ``plugins/``; and a plugin that misuses its own parameters or
a name the module does not have fails it, so the types are real ones, not ``Any``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # two mypy processes: about 40 s on a cold cache, a few seconds warm


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def test_the_plugin_api_and_the_plugins_pass_mypy_strict() -> None:
    done = mypy()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found in "), done.stdout


def test_a_plugin_that_misuses_its_params_fails_mypy(tmp_path: Path) -> None:
    plugin = tmp_path / "wrong_plugin.py"
    plugin.write_text(textwrap.dedent('''\
        from typing import ClassVar

        from pydantic import Field

        from leakbed.plugin import Attack, AttackContext, Defense, DeviceContext, Outputs, Params, ScoreContext


        class TopK(Params):
            top_k: int = Field(1, ge=1, le=10, description="classes [count]")


        class Wrong(Attack[TopK]):
            name: ClassVar[str] = "wrong"

            def predict(self, ctx: AttackContext[TopK]) -> Outputs:
                reveal_type(ctx.params)
                return {"n": ctx.params.topk}


        class WrongDefense(Defense[TopK]):
            name: ClassVar[str] = "wrong-defense"

            def clip(self, params: TopK) -> float | None:
                return params.top_k.upper()


        def score(ctx: ScoreContext[TopK]) -> dict[str, float]:
            return {"k": ctx.params.k}


        def device(ctx: DeviceContext) -> str:
            return ctx.round


        from leakbed.plugin import NoSuchName
        '''))
    done = mypy(str(plugin))  # on the cache the test above left: the same modules, a few seconds instead of 15
    out = done.stdout
    assert done.returncode == 1, out
    assert 'Revealed type is "wrong_plugin.TopK"' in out, out
    assert '"TopK" has no attribute "topk"' in out, out
    assert '"int" has no attribute "upper"' in out, out
    assert '"TopK" has no attribute "k"' in out, out
    assert 'Incompatible return value type (got "int", expected "str")' in out, out  # a lazy name is typed, not Any
    assert 'Module "leakbed.plugin" has no attribute "NoSuchName"' in out, out
