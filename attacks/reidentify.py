"""Closed-world re-identification: which known user produced an anonymous update?

Seed 001 §4.3 and §6.1.1 (Table 3). Attackers: an MLP with one hidden layer of 128 ReLU units
trained with SGD (lr 0.01, momentum 0.9; the seed's 1e-6 learning-rate decay has no scikit-learn
equivalent and is left out), a linear SVM, and kNN with k = 10. They are trained on the
attacker's shadow updates (labelled by the identities it knows) and score every anonymous update.
Threat model: sees only update vectors, rounds and its own labelled shadow updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.svm import LinearSVC

from core.config import AttackConfig


def make_attacker(name: str, cfg: AttackConfig, seed: int) -> ClassifierMixin:
    if name == "mlp":
        return MLPClassifier(
            hidden_layer_sizes=(128,),
            activation="relu",
            solver="sgd",
            learning_rate_init=0.01,
            momentum=0.9,
            nesterovs_momentum=False,
            max_iter=cfg.mlp_epochs,
            batch_size=32,
            random_state=seed,
            n_iter_no_change=cfg.mlp_epochs,
        )
    if name == "svm":
        return LinearSVC(C=1.0, random_state=seed)
    if name == "knn":
        return KNeighborsClassifier(n_neighbors=cfg.knn_k)
    raise ValueError(f"unknown attacker {name!r}")


@dataclass(frozen=True)
class Scores:
    """Per-update scores over the attacker's known identities (higher = more likely)."""

    classes: np.ndarray
    scores: np.ndarray


def fit_score(name: str, cfg: AttackConfig, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
    """Train on labelled shadow updates, score anonymous updates.

    Shadow updates whose replayed training diverged (non-finite entries, e.g. on a global model
    wrecked by a noise defense) are left out, as any attacker would; with none left the fit fails.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    finite = np.isfinite(x_train).all(axis=1)
    if not finite.any():
        raise ValueError(f"all {len(x_train)} shadow updates are non-finite: the attacker's replayed training diverged")
    x_train, y_train = x_train[finite], y_train[finite]
    clf = make_attacker(name, cfg, seed)
    if name == "knn":
        clf.set_params(n_neighbors=min(cfg.knn_k, len(x_train)))
    if name == "mlp":
        clf.set_params(batch_size=min(32, len(x_train)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x_train, y_train)
    if hasattr(clf, "predict_proba"):
        scores = clf.predict_proba(x_test)
    else:
        scores = clf.decision_function(x_test)
        if scores.ndim == 1:  # two classes: margin for classes_[1]
            scores = np.stack([-scores, scores], axis=1)
    return Scores(classes=np.asarray(clf.classes_), scores=np.asarray(scores, dtype=np.float64))
