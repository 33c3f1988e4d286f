"""The attack side sees only what a curious server sees: a boundary checked, not a convention."""

import ast
import dataclasses
import pickle
from pathlib import Path

import numpy as np

from attacks import AnonymousUpdate, RoundSnapshot
from leakbed.data import federation
from server.run_parts import knowledge
from tests.conftest import REPO, tiny_config

FORBIDDEN_IMPORTS = ("flwr", "server", "client", "ray")
FORBIDDEN_NAMES = ("truth", "referee", "node_id", "partition", "src_node", "user_id")


def _attack_modules():
    return sorted((REPO / "attacks").rglob("*.py"))


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
                assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"


def test_attack_code_never_names_ground_truth():
    for path in _attack_modules():
        code = ast.unparse(ast.parse(path.read_text()))  # docstrings stay, comments go
        tree = ast.parse(code)
        idents = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
        }
        idents |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}
        bad = {i for i in idents for word in FORBIDDEN_NAMES if word in i.lower()}
        assert not bad, f"{Path(path).name} uses {bad}"


def test_records_carry_no_identity():
    assert [f.name for f in dataclasses.fields(AnonymousUpdate)] == ["update_id", "round", "vector", "num_examples", "arrays"]
    assert [f.name for f in dataclasses.fields(RoundSnapshot)] == ["round", "arrays", "train_config"]


def test_attacker_knowledge_holds_prior_data_only():
    cfg = tiny_config()
    fed = federation(cfg, "random")
    k = knowledge(cfg, fed, ["fc2.weight"])
    assert k.corpus_meta.users == {}
    blob = pickle.dumps(k)
    for user, split in fed.splits.items():
        prior = {row.tobytes() for row in split.prior.x}
        assert not prior & {row.tobytes() for row in split.private.x}
        assert np.array_equal(k.prior[user].x, split.prior.x)
        # no private example travels to the attack workers
        assert split.private.x[0].tobytes() not in blob
