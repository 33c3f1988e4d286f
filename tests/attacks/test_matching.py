import numpy as np
import pytest
import torch

from leakbed.attacks import matching
from leakbed.core.config import AttackConfig
from tests.attacks.reid_store import fit, make, score

ATTACK = AttackConfig(suite=["matching"], params={"matching": {"epochs": 15, "pairs": 2000, "eval_pairs": 4000}})


def test_balanced_pairs_are_half_positive_and_distinct():
    labels = np.repeat(np.arange(10), 4)
    i, j, same = matching.balanced_pairs(labels, 1000, np.random.default_rng(0))
    assert same.mean() == 0.5 and np.all(i != j)
    assert np.array_equal(labels[i] == labels[j], same.astype(bool))


@pytest.mark.parametrize("shuffle,low,high", [(False, 0.8, 1.0), (True, 0.35, 0.65)])
def test_siamese_matches_biased_users_and_falls_to_chance_on_shuffled_owners(tmp_path, shuffle, low, high):
    fx = make(tmp_path, ATTACK, shuffle=shuffle)
    fit(fx, "matching")
    m = score(fx, "matching", tmp_path)
    assert m["chance"] == 0.5 and m["pairs"] == 4000
    assert low < m["ap"] < high and low < m["prior_ap"] < high, m


def test_same_seed_same_embeddings(tmp_path):
    """The same seed gives the same network whatever the worker process drew before (its earlier tasks)."""
    out = []
    for k in range(2):
        fx = make(tmp_path / str(k), ATTACK)
        torch.rand(1 + 100 * k)  # a different global torch RNG state before each fit
        out.append(fit(fx, "matching")["emb"])
    assert np.array_equal(out[0], out[1])
