import numpy as np
import pytest

from leakbed.client.defenses import apply_data
from leakbed.core.data import UserData, federation
from leakbed.defenses.augment import bkg_repl, clusters, mm_aug, rand_aug
from leakbed.defenses.background import background_pool
from leakbed.defenses.contract import DeviceContext
from tests.conftest import device_round, tiny_config


def _pool(cfg):  # noqa: ANN001, ANN202
    return background_pool(cfg.background, cfg.data, cfg.split, cfg.seed, "random")


def _data(n, value, label):
    return UserData(x=np.full((n, 1, 2, 2), value, np.float32), y=np.full(n, label), t=np.arange(n, dtype=float))


USER, BKG = _data(20, 0.0, 0), _data(50, 1.0, 1)


def test_bkg_repl_replaces_the_fraction():
    out = bkg_repl(USER, BKG, 0.25, np.random.default_rng(0))
    assert len(out) == 20 and (out.y == 1).sum() == 5 and (out.x.reshape(20, -1)[:, 0] == 1).sum() == 5
    assert (bkg_repl(USER, BKG, 1.0, np.random.default_rng(0)).y == 1).all()
    assert (bkg_repl(USER, BKG, 0.0, np.random.default_rng(0)).y == 0).all()


def test_rand_aug_adds_alpha_times_the_data():
    out = rand_aug(USER, BKG, 2.0, np.random.default_rng(0))
    assert len(out) == 60 and (out.y == 1).sum() == 40 and (out.y[:20] == 0).all()


def test_mm_aug_draws_from_one_cluster_only():
    bkg = UserData(x=np.repeat(np.arange(40, dtype=np.float32), 4).reshape(40, 1, 2, 2), y=np.arange(40) % 4, t=np.zeros(40))
    clusters = np.arange(40) // 10
    out = mm_aug(USER, bkg, clusters, 1.0, np.random.default_rng(3))
    added = out.x[20:, 0, 0, 0]
    assert len(out) == 40 and len({int(v) // 10 for v in added}) == 1


def test_background_is_a_separate_population_with_the_same_task():
    cfg = tiny_config("background.users=4")
    fed = federation(cfg, "random")
    bkg = _pool(cfg)
    assert bkg.x.shape[1:] == fed.corpus.input_shape and bkg.y.max() < fed.corpus.num_classes
    private = {row.tobytes() for s in fed.splits.values() for row in s.private.x}
    assert not private & {row.tobytes() for row in bkg.x}


def test_clusters_of_the_shared_model_features():
    cfg = tiny_config("background.users=4")
    device = device_round(cfg, 0)
    labels = clusters(DeviceContext(device.plan, 0, 1), 3)
    assert len(labels) == len(_pool(cfg)) and len(set(labels)) == 3


def test_only_adopters_change_their_data():
    cfg = tiny_config('defenses=[{name="rand-aug", alpha=1.0, users=["user1"]}]')
    fed = federation(cfg, "random")
    for pid, user in enumerate(fed.user_ids):
        data = fed.splits[user].private
        out = apply_data(device_round(cfg, pid), data)
        assert len(out) == (2 * len(data) if user == "user1" else len(data))
    one = fed.user_ids.index("user1")
    again = apply_data(device_round(cfg, one, 2), fed.splits["user1"].private)  # a user blends the same way every round
    assert np.array_equal(again.x, apply_data(device_round(cfg, one, 1), fed.splits["user1"].private).x)


def test_outside_background_needs_outside_users():
    from leakbed.core.data import DataError

    cfg = tiny_config("background.source='outside'")
    with pytest.raises(DataError, match="no users outside"):
        _pool(cfg)
