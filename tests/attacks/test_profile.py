import numpy as np
import pytest

from attacks import profile
from attacks.records import RoundSnapshot
from core.config import AttackConfig, ExperimentConfig, ProfileConfig, SyntheticConfig
from referee import score_profile
from tests.attacks.reid_store import make

ATTACK = AttackConfig(suite=["profile"], mlp_epochs=60, profile=ProfileConfig(target_class=0, top_k=5, fit_ratio=1.5))


def test_precision_at_k_counts_distinct_users_in_ranking_order():
    owners = np.array(["a", "a", "b", "c", "d"])
    share = np.array([0.5, 0.5, 0.0, 0.4, 0.0])
    m = score_profile.profile_metrics(owners, share, np.array([0.9, 0.8, 0.7, 0.6, 0.1]), fit_ratio=1.0, k=3)
    assert [t[0] for t in m["top"]] == ["a", "b", "c"]
    assert m["precision_at_k"] == pytest.approx(2 / 3) and m["chance"] == 0.5


@pytest.mark.parametrize("shuffle", [False, True])
def test_profile_finds_fitting_users_and_falls_to_chance_on_shuffled_owners(tmp_path, shuffle):
    fx = make(tmp_path, ATTACK, users=30, shuffle=shuffle)
    profile.fit(fx.store, fx.knowledge)
    m = score_profile.score(fx.referee, fx.store, ExperimentConfig(attack=ATTACK), tmp_path)
    assert (tmp_path / m["figures"][0]).is_file()
    if shuffle:
        assert m["ap"] < 1.6 * m["chance_ap"], m
    else:
        assert m["ap"] > 2 * m["chance_ap"] and m["precision_at_k"] >= 0.8 > m["chance"], m


def test_profile_updates_train_on_the_class_only(tmp_path):
    """on_round replays a device update with the pooled prior examples of the target class."""
    from attacks.knowledge import AttackerKnowledge
    from core.config import ModelConfig
    from core.data.synthetic import generate
    from core.models import attack_keys, build_model
    from core.store import UpdateStore
    from core.training import state_arrays

    corpus = generate(SyntheticConfig(users=3, examples_per_user=20, image_size=8), 0)
    model = build_model(ModelConfig(), corpus)
    kn = AttackerKnowledge(corpus.users, corpus, ModelConfig(), ATTACK, attack_keys(model, ["final"]), 0, "cpu")
    assert set(profile.profile_data(kn).y) == {0}
    store = UpdateStore(tmp_path)
    snap = RoundSnapshot(1, state_arrays(model), {"epochs": 1, "batch_size": 8, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0})
    profile.on_round(store, kn, snap)
    vecs = profile.read_profile(store)
    assert vecs.shape[0] == 4 and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    bad = AttackerKnowledge(corpus.users, corpus, ModelConfig(), AttackConfig(profile=ProfileConfig(target_class=99)), [], 0)
    with pytest.raises(ValueError, match="target_class 99"):
        profile.profile_data(bad)
