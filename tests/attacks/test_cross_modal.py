import numpy as np
import pytest

from leakbed.attacks import cross_modal, text_embed
from leakbed.core.config import AttackConfig
from leakbed.core.data.corpus import Corpus, UserData
from tests.attacks.reid_store import fit, make, score

SIAMESE = {"epochs": 20, "pairs": 2000, "eval_pairs": 4000}
ATTACK = AttackConfig(suite=["cross-modal"], params={"cross-modal": {"encoder": "tfidf", "siamese": SIAMESE}})


def test_captions_come_from_labels_and_attributes():
    meta = Corpus("synthetic", "multiclass", 10, (3, 16, 16), {})
    data = UserData(np.zeros((2, 3, 16, 16)), np.array([0, 5]), np.zeros(2), {"tone": np.array([2, 2])})
    assert text_embed.captions(data, meta) == ["a photo of a cat, tone 2", "a photo of a boat, tone 2"]
    femnist = Corpus("femnist", "multiclass", 62, (1, 28, 28), {})
    assert text_embed.captions(UserData(np.zeros((1, 1, 28, 28)), np.array([36]), np.zeros(1)), femnist) == [
        "a photo of a handwritten small letter a"
    ]


def test_user_embedding_is_the_mean_of_sentence_embeddings():
    users, phi = text_embed.user_embeddings({"a": ["red cat", "blue dog"], "b": ["red cat"]}, "tfidf")
    _, one = text_embed.user_embeddings({"x": ["red cat"], "y": ["blue dog"]}, "tfidf")
    assert users == ["a", "b"] and phi.shape[0] == 2
    assert np.allclose(phi[0], one.mean(axis=0)) and np.allclose(phi[1], one[0])


def test_paired_users_are_a_seeded_strict_subset():
    ids = [f"u{k}" for k in range(20)]
    p = cross_modal.paired_users(ids, 0, 0.5)
    assert len(p) == 10 and p == cross_modal.paired_users(ids, 0, 0.5) and p != cross_modal.paired_users(ids, 1, 0.5)


@pytest.mark.parametrize("shuffle", [False, True])
def test_text_prior_links_updates_and_falls_to_chance_on_shuffled_owners(tmp_path, shuffle):
    fx = make(tmp_path, ATTACK, users=30, shuffle=shuffle)
    r = fit(fx, "cross-modal")
    assert str(r["encoder"]) == "tfidf" and len(r["paired"]) == 15
    m = score(fx, "cross-modal", tmp_path)
    if shuffle:
        assert 0.35 < m["ap"] < 0.65 and m["rank_x_chance"] < 1.6, m
    else:
        assert m["ap"] > 0.7 and m["text_only_ap"] > 0.58 and m["rank_x_chance"] > 1.5, m
