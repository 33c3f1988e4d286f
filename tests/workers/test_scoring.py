"""A plugin's own scorer in the scoring sandbox (``workers.scoring.score_plugin``): it gets its outputs, its params,
the ids it was given and only the truth fields it declared, nothing else; its result is bounded and cleaned; its
failures and hangs end in one line.

The scorers here belong to a throwaway distribution (``lbscore``, built in a temporary folder) that only the scoring
sandbox sees: it is mounted read-only at ``/leakbed/testplug`` and put on the sandbox's ``PYTHONPATH``, where the
sandbox finds it by entry point like any installed plugin."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from leakbed.core.declaration import Declaration, Scoring
from leakbed.core.param_schema import ParamField, ParamSchema
from leakbed.core.processes import marked
from leakbed.workers import one_shot, scoring
from leakbed.workers.sandbox import INSIDE, LIB, Limits, Mount, Sandbox, available
from leakbed.workers.scoring import MAX_RESULT, PluginScorerError, score_plugin

pytestmark = pytest.mark.skipif(available() != "", reason=f"no sandbox here: {available()}")

PLUGIN = r'''
import math, os, time
from typing import ClassVar
import numpy as np
from pydantic import Field
from leakbed.plugin import Attack, Params, Scoring


class EchoParams(Params):
    top: int = Field(1, ge=1, le=10)


def _listing(path):
    out = []
    for d, _, files in os.walk(path):
        out += [os.path.relpath(os.path.join(d, f), path) for f in files]
    return sorted(out)


def echo(ctx):
    given = [str(i) for i in ctx.given]
    try:
        open("/leakbed/inputs/request.json", "a")
        wrote = "yes"
    except OSError as err:
        wrote = err.errno
    return {
        "fields": sorted(ctx.truth.fields),
        "users": ctx.truth.field_for(ctx.given, "user_id"),
        "rounds": ctx.truth.field_for(ctx.given, "round"),
        "given": given,
        "outputs": sorted(ctx.outputs),
        "scores_shape": list(ctx.outputs["scores"].shape),
        "name": ctx.name,
        "attack": ctx.attack,
        "top": ctx.params.top,
        "leakbed": sorted(os.listdir("/leakbed")),
        "inputs": _listing("/leakbed/inputs"),
        "wrote": wrote,
        "accuracy": float(np.mean([u == "u0" for u in ctx.truth.field_for(ctx.given, "user_id")])),
    }


def messy(ctx):
    deep = {"a": 1.0}
    for _ in range(5):
        deep = {"d": deep}
    return {
        "accuracy": 0.5, "nan": math.nan, "inf": math.inf, "count": np.int64(7),
        "text": "\x1b[2J\x1b[31mall clear\nleakbed: scored 1.0 " + "x" * 100_000,
        "bad key!": 1, "obj": object(), "deep": deep, "long": list(range(5000)),
        "notes": ["a line\nleakbed: forged"],
    }


def raises(ctx):
    raise RuntimeError("\x1b[31mall good\nleakbed: scored 1.0")


def hang(ctx):
    time.sleep(600)


def flood(ctx):
    return {"x": "y" * (2 << 20)}


def not_a_dict(ctx):
    return [1, 2, 3]


def _attack(name, function, truth=("user_id", "round")):
    class A(Attack):
        params = EchoParams
        scorer = Scoring(kind="plugin", function=f"lbscore.attack:{function}", truth=truth)
    A.name = name
    A.__name__ = A.__qualname__ = function.title().replace("_", "")
    return A


Echo = _attack("lb-echo", "echo")
Messy = _attack("lb-messy", "messy")
Raises = _attack("lb-raises", "raises")
Hang = _attack("lb-hang", "hang")
Flood = _attack("lb-flood", "flood")
NotADict = _attack("lb-not-a-dict", "not_a_dict")
'''
NAMES = {"lb-echo": "Echo", "lb-messy": "Messy", "lb-raises": "Raises", "lb-hang": "Hang", "lb-flood": "Flood",
         "lb-not-a-dict": "NotADict"}
IDS = np.asarray([f"{i:016x}" for i in range(6)])


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("testplug") / "lbscore-dist"
    pkg = root / "lbscore"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "attack.py").write_text(PLUGIN)
    info = root / "lbscore-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lbscore\nVersion: 0.1\n")
    published = "".join(f"{n} = lbscore.attack:{c}\n" for n, c in NAMES.items())
    (info / "entry_points.txt").write_text(f"[leakbed.attacks]\n{published}")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@pytest.fixture
def mark(plugin: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The scoring sandbox with the throwaway plugin on its path, and a mark in its environment (to find its process)."""
    value = uuid.uuid4().hex

    def with_plugin(limits: Limits, mounts=(), output: bool = True, plugins=None) -> Sandbox:  # noqa: ANN001
        env = {"PYTHONPATH": f"{LIB / 'leakbed'}:{INSIDE / 'testplug'}", "LEAKBED_TEST_MARK": value}
        return Sandbox(limits, [*mounts, Mount(plugin, INSIDE / "testplug")], output, extra_env=env, plugins=())

    monkeypatch.setattr(one_shot, "Sandbox", with_plugin)
    return value


def decl(name: str, function: str, truth: tuple[str, ...] = ("user_id", "round")) -> Declaration:
    """The attack as trusted code knows it (its declaration: data, never its module)."""
    return Declaration(name=name, params=ParamSchema(fields=(ParamField(name="top", type="int", default=1, ge=1, le=10),)),
                       scoring=Scoring(kind="plugin", function=f"lbscore.attack:{function}", truth=truth))


def outputs_file(tmp_path: Path) -> Path:
    path = tmp_path / "outputs.npz"
    np.savez(path, ids=IDS, scores=np.arange(24, dtype=np.float64).reshape(6, 4))
    return path


TRUTH = {"user_id": [f"u{i % 3}" for i in range(6)], "round": [1, 1, 1, 2, 2, 2]}


def test_the_scorer_gets_its_outputs_params_given_ids_and_only_its_declared_truth(tmp_path, mark):
    t0 = time.monotonic()
    got = score_plugin(decl=decl("lb-echo", "echo"), outputs=outputs_file(tmp_path), truth=TRUTH, params={"top": 3},
                       given=IDS, output="lb-echo-variant")
    print(f"a plugin scorer in the scoring sandbox: {time.monotonic() - t0:.2f} s")
    assert got["fields"] == ["round", "user_id"] and got["users"] == TRUTH["user_id"] and got["rounds"] == TRUTH["round"]
    assert got["given"] == list(IDS) and got["outputs"] == ["ids", "scores"] and got["scores_shape"] == [6, 4]
    assert (got["name"], got["attack"], got["top"]) == ("lb-echo-variant", "lb-echo", 3)
    assert got["leakbed"] == ["inputs", "lib", "testplug"]  # its inputs, staged code (and the test's plugin); no store
    assert got["inputs"] == ["given.npy", "outputs.npz", "request.json"] and got["wrote"] in (13, 30)  # EACCES, EROFS
    assert got["accuracy"] == pytest.approx(2 / 6) and got["scored_by"] == "plugin"


def test_a_truth_field_it_did_not_declare_is_refused_before_any_sandbox(tmp_path, mark, monkeypatch):
    monkeypatch.setattr(scoring, "_run", lambda *a: pytest.fail("a sandbox was started"))
    with pytest.raises(PluginScorerError, match=r"^truth fields \['label-share'\] were not declared by 'lb-echo'$"):
        score_plugin(decl=decl("lb-echo", "echo"), outputs=outputs_file(tmp_path),
                     truth={**TRUTH, "label-share": [[1.0]] * 6}, params={}, given=IDS)


def test_a_field_it_declared_but_is_not_given_is_not_there(tmp_path, mark):
    """Declared ``user_id`` and ``round``, given only ``round``: the scorer cannot read an owner."""
    with pytest.raises(PluginScorerError, match=r"^the scorer of 'lb-echo' said: \"KeyError: 'user_id'\"$"):
        score_plugin(decl=decl("lb-echo", "echo"), outputs=outputs_file(tmp_path), truth={"round": TRUTH["round"]},
                     params={}, given=IDS)


def test_its_result_is_cleaned_and_bounded(tmp_path, mark):
    got = score_plugin(decl=decl("lb-messy", "messy"), outputs=outputs_file(tmp_path), truth=TRUTH, params={}, given=IDS)
    assert got["accuracy"] == 0.5 and got["count"] == 7 and got["nan"] is None and got["inf"] is None
    assert "bad key!" not in got and got["scored_by"] == "plugin"
    assert len(got["text"]) <= 300 and got["text"].startswith("all clear leakbed: scored 1.0 xxx") and "\x1b" not in got["text"]
    assert got["obj"].startswith("<object object at")  # a non-number comes back as short text at most
    assert got["deep"] == {"d": {"d": {"d": None}}}  # nesting cut at its bound
    assert got["long"] == list(range(1000)) and got["notes"] == ["a line leakbed: forged"]


@pytest.mark.parametrize(
    ("name", "function", "says"),
    [
        ("lb-raises", "raises", r"^the scorer of 'lb-raises' said: \"RuntimeError: all good leakbed: scored 1.0\"$"),
        ("lb-not-a-dict", "not_a_dict", r"^the scorer of 'lb-not-a-dict' said: \"TypeError: the scorer returned list, "
                                        r"not a dict\"$"),
        ("lb-flood", "flood", f"^the plugin's scorer wrote more than {MAX_RESULT} bytes; it was ended$"),
    ],
    ids=["raises", "not-a-dict", "flood"],
)
def test_a_failing_scorer_is_refused_in_one_line(tmp_path, mark, name, function, says):
    with pytest.raises(PluginScorerError, match=says) as err:
        score_plugin(decl=decl(name, function), outputs=outputs_file(tmp_path), truth=TRUTH, params={}, given=IDS)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


@pytest.mark.long
def test_a_hanging_scorer_is_ended_at_its_deadline(tmp_path, mark):
    t0 = time.monotonic()
    with pytest.raises(PluginScorerError, match=r"^the plugin's scorer did not finish within 3 s; it was ended$"):
        score_plugin(decl=decl("lb-hang", "hang"), outputs=outputs_file(tmp_path), truth=TRUTH, params={}, given=IDS,
                     deadline=3.0)
    took = time.monotonic() - t0
    assert 3.0 <= took < 8, took
    until = time.monotonic() + 5
    while marked("LEAKBED_TEST_MARK", mark) and time.monotonic() < until:
        time.sleep(0.05)
    assert not marked("LEAKBED_TEST_MARK", mark), "the scorer's process outlived its deadline"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", r"^the plugin's scorer returned no result \("),
        (b"\x1b[2J{not json", r"^the plugin's scorer returned no result \("),
        (b"[1]", r"^the plugin's scorer returned no result$"),
        (b'{"ok": true, "result": [1]}', r"^the plugin's scorer returned a result refused: the result is list, not a dict$"),
        (b'{"ok": "yes"}', r"^the plugin's scorer returned no result$"),
        (b'{"ok": false, "error": "\\u001b[2Jno\\nleakbed: fine"}', r"^the scorer of 'lb-echo' said: \"no leakbed: fine\"$"),
        (b'{"ok": true, "result": ' + b"[" * 50 + b"]" * 50 + b"}", r"^the plugin's scorer returned no result \("),
    ],
    ids=["empty", "not-json", "a-list", "no-dict", "bad-ok", "failed", "deep"],
)
def test_a_hostile_reply_from_the_scoring_sandbox_is_refused(tmp_path, monkeypatch, raw, says):
    monkeypatch.setattr(scoring, "_run", lambda inputs, limits, deadline, plugins: raw)
    with pytest.raises(PluginScorerError, match=says) as err:
        score_plugin(decl=decl("lb-echo", "echo"), outputs=outputs_file(tmp_path), truth=TRUTH, params={}, given=IDS)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


@pytest.mark.slow  # introspecting the example plugin, then its scorer, each in a sandbox: ~10 s
def test_the_example_plugins_scorer_runs_in_the_scoring_sandbox(tmp_path, example_plugin):
    """A real third-party scorer (examples/leakbed-example-plugin's ``bias-labels``), pip-installed: it declares the
    truth it reads (``label-share``) and gets it, scoring the attack's outputs against it."""
    from leakbed.workers.introspect import Introspector

    found = Introspector(Limits(), cache=tmp_path / "cache").declarations(["bias-labels"])["bias-labels"]
    assert found.distribution == "leakbed-example-plugin" and found.scoring.kind == "plugin"
    rng = np.random.default_rng(0)
    assert found.scoring.truth == ("label-share",)
    main = [0, 1, 2, 3, 0, 1]
    share = [list(np.eye(4)[m]) for m in main]
    scores = np.eye(4)[main] * 0.9 + rng.random((6, 4)) * 0.1  # each update ranks its device's main class first
    np.savez(tmp_path / "out.npz", ids=IDS, scores=scores)
    got = score_plugin(decl=found, outputs=tmp_path / "out.npz", truth={"label-share": share}, params={"top_k": 1},
                       given=IDS)
    assert got["accuracy"] == 1.0 and got["updates"] == 6 and got["scored_by"] == "plugin"
    assert got["chance"] == pytest.approx(2 / 6) and got["x_chance"] == pytest.approx(3.0) and got["coverage"] == 1.0
