import numpy as np
import pytest

from attacks.scoring import reid_metrics

CLASSES = np.array(["a", "b", "c", "d"])


def test_perfect_attacker():
    truth = np.array(["a", "b", "c", "d", "a", "b"])
    scores = (truth[:, None] == CLASSES[None, :]).astype(float)
    m = reid_metrics(truth, CLASSES, scores)
    assert m["ap"] == 1.0 and m["top1"] == 1.0 and m["top5"] == 1.0
    assert m["chance_ap"] == pytest.approx(np.mean([2 / 6, 2 / 6, 1 / 6, 1 / 6]))
    assert m["x_chance"] == pytest.approx(1 / m["chance_ap"])


def test_hand_computed_average_precision():
    truth = np.array(["a", "b", "a"])
    scores = np.array([[0.9, 0.1, 0, 0], [0.8, 0.2, 0, 0], [0.1, 0.9, 0, 0]])
    m = reid_metrics(truth, CLASSES, scores)
    # user a: ranking 0.9(+), 0.8(-), 0.1(+) -> AP = (1 + 2/3) / 2; user b: 0.9(-), 0.2(+), 0.1(-) -> AP = 1/2
    assert m["ap"] == pytest.approx(((1 + 2 / 3) / 2 + 0.5) / 2)
    assert m["n_users"] == 2 and m["top1"] == pytest.approx(1 / 3)


def test_random_scores_sit_at_chance():
    rng = np.random.default_rng(0)
    classes = np.array([f"u{i}" for i in range(20)])
    truth = rng.choice(classes, size=4000)
    m = reid_metrics(truth, classes, rng.random((4000, 20)))
    assert 0.8 < m["x_chance"] < 1.25 and abs(m["top1"] - 0.05) < 0.02 and abs(m["top5"] - 0.25) < 0.03
