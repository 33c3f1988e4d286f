"""Closed-world re-identification: which known user produced an anonymous update?

Seed 001 §4.3 and §6.1.1 (Table 3). Attackers: an MLP with one hidden layer of 128 ReLU units
trained with SGD (lr 0.01, momentum 0.9; the seed's 1e-6 learning-rate decay has no scikit-learn
equivalent and is left out), a linear SVM, and kNN with k = 10. They are trained on the
attacker's shadow updates (labelled by the identities it knows) and score every anonymous update.
Threat model: the honest-but-curious server; it sees only update vectors, rounds and its own
labelled shadow updates (computed on its prior data about known users).
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np
from pydantic import Field
from sklearn.base import ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.svm import LinearSVC

from leakbed.attacks.contract import NoParams, Params, ReidAttack, Scores

SOURCE = "seed 001 §4.3 (attack models), §6.1.1 (Table 3)"


class MLPParams(Params):
    epochs: int = Field(100, ge=1, le=100_000, description="training epochs of the MLP [count]")


class KNNParams(Params):
    k: int = Field(10, ge=1, le=1000, description="neighbours [count]")


def classify(clf: ClassifierMixin, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
    """Train on labelled shadow updates, score anonymous updates.

    Shadow updates whose replayed training diverged (non-finite entries, e.g. on a global model
    wrecked by a noise defense) are left out, as any attacker would; with none left the fit fails.
    """
    finite = np.isfinite(x_train).all(axis=1)
    if not finite.any():
        raise ValueError(f"all {len(x_train)} shadow updates are non-finite: the attacker's replayed training diverged")
    x_train, y_train = x_train[finite], y_train[finite]
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


def mlp_classifier(epochs: int, seed: int, n_train: int) -> MLPClassifier:
    return MLPClassifier(
        hidden_layer_sizes=(128,),
        activation="relu",
        solver="sgd",
        learning_rate_init=0.01,
        momentum=0.9,
        nesterovs_momentum=False,
        max_iter=epochs,
        batch_size=min(32, n_train),
        random_state=seed,
        n_iter_no_change=epochs,
    )


def _finite_rows(x: np.ndarray) -> int:
    return int(np.isfinite(x).all(axis=1).sum())


class MLP(ReidAttack):
    """The seed's MLP attacker (one hidden layer of 128 ReLU units, SGD)."""

    name: ClassVar[str] = "mlp"
    params = MLPParams
    source = SOURCE

    def classify(self, params: MLPParams, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
        return classify(mlp_classifier(params.epochs, seed, _finite_rows(x_train)), x_train, y_train, x_test)


class SVM(ReidAttack):
    """The seed's linear SVM attacker."""

    name: ClassVar[str] = "svm"
    params = NoParams
    source = SOURCE
    score_kind = "margin"

    def classify(self, params: NoParams, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
        return classify(LinearSVC(C=1.0, random_state=seed), x_train, y_train, x_test)


class KNN(ReidAttack):
    """The seed's kNN attacker (k = 10)."""

    name: ClassVar[str] = "knn"
    params = KNNParams
    source = SOURCE

    def classify(self, params: KNNParams, seed: int, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> Scores:
        clf = KNeighborsClassifier(n_neighbors=min(params.k, max(1, _finite_rows(x_train))))
        return classify(clf, x_train, y_train, x_test)
