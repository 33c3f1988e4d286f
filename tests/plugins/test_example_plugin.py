"""Proof from outside: an attack and a defense in a package of their own (examples/leakbed-example-plugin), installed
with pip, run in every mode (leakbed run, flwr run here; deploy-local and the containers in their own tests) with the
attack in the sandbox and the referee scoring it through the plugin's own scorer. Adding it changed no file of
leakbed, and it imports leakbed only from ``leakbed.plugin``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from leakbed.core.config import ModelConfig, build_config
from leakbed.core.data.corpus import Corpus
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.store import UpdateStore
from leakbed.preflight import resolve
from leakbed.referee.seal import Sealer
from leakbed.referee.truth import Referee
from tests.attacks.reid_store import run_hooks, score_with
from tests.conftest import REPO
from tests.integration.procs import VENV_BIN, flower_env

SMALL = [
    "data.synthetic.users=12",
    "data.synthetic.examples_per_user=60",
    "data.synthetic.image_size=8",
    "fl.rounds=4",
    "fl.fraction_train=0.5",
    'split.priors=["random"]',
    "workers.count=1",
    'attack.suite=["knn", "bias-labels"]',
    "simulation.client_cpus=2",  # one ClientApp actor on the suite's 2 cores (no number depends on it)
]


def test_the_plugin_is_found_by_entry_point_with_its_own_parameters(example_plugin):
    from leakbed.attacks import registry as attacks
    from leakbed.defenses import registry as defenses

    assert attacks.attack("bias-labels").__module__ == "leakbed_example.attack"
    assert type(defenses.defense("hide-bias")).__module__ == "leakbed_example.defense"
    cfg = resolve(build_config({}, ['attack.suite=["bias-labels"]', 'defenses=[{name="hide-bias"}]']))
    assert cfg.attack.params == {"bias-labels": {"top_k": 1}} and cfg.defenses[0].params == {"suffix": ".bias"}
    with pytest.raises(ValueError, match=r"^attack.params.bias-labels.top_k: 0 is less than the minimum of 1$"):
        resolve(build_config({}, ['attack.suite=["bias-labels"]', "attack.params.bias-labels.top_k=0"]))
    with pytest.raises(ValueError, match=r"defenses.0 \(hide-bias\).suffix: String should have at least 1 character"):
        resolve(build_config({}, ['defenses=[{name="hide-bias", suffix=""}]']))


def test_adding_the_plugin_changed_no_file_of_leakbed(example_plugin):
    """Its names appear in no project file outside the example, its tests and the docs; it imports leakbed only from
    the one public module."""
    named = subprocess.run(
        ["git", "grep", "-l", "-e", "bias-labels", "-e", "hide-bias", "-e", "leakbed_example", "--",
         ":!examples", ":!tests", ":!docs", ":!README.md"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert named.stdout == "", named.stdout
    ours = {"core", "attacks", "defenses", "client", "server", "referee", "studies", "leakbed"}
    for path in (example_plugin / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                if name.split(".")[0] in ours:
                    assert name == "leakbed.plugin", f"{path.name} imports {name}"


def _store(tmp_path: Path, hidden: bool) -> tuple[UpdateStore, Referee, AttackerKnowledge]:
    """Anonymous full updates whose output bias moves down most for the device's main class (or not at all)."""
    rng = np.random.default_rng(0)
    store, sealer = UpdateStore(tmp_path / "store"), Sealer(tmp_path / "referee")
    for rnd in (1, 2):
        ids, full = [], []
        for _ in range(10):
            share = rng.dirichlet(np.full(5, 0.5))
            bias = np.zeros(5) if hidden else -0.1 * share + rng.normal(scale=0.002, size=5)
            uid = sealer.new_update_id()
            sealer.seal(uid, f"u{len(ids)}", rnd, {"label-share": share.tolist()})
            ids.append(uid)
            full.append({"fc.weight": rng.normal(size=(5, 3)).astype(np.float32), "fc.bias": bias.astype(np.float32)})
        store.write_anon(rnd, "b", ids, np.zeros((10, 2), np.float32), np.full(10, 8))
        store.write_anon_full(rnd, "b", ids, full)
    meta = Corpus("synthetic", "multiclass", 5, (1, 4, 4), {})
    knowledge = AttackerKnowledge({}, meta, ModelConfig(), ["fc.weight"], 3)
    return store, Referee.load(tmp_path / "referee"), knowledge


@pytest.mark.parametrize(("hidden", "low", "high"), [(False, 0.9, 1.01), (True, 0.0, 0.5)])
def test_the_attack_reads_the_main_class_off_the_bias_and_nothing_when_it_is_hidden(example_plugin, tmp_path, hidden, low, high):
    store, referee, knowledge = _store(tmp_path, hidden)
    run_hooks(store, knowledge, "bias-labels")
    m = score_with(store, referee, "bias-labels", tmp_path, build_config({}, ['attack.suite=["bias-labels"]']))
    assert m["updates"] == 20 and low <= m["accuracy"] <= high, m


def _metrics(run: Path) -> dict:
    return json.loads((run / "random" / "metrics.json").read_text())


@pytest.mark.slow
def test_leakbed_run_and_flwr_run_run_the_plugin_sandboxed_and_score_it(example_plugin, tmp_path, _shared_simulation):
    """``leakbed run`` without the defense: the attack reads the devices' main class well above chance. ``flwr run``
    (Flower's CLI against a simulation SuperLink: the session's, joined to its Ray head, so the run skips a SuperLink's
    and Ray's start and stop) with every device hiding its biases: it falls to chance."""
    link = _shared_simulation.link
    assert link is not None  # started for every slow test (tests/conftest.py)
    plain = tmp_path / "plain"
    cmd = [str(VENV_BIN / "leakbed"), "run", *[a for s in SMALL for a in ("--set", s)], "--out", str(plain)]
    done = subprocess.run(cmd, env=flower_env(tmp_path / "home"), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    m = _metrics(plain)
    assert m["attack_sandbox"].startswith("sandboxed") and m["attack_side"]["sandboxed"]
    found = m["plugin_scored"]["bias-labels"]  # its own scorer's numbers: apart from the referee's
    assert found["updates"] == 24 and found["x_chance"] > 1.5, found
    assert "bias-labels" in (plain / "report.md").read_text() and "knn" in m["attackers"]
    assert json.loads(json.dumps(m["defenses"])) == []

    hidden = tmp_path / "hidden"
    sets = " ".join([*SMALL, 'defenses=[{name="hide-bias"}]'])
    federation = {"num-supernodes": 12, "client-resources-num-cpus": 1}  # the session head has one CPU
    link.submit({"set": sets, "prior": "random", "out-dir": str(hidden)}, federation, tmp_path / "flwr.log")
    log = (tmp_path / "flwr.log").read_text()
    assert "Successfully started run" in log, log[-2000:]
    m = _metrics(hidden)
    assert m["defenses"] == [{"name": "hide-bias", "fraction": 1.0, "users": [], "suffix": ".bias"}]
    assert m["plugin_scored"]["bias-labels"]["x_chance"] < 1.3, m["plugin_scored"]["bias-labels"]
    frozen = (hidden / "config.toml").read_text()
    assert "[attack.params.bias-labels]" in frozen and 'suffix = ".bias"' in frozen  # frozen with its defaults


def test_the_plugin_runs_in_a_fresh_interpreter_from_the_public_module_alone(example_plugin):
    """What a sandboxed worker imports for the attack: leakbed.plugin's attack side, nothing of the referee."""
    code = (
        "import sys, leakbed_example.attack as a; "
        "print(a.BiasLabels.name, sorted(m for m in sys.modules "
        "if m.startswith(('leakbed.referee', 'leakbed.server', 'leakbed.client'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "bias-labels []"
