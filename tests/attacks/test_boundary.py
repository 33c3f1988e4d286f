"""The attack side sees only what a curious server sees: a boundary checked, not a convention."""

import ast
import dataclasses
import json
from pathlib import Path

import numpy as np

from leakbed.core.data import federation
from leakbed.core.derive import derived_seed
from leakbed.core.knowledge import KNOWLEDGE_ARRAYS, KNOWLEDGE_JSON, AttackerKnowledge
from leakbed.core.records import AnonymousUpdate, RoundSnapshot
from leakbed.server.run_parts import knowledge
from tests.conftest import REPO, room_of, tiny_config

FORBIDDEN_IMPORTS = ("flwr", "server", "client", "ray")
FORBIDDEN_NAMES = ("truth", "referee", "node_id", "partition", "src_node", "user_id")
# what a plugin's own scorer gets in the scoring sandbox (workers.scoring): the truth fields it declared, by name;
# it runs in a sandbox of its own, never in an attack's lane, and no hook of an attack is handed it
SCORING_SIDE = {"scoring.py"}


def _attack_modules():
    return sorted((REPO / "leakbed" / "attacks").rglob("*.py"))


def _hook_modules():
    return [p for p in _attack_modules() if p.name not in SCORING_SIDE]


def test_attacks_import_neither_flower_nor_the_server():
    for path in _attack_modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert room_of(name) not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"


def test_attack_code_never_names_ground_truth():
    for path in _hook_modules():
        code = ast.unparse(ast.parse(path.read_text()))  # docstrings stay, comments go
        tree = ast.parse(code)
        idents = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
        }
        idents |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
        bad = {i for i in idents for word in FORBIDDEN_NAMES if word in i.lower()}
        assert not bad, f"{Path(path).name} uses {bad}"


def test_the_scoring_side_holds_no_hook_and_no_store():
    """The one module exempt above: a scorer's context (its outputs, params, declared truth fields); no attack context,
    no store, nothing of the attacker's knowledge."""
    from leakbed.attacks import scoring

    fields = [f.name for f in dataclasses.fields(scoring.ScoreContext)]
    assert fields == ["attack", "name", "params", "outputs", "truth", "given", "extra"]
    tree = ast.parse((REPO / "leakbed" / "attacks" / "scoring.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    # leakbed.core.params: the type variable of the params model (ScoreContext[P]), nothing of the attack side
    assert imported <= {"__future__", "dataclasses", "typing", "numpy", "leakbed.core.params"}, imported


def test_records_carry_no_identity():
    # what FedAvg itself carries besides the weights (n_k) and what the server computes from the
    # update it holds (its norm, sparsity and size: the metadata attacks of issue 12), never an identity
    fields = [f.name for f in dataclasses.fields(AnonymousUpdate)]
    assert fields == ["update_id", "round", "vector", "num_examples", "arrays", "norm", "sparsity", "nbytes"]
    assert [f.name for f in dataclasses.fields(RoundSnapshot)] == ["round", "arrays", "train_config"]


def test_attacker_knowledge_holds_prior_data_only(tmp_path):
    """What the workers read (``AttackerKnowledge.save``: JSON and an npz, no pickle) holds prior
    data only: no private example, and a seed of the attacker's own, not the experiment's."""
    cfg = tiny_config("seed=918273645")
    fed = federation(cfg, "random")
    k = knowledge(cfg, fed, ["fc2.weight"])
    assert k.corpus_meta.users == {}
    assert k.seed != cfg.seed and k.seed == derived_seed(cfg.seed, "attacker")
    k.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [KNOWLEDGE_JSON, KNOWLEDGE_ARRAYS]
    text = (tmp_path / KNOWLEDGE_JSON).read_text()
    arrays = (tmp_path / KNOWLEDGE_ARRAYS).read_bytes()
    with np.load(tmp_path / KNOWLEDGE_ARRAYS, allow_pickle=False) as z:  # loads with pickle off: no object arrays
        assert all(z[name].dtype.kind != "O" for name in z.files)
    doc = json.loads(text)
    assert doc["seed"] == k.seed and str(cfg.seed) not in text and str(cfg.seed) not in str(doc)  # no experiment seed
    assert not {"users", "examples_per_user", "synthetic", "data"} & set(doc["corpus"])  # no data recipe
    for user, split in fed.splits.items():
        prior = {row.tobytes() for row in split.prior.x}
        assert not prior & {row.tobytes() for row in split.private.x}
        assert np.array_equal(k.prior[user].x, split.prior.x)
        assert split.prior.x[0].tobytes() in arrays  # the check can see an example when one is there
        # no private example travels to the attack workers
        for row in split.private.x:
            assert row.tobytes() not in arrays and row.tobytes() not in text.encode()
    back = AttackerKnowledge.load(tmp_path)
    assert back.seed == k.seed and back.keys == k.keys and sorted(back.prior) == sorted(k.prior)
    for user in k.prior:
        np.testing.assert_array_equal(back.prior[user].x, k.prior[user].x)
        np.testing.assert_array_equal(back.prior[user].y, k.prior[user].y)
