"""Passive batch property inference (seed 002 §7.1.4, Algorithm 7; experiments §7.2.3-7.2.4).

Threat model: the honest-but-curious server sees every anonymous update and each round's global
model; it holds auxiliary data labelled with the property (its prior data) but never a device's
data. Each round it computes auxiliary updates on batches with and without the property on that
round's global model (Algorithm 7); after training it fits the batch property classifier (random
forest with 50 trees on globally max-pooled Δw; logistic regression on the embedding layer's bag of
words for text models) and scores every observed update; the other classifier's scores are kept
beside (``scores_other``) because on our data the choice matters. Per-user means (whole-dataset inference)
and the per-round timeline ("when does the property appear", Figure 7.5) are the referee's views of
the same scores. Works in the FedSGD setting (``fl.local_steps = 1``) and with FedAvg.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from leakbed.attacks.aux_updates import AuxTrainer, concat, sample_mix, split_by_property
from leakbed.attacks.contract import Attack, AttackContext, Needs, Outputs, Params
from leakbed.attacks.gradient_features import update_features
from leakbed.core.inputs import InputsView
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.records import RoundSnapshot
from leakbed.core.store import UpdateStore

NAME = "property"
AUX_KIND = "property_aux"


class PropertyParams(Params):
    """Passive batch property inference (seed 002 §7.1.4, Algorithm 7) and its aggregate-level form (§7.2.7)."""

    aux_updates: int = Field(
        8, ge=1, le=10_000, description="auxiliary updates with and without the property each round, per class [updates]"
    )
    trees: int = Field(50, ge=1, le=10_000, description="random-forest trees (seed: 50) [count]")
    positive_fraction: float = Field(
        0.5, gt=0.0, le=1.0, description="largest property share of an auxiliary positive batch (drawn uniformly) [fraction]"
    )
    holder_rate: float = Field(
        0.05, ge=0.0, lt=1.0, description="a user holds the property when above this share of its updates' examples do [fraction]"
    )


def aux_round(store: UpdateStore, knowledge: AttackerKnowledge, opts: PropertyParams, snap: RoundSnapshot) -> None:
    """Algorithm 7 lines 4-9: labelled auxiliary updates on this round's global model."""
    prop, non = split_by_property(concat(list(knowledge.prior.values())))
    trainer = AuxTrainer(knowledge, snap.arrays, snap.train_config)
    n = trainer.update_size()
    rng = np.random.default_rng([knowledge.seed, snap.round, 0x7A])
    feats, labels, fractions = [], [], []
    for i in range(opts.aux_updates):
        for label in (1, 0):
            k = max(1, round(rng.uniform(0, opts.positive_fraction) * n)) if label else 0
            delta = trainer.delta(sample_mix(prop, non, n, min(k, n), rng), f"{snap.round}/{i}/{label}")
            feats.append(update_features(delta)[0])
            labels.append(label)
            fractions.append(min(k, n) / n)
    store._write(
        AUX_KIND,
        f"r{snap.round:06d}",
        {"features": np.stack(feats), "labels": np.asarray(labels), "fractions": np.asarray(fractions)},
    )


def read_aux(store: UpdateStore, kind: str) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for f in sorted((store.root / kind).glob("r*.npz")):
        with np.load(f) as z:
            xs.append(z["features"])
            ys.append(z["labels"])
    if not xs:
        raise ValueError(f"no auxiliary updates in the attack's folder ({kind}); did any round run?")
    return np.concatenate(xs), np.concatenate(ys)


def classifier(kind: str, trees: int, seed: int) -> RandomForestClassifier | Pipeline:
    """§7.1.4: logistic regression on embedding-layer features, else a 50-tree random forest."""
    if kind == "embedding":
        return logistic()
    return RandomForestClassifier(n_estimators=trees, random_state=seed, n_jobs=1)


def logistic() -> Pipeline:
    """Standardised logistic regression: the seed's choice for embedding features, and reported beside
    the forest for pooled ones (on the synthetic corner mark it generalised across rounds far better)."""
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000, C=1.0))


def fit_both(kind: str, trees: int, seed: int, x: np.ndarray, y: np.ndarray, queries: np.ndarray) -> dict[str, np.ndarray]:
    """Scores of the seed's classifier (``scores``) and of the other one (``scores_forest`` or
    ``scores_logistic``) for the queries."""
    if not len(queries):
        return {"scores": np.empty(0), "scores_other": np.empty(0)}
    seed_model = classifier(kind, trees, seed).fit(x, y)
    other = (RandomForestClassifier(n_estimators=trees, random_state=seed, n_jobs=1) if kind == "embedding" else logistic()).fit(
        x, y
    )
    return {"scores": seed_model.predict_proba(queries)[:, 1], "scores_other": other.predict_proba(queries)[:, 1]}


def anon_rounds(store: InputsView) -> list[int]:
    return store.anon_full_rounds()


class Property(Attack):
    name: ClassVar[str] = NAME
    params = PropertyParams
    needs = Needs(property_column=True, full_updates=True)
    source = "seed 002 §7.1.4, Algorithm 7; experiments §7.2.3-7.2.4, Figure 7.5"
    threat = (
        "the honest-but-curious server: every anonymous update (all layers) and each round's global model; auxiliary data "
        "labelled with the property (its prior data), never a device's data"
    )
    scorer = "property"

    def on_round(self, ctx: AttackContext, snapshot: RoundSnapshot) -> None:
        aux_round(ctx.workspace, ctx.knowledge, ctx.params, snapshot)

    def predict(self, ctx: AttackContext) -> Outputs:
        x, y = read_aux(ctx.workspace, AUX_KIND)
        ids, rounds, feats, kind = [], [], [], "pooled"
        for rnd in anon_rounds(ctx.store):
            for uid, delta in sorted(ctx.store.read_anon_full(rnd).items()):
                f, kind = update_features(delta)
                ids.append(uid)
                rounds.append(rnd)
                feats.append(f)
        queries = np.stack(feats) if feats else np.empty((0, x.shape[1]))
        scores = fit_both(kind, ctx.params.trees, ctx.seed, x, y, queries)
        other = "logistic" if kind == "pooled" else "random-forest"
        return {
            "ids": np.asarray(ids),
            "rounds": np.asarray(rounds),
            **scores,
            "other": np.asarray(other),
            "aux_count": np.asarray(len(y)),
        }
