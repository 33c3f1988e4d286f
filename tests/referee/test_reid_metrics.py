import numpy as np
import pytest

from leakbed.core.reid_metrics import random_ranking_ap, reid_metrics

CLASSES = np.array(["a", "b", "c", "d"])


def test_perfect_attacker():
    truth = np.array(["a", "b", "c", "d", "a", "b"])
    scores = (truth[:, None] == CLASSES[None, :]).astype(float)
    m = reid_metrics(truth, CLASSES, scores)
    assert m["ap"] == 1.0 and m["top1"] == 1.0 and m["top5"] == 1.0
    assert m["prevalence"] == pytest.approx(np.mean([2 / 6, 2 / 6, 1 / 6, 1 / 6]))
    assert m["chance_ap"] == pytest.approx(np.mean([random_ranking_ap(2, 6)] * 2 + [random_ranking_ap(1, 6)] * 2))
    assert m["x_chance"] == pytest.approx(1 / m["chance_ap"])


def test_hand_computed_average_precision():
    truth = np.array(["a", "b", "a"])
    scores = np.array([[0.9, 0.1, 0, 0], [0.8, 0.2, 0, 0], [0.1, 0.9, 0, 0]])
    m = reid_metrics(truth, CLASSES, scores)
    # user a: ranking 0.9(+), 0.8(-), 0.1(+) -> AP = (1 + 2/3) / 2; user b: 0.9(-), 0.2(+), 0.1(-) -> AP = 1/2
    assert m["ap"] == pytest.approx(((1 + 2 / 3) / 2 + 0.5) / 2)
    assert m["n_users"] == 2 and m["top1"] == pytest.approx(1 / 3)


def _monte_carlo_ap(p, n, trials=20000, seed=0):
    """AP of random rankings (no ties), vectorised: mean over positives of precision at their rank."""
    rel = np.zeros((trials, n))
    rel[:, :p] = 1.0
    rel = np.random.default_rng(seed).permuted(rel, axis=1)
    precision = np.cumsum(rel, axis=1) / np.arange(1, n + 1)
    return float(((precision * rel).sum(axis=1) / p).mean())


@pytest.mark.parametrize("p,n", [(1, 1), (1, 7), (3, 10), (4, 240), (10, 10)])
def test_random_ranking_ap_matches_monte_carlo(p, n):
    assert random_ranking_ap(p, n) == pytest.approx(_monte_carlo_ap(p, n), rel=0.02)
    assert random_ranking_ap(1, n) == pytest.approx(sum(1 / k for k in range(1, n + 1)) / n)


@pytest.mark.long
def test_monte_carlo_ap_is_sklearns_ap():
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(1)
    y = np.array([1, 0, 0, 1, 0, 1, 0, 0, 0, 0], bool)
    sk = np.mean([average_precision_score(y, rng.random(10)) for _ in range(3000)])
    assert sk == pytest.approx(_monte_carlo_ap(3, 10), rel=0.03)


def test_few_updates_per_user_random_scores_stay_at_chance():
    rng = np.random.default_rng(1)
    classes = np.array([f"u{i}" for i in range(60)])
    truth = np.repeat(classes, 4)
    xs = [reid_metrics(truth, classes, rng.random((240, 60)))["x_chance"] for _ in range(30)]
    assert 0.85 < np.mean(xs) < 1.15  # the positive fraction alone would put random scores at ~2x


def test_random_scores_sit_at_chance():
    rng = np.random.default_rng(0)
    classes = np.array([f"u{i}" for i in range(20)])
    truth = rng.choice(classes, size=4000)
    m = reid_metrics(truth, classes, rng.random((4000, 20)))
    assert 0.8 < m["x_chance"] < 1.25 and abs(m["top1"] - 0.05) < 0.02 and abs(m["top5"] - 0.25) < 0.03


def test_ties_break_by_the_attacks_column_order():
    truth = np.array(["b", "c"])
    scores = np.ones((2, 4))  # every class tied in every row: the first column wins, as a stable sort has it
    m = reid_metrics(truth, CLASSES, scores)
    assert m["top1"] == 0.0 and reid_metrics(np.array(["a", "a"]), CLASSES, scores)["top1"] == 1.0


def test_a_class_left_out_takes_a_random_place_in_every_row():
    """The expectation ``top_k_hits`` gives for NaN columns is what inserting them at uniform places gives."""
    from leakbed.core.reid_metrics import top_k_hits

    rng = np.random.default_rng(3)
    classes = np.array([f"u{i}" for i in range(6)])
    truth = rng.choice(classes, 40)
    scores = rng.random((40, 6)) + 0.6 * (truth[:, None] == classes[None, :])
    omitted = np.array([1, 4])
    cut = scores.copy()
    cut[:, omitted] = np.nan
    kept = np.setdiff1d(np.arange(6), omitted)
    sims = {1: [], 5: []}
    for _ in range(1000):
        drawn = scores.copy()
        for r in range(40):  # the kept classes in their order, the omitted ones at uniformly random places
            order = list(kept[np.argsort(-scores[r, kept], kind="stable")])
            for j in rng.permutation(omitted):
                order.insert(int(rng.integers(0, len(order) + 1)), j)
            drawn[r, order] = np.arange(6, 0, -1)
        for k in sims:
            sims[k].append(np.mean((classes[np.argsort(-drawn, axis=1)[:, :k]] == truth[:, None]).any(axis=1)))
    for k in sims:
        assert top_k_hits(truth, classes, cut, k, np.zeros(40, bool)).mean() == pytest.approx(np.mean(sims[k]), abs=0.01)
    m = reid_metrics(truth, classes, cut)
    assert m["n_users"] == len(np.unique(truth)) and m["chance_ap"] == reid_metrics(truth, classes, scores)["chance_ap"]
