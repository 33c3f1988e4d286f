import numpy as np
import pytest

from leakbed.attacks import registry
from leakbed.attacks.reidentify import KNNParams, MLPParams, mlp_classifier
from leakbed.core.reid_metrics import reid_metrics

PARAMS = {"mlp": {"epochs": 200}}


def fit_score(name: str, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray):  # noqa: ANN201
    """The attack's ``classify`` hook with its parameters (as a worker calls it)."""
    return registry.reid_attack(name).classify(registry.params_of(name, PARAMS.get(name)), seed, x_train, y_train, x_test)


def _users(rng, n_users, per_user, dim=64, spread=0.6):
    centres = rng.normal(size=(n_users, dim))
    labels = np.repeat([f"u{i}" for i in range(n_users)], per_user)
    x = np.repeat(centres, per_user, axis=0) + spread * rng.normal(size=(n_users * per_user, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels


def test_seed_architectures():
    mlp = mlp_classifier(MLPParams().epochs, 0, 100)
    assert mlp.hidden_layer_sizes == (128,) and mlp.solver == "sgd" and mlp.learning_rate_init == 0.01 and mlp.momentum == 0.9
    assert KNNParams().k == 10 and MLPParams().epochs == 100
    with pytest.raises(registry.PluginError, match="unknown attack 'oracle'"):
        registry.reid_attack("oracle")
    with pytest.raises(registry.PluginError, match="not a closed-world"):
        registry.reid_attack("matching")


@pytest.mark.parametrize("name", ["mlp", "svm", "knn"])
def test_attackers_find_users_and_fall_to_chance_on_shuffled_labels(name):
    rng = np.random.default_rng(0)
    x_tr, y_tr = _users(rng, 15, 20)
    x_te, y_te = x_tr[::2] + 0.1 * rng.normal(size=x_tr[::2].shape), y_tr[::2]
    s = fit_score(name, 0, x_tr, y_tr, x_te)
    assert reid_metrics(y_te, s.classes, s.scores)["x_chance"] > 8
    s = fit_score(name, 0, x_tr, rng.permutation(y_tr), x_te)
    assert reid_metrics(y_te, s.classes, s.scores)["x_chance"] < 2.5


def test_diverged_shadow_updates_are_left_out_and_all_diverged_fails_clearly():
    rng = np.random.default_rng(1)
    x_tr, y_tr = _users(rng, 6, 10)
    x_te, y_te = x_tr[::2] + 0.1 * rng.normal(size=x_tr[::2].shape), y_tr[::2]
    broken = x_tr.copy()
    broken[::3, 0] = np.nan  # a third of the replays diverged
    s = fit_score("knn", 0, broken, y_tr, x_te)
    assert reid_metrics(y_te, s.classes, s.scores)["x_chance"] > 3
    with pytest.raises(ValueError, match="non-finite"):
        fit_score("knn", 0, np.full_like(x_tr, np.inf), y_tr, x_te)
