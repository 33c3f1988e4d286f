"""Passive batch property inference (seed 002 Algorithm 7) on real CNN updates: a batch property
classifier on max-pooled Δw separates batches with the synthetic corner mark from batches without
it, and falls to chance when its training labels are shuffled."""

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from leakbed.attacks.aux_updates import AuxTrainer, concat, sample_mix, split_by_property
from leakbed.attacks.gradient_features import pooled_features
from leakbed.attacks.property_passive import classifier
from leakbed.core.config import build_config
from leakbed.core.data import federation
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.models import build_model
from leakbed.core.training import state_arrays

TRAIN = {"epochs": 1, "batch_size": 8, "lr": 0.1, "optimizer": "sgd", "momentum": 0.0, "steps": 1}


def _updates(trainer, prop, non, count, rng, tag):
    x, y = [], []
    for i in range(count):
        for label in (1, 0):
            k = int(rng.integers(4, 9)) if label else 0  # strong signal: half to all of the batch holds the mark
            x.append(pooled_features(trainer.delta(sample_mix(prop, non, 8, k, rng), f"{tag}/{i}/{label}")))
            y.append(label)
    return np.stack(x), np.asarray(y)


def test_property_classifier_beats_chance_and_shuffled_labels_do_not():
    cfg = build_config({}, ["data.synthetic.users=6", "data.synthetic.image_size=8", "data.synthetic.examples_per_user=40"])
    fed = federation(cfg, "random")
    torch.manual_seed(0)
    arrays = state_arrays(build_model(cfg.model, fed.corpus))
    knowledge = AttackerKnowledge(fed.prior(), fed.corpus, cfg.model, [], seed=0, device="cpu")
    trainer = AuxTrainer(knowledge, arrays, TRAIN)
    prop, non = split_by_property(concat(list(knowledge.prior.values())))
    rng = np.random.default_rng(0)
    x_train, y_train = _updates(trainer, prop, non, 20, rng, "train")
    x_test, y_test = _updates(trainer, prop, non, 10, rng, "test")
    fitted = classifier("pooled", 50, 0).fit(x_train, y_train)
    auc = roc_auc_score(y_test, fitted.predict_proba(x_test)[:, 1])
    assert auc > 0.8
    nulls = []
    for seed in range(8):  # shuffled training labels: the mean AUC over shuffles is chance
        shuffled = classifier("pooled", 50, seed).fit(x_train, np.random.default_rng(seed).permutation(y_train))
        nulls.append(roc_auc_score(y_test, shuffled.predict_proba(x_test)[:, 1]))
    assert abs(np.mean(nulls) - 0.5) < 0.15 and np.mean(nulls) < auc - 0.2


def test_pooled_features_keep_both_axes():
    delta = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([7.0, -1.0], np.float32)}
    np.testing.assert_array_equal(pooled_features(delta), [7, -1, 2, 5, 3, 4, 5])
