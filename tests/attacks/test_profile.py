import numpy as np
import pytest

from leakbed.attacks import profile
from leakbed.attacks.profile import ProfileParams
from leakbed.core.config import AttackConfig, SyntheticConfig
from leakbed.core.records import RoundSnapshot
from leakbed.referee import score_profile
from tests.attacks.reid_store import fit, make, score

ATTACK = AttackConfig(suite=["profile"], params={"profile": {"mlp_epochs": 60, "target_class": 0, "top_k": 5, "fit_ratio": 1.5}})


def test_precision_at_k_counts_distinct_users_in_ranking_order():
    owners = np.array(["a", "a", "b", "c", "d"])
    share = np.array([0.5, 0.5, 0.0, 0.4, 0.0])
    m = score_profile.profile_metrics(owners, share, np.array([0.9, 0.8, 0.7, 0.6, 0.1]), fit_ratio=1.0, k=3)
    assert [t[0] for t in m["top"]] == ["a", "b", "c"]
    assert m["precision_at_k"] == pytest.approx(2 / 3) and m["chance"] == 0.5


@pytest.mark.parametrize("shuffle", [False, True])
def test_profile_finds_fitting_users_and_falls_to_chance_on_shuffled_owners(tmp_path, shuffle):
    fx = make(tmp_path, ATTACK, users=30, shuffle=shuffle)
    fit(fx, "profile")
    m = score(fx, "profile", tmp_path)
    assert (tmp_path / m["figures"][0]).is_file()
    if shuffle:
        assert m["ap"] < 1.6 * m["chance_ap"], m
    else:
        assert m["ap"] > 2 * m["chance_ap"] and m["precision_at_k"] >= 0.8 > m["chance"], m


def _profile_setup(tmp_path):
    from leakbed.core.config import ModelConfig
    from leakbed.core.data.synthetic import generate
    from leakbed.core.knowledge import AttackerKnowledge
    from leakbed.core.models import attack_keys, build_model
    from leakbed.core.store import UpdateStore
    from leakbed.core.training import state_arrays

    corpus = generate(SyntheticConfig(users=3, examples_per_user=20, image_size=8), 0)
    model = build_model(ModelConfig(), corpus)
    kn = AttackerKnowledge(corpus.users, corpus, ModelConfig(), attack_keys(model, ["final"]), 0, "cpu")
    return kn, UpdateStore(tmp_path), state_arrays(model)


def test_profile_updates_train_on_the_class_only(tmp_path):
    """on_round replays a device update with the pooled prior examples of the target class."""
    kn, store, arrays = _profile_setup(tmp_path)
    assert set(profile.profile_data(kn, 0).y) == {0}
    snap = RoundSnapshot(1, arrays, {"epochs": 1, "batch_size": 8, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0})
    profile.profile_updates(store, kn, ProfileParams(), snap)
    vecs = profile.read_profile(store)
    assert vecs.shape[0] == 4 and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="target_class 99"):
        profile.profile_data(kn, 99)


def test_profile_updates_take_the_local_steps_the_server_sent(tmp_path):
    """With fl.local_steps = S the devices train S batches, and so must the attacker's profile replay: its update
    equals a local update of exactly those steps and differs from full epochs (which an earlier TrainConfig,
    built without ``steps``, trained)."""
    import zlib

    import torch

    from leakbed.core.models import build_model
    from leakbed.core.training import TrainConfig, load_arrays, local_update, state_arrays
    from leakbed.core.updates import delta_vector

    kn, store, arrays = _profile_setup(tmp_path)
    train = {"epochs": 3, "batch_size": 4, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0}
    params = ProfileParams(updates_per_round=1)
    profile.profile_updates(store, kn, params, RoundSnapshot(1, arrays, {**train, "steps": 1}))
    one_step = profile.read_profile(store)[0]

    def replay(cfg: TrainConfig) -> np.ndarray:
        data = profile.profile_data(kn, 0)
        size = int(np.median([len(d) for d in kn.prior.values()]))
        subset = data.take(np.random.default_rng([kn.seed, 1, 0x9F0F]).choice(len(data), min(size, len(data)), replace=False))
        model = build_model(kn.model, kn.corpus_meta)
        load_arrays(model, arrays)
        seed = zlib.crc32(f"{kn.seed}/1/0/profile".encode())
        torch.manual_seed(seed)
        local_update(model, subset, kn.corpus_meta.task, cfg, seed=seed, device=torch.device("cpu"))
        return delta_vector(arrays, state_arrays(model), kn.keys)

    assert np.allclose(one_step, replay(TrainConfig.from_config({**train, "steps": 1})), atol=1e-6)
    assert not np.allclose(one_step, replay(TrainConfig.from_config(train)), atol=1e-3)  # full epochs: another update
