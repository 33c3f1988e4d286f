import numpy as np
import pytest

from leakbed.core.data import federation
from leakbed.core.data.corpus import Corpus, UserData
from leakbed.core.data.split import filter_users, prior_size, split_user
from tests.conftest import tiny_config


def _user(n):
    return UserData(x=np.arange(n, dtype=np.float32)[:, None], y=np.arange(n) % 3, t=np.arange(n, dtype=float)[::-1].copy())


def test_random_split_is_a_disjoint_partition():
    d = _user(50)
    s = split_user(d, "random", prior_fraction=0.5, prior_count=0, test_fraction=0.2, rng=np.random.default_rng(0))
    parts = [set(p.x[:, 0].tolist()) for p in (s.prior, s.private, s.test)]
    assert len(parts[0]) == 25 and len(parts[2]) == 5 and len(parts[1]) == 20
    assert set().union(*parts) == set(range(50)) and not (parts[0] & parts[1]) and not (parts[1] & parts[2])


def test_chrono_prior_precedes_private():
    d = _user(40)  # t decreases with index: the latest examples come first
    s = split_user(d, "chrono", prior_fraction=0.25, prior_count=0, test_fraction=0.0, rng=np.random.default_rng(0))
    assert s.prior.t.max() < s.private.t.min()
    assert len(s.prior) == 10


def test_prior_count_overrides_fraction_and_keeps_device_data():
    assert prior_size(100, 0.5, 7) == 7
    assert prior_size(5, 0.5, 50) == 4
    assert prior_size(3, 0.01, 0) == 1


def test_unknown_rule():
    with pytest.raises(ValueError):
        split_user(_user(10), "psychic", prior_fraction=0.5, prior_count=0, test_fraction=0.0, rng=np.random.default_rng(0))


def test_filter_users_min_and_max():
    c = Corpus("c", "multiclass", 3, (1,), {"a": _user(5), "b": _user(50), "c": _user(30), "d": _user(40)})
    kept = filter_users(c, min_examples=20, max_users=2)
    assert kept.user_ids == ["b", "c"]


def test_federation_is_deterministic_and_private_differs_by_rule():
    cfg = tiny_config()
    a, b = federation(cfg, "random"), federation(cfg, "chrono")
    assert a.user_ids == b.user_ids and len(a.user_ids) == 6
    u = a.user_ids[0]
    assert not np.array_equal(a.splits[u].prior.t, b.splits[u].prior.t)
    assert len(a.test_set()) == sum(len(s.test) for s in a.splits.values())
    assert set(a.prior()) == set(a.user_ids)


def test_private_count_caps_the_device_and_leaves_prior_and_test_as_they_were():
    d = _user(50)
    kw = dict(prior_fraction=0.5, prior_count=0, test_fraction=0.2)
    full = split_user(d, "random", rng=np.random.default_rng(0), **kw)
    capped = split_user(d, "random", rng=np.random.default_rng(0), private_count=8, **kw)
    assert len(capped.private) == 8 and set(capped.private.x[:, 0]) < set(full.private.x[:, 0])
    assert np.array_equal(capped.prior.x, full.prior.x) and np.array_equal(capped.test.x, full.test.x)
    cfg = tiny_config()
    fed = federation(cfg.model_copy(update={"split": cfg.split.model_copy(update={"private_count": 5})}), "random")
    assert {len(fed.splits[u].private) for u in fed.splits} == {5}
