import numpy as np

from leakbed.core.config import SyntheticConfig
from leakbed.core.data.synthetic import generate


def _class_dists(corpus, k):
    return np.stack([np.bincount(d.y, minlength=k) / len(d) for d in corpus.users.values()])


def _mean_tv_to_population(dists):
    pop = dists.mean(axis=0)
    return float(0.5 * np.abs(dists - pop).sum(axis=1).mean())


def test_deterministic_by_seed():
    cfg = SyntheticConfig(users=5, examples_per_user=20)
    a, b, c = generate(cfg, 1), generate(cfg, 1), generate(cfg, 2)
    assert all(np.array_equal(a.users[u].x, b.users[u].x) for u in a.users)
    assert not np.array_equal(a.users["user0"].x[:5], c.users["user0"].x[:5])


def test_shapes_and_ranges():
    corpus = generate(SyntheticConfig(users=4, examples_per_user=30, image_size=12, channels=3), 0)
    assert corpus.input_shape == (3, 12, 12) and corpus.task == "multiclass"
    for d in corpus.users.values():
        assert d.x.shape[1:] == (3, 12, 12) and d.x.dtype == np.float32
        assert 0.0 <= d.x.min() and d.x.max() <= 1.0
        assert np.all(np.diff(d.t) >= 0), "timestamps follow the user's timeline"
        assert set(d.attrs) == {"album", "property", "interest", "tone"}


def test_bias_controls_how_users_differ():
    biased = generate(SyntheticConfig(users=30, examples_per_user=200, bias=0.9), 0)
    iid = generate(SyntheticConfig(users=30, examples_per_user=200, bias=0.0), 0)
    tv_biased = _mean_tv_to_population(_class_dists(biased, 10))
    tv_iid = _mean_tv_to_population(_class_dists(iid, 10))
    assert tv_biased > 0.25 and tv_biased > 2.5 * tv_iid, (tv_biased, tv_iid)
    # capture style: per-user mean colour differs only when biased
    spread = lambda c: np.std([d.x.mean(axis=(0, 2, 3)) for d in c.users.values()], axis=0).mean()  # noqa: E731
    assert spread(biased) > 3 * spread(iid)


def test_preferences_drift_over_time():
    cfg = SyntheticConfig(users=20, examples_per_user=300, drift=1.0, albums_per_user=1)
    corpus = generate(cfg, 0)
    early, late = [], []
    for d in corpus.users.values():
        half = len(d) // 2
        early.append(np.bincount(d.y[:half], minlength=10) / half)
        late.append(np.bincount(d.y[half:], minlength=10) / (len(d) - half))
    tv = 0.5 * np.abs(np.array(early) - np.array(late)).sum(axis=1).mean()
    assert tv > 0.2
