import numpy as np
import pytest

from core.data import UserData, federation
from defenses.augment import _clusters, apply_data_defenses, bkg_repl, mm_aug, rand_aug
from defenses.background import background_pool
from tests.conftest import tiny_config


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
    bkg = background_pool(cfg, "random")
    assert bkg.x.shape[1:] == fed.corpus.input_shape and bkg.y.max() < fed.corpus.num_classes
    private = {row.tobytes() for s in fed.splits.values() for row in s.private.x}
    assert not private & {row.tobytes() for row in bkg.x}


def test_clusters_of_the_shared_model_features():
    cfg = tiny_config("background.users=4")
    labels = _clusters(cfg.model_dump_json(), "random", 3)
    assert len(labels) == len(background_pool(cfg, "random")) and len(set(labels)) == 3


def test_only_adopters_change_their_data():
    cfg = tiny_config('defenses=[{name="rand-aug", strength=1.0, users=["user1"]}]')
    fed = federation(cfg, "random")
    for user in fed.user_ids:
        data = fed.splits[user].private
        out = apply_data_defenses(cfg, fed, user, data)
        assert len(out) == (2 * len(data) if user == "user1" else len(data))
    again = apply_data_defenses(cfg, fed, "user1", fed.splits["user1"].private)
    assert np.array_equal(again.x, apply_data_defenses(cfg, fed, "user1", fed.splits["user1"].private).x)


def test_outside_background_needs_outside_users():
    from core.data import DataError

    cfg = tiny_config("background.source='outside'")
    with pytest.raises(DataError, match="no users outside"):
        background_pool(cfg, "random")
