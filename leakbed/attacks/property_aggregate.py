"""Aggregate-level property inference (seed 002 §7.2.6-7.2.7, Figure 7.8).

Threat model: the curious server observes only each round's aggregate of K participants'
updates (model averaging, or secure aggregation hiding the individual updates); it holds
auxiliary data labelled with the property (its prior data). Each round it emulates aggregates of
K participants on the round's global model - one participant training on data with the property
(positives) or none (negatives), the other participants on data without it - and after training
fits a random forest on their max-pooled Δw (§7.1.4) to score each observed aggregate: "does any
participant of this round hold the property?". Without secure aggregation the observed aggregate
is the num_examples-weighted mean of the round's updates, exactly what FedAvg computes.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from leakbed.attacks.aux_updates import AuxTrainer, split_by_property
from leakbed.attacks.contract import Attack, AttackContext, Needs, Outputs
from leakbed.attacks.gradient_features import update_features
from leakbed.attacks.property_passive import PropertyParams, anon_rounds, fit_both, read_aux
from leakbed.core.knowledge import AttackerKnowledge
from leakbed.core.records import RoundSnapshot
from leakbed.core.store import UpdateStore

NAME = "aggregate-property"
AUX_KIND = "aggregate_property_aux"


def weighted_mean(deltas: list[dict[str, np.ndarray]], weights: list[float]) -> dict[str, np.ndarray]:
    total = float(sum(weights))
    return {k: sum(w * d[k] for d, w in zip(deltas, weights, strict=True)) / total for k in deltas[0]}


def aux_round(store: UpdateStore, knowledge: AttackerKnowledge, opts: PropertyParams, snap: RoundSnapshot) -> None:
    """Emulated aggregates of K participants (K as the server sampled this round), with and without the property."""
    k = max(1, int(snap.train_config.get("participants", 1)))
    users = sorted(knowledge.prior)
    parts = {u: split_by_property(knowledge.prior[u]) for u in users}
    holders = [u for u in users if len(parts[u][0])]
    if not holders:
        raise ValueError("aggregate property inference: no prior user holds the property")
    trainer = AuxTrainer(knowledge, snap.arrays, snap.train_config)
    rng = np.random.default_rng([knowledge.seed, snap.round, 0xA6])
    feats, labels = [], []
    for i in range(opts.aux_updates):
        for label in (1, 0):
            chosen = [str(u) for u in rng.choice(users, size=k, replace=k > len(users))]
            if label:
                chosen[0] = str(rng.choice(holders))
            datas = [knowledge.prior[u] if (label and j == 0) else parts[u][1] for j, u in enumerate(chosen)]
            deltas = [trainer.delta(d, f"{snap.round}/{i}/{label}/{j}") for j, d in enumerate(datas) if len(d)]
            mean = weighted_mean(deltas, [float(len(d)) for d in datas if len(d)])
            feats.append(update_features(mean)[0])
            labels.append(label)
    store._write(AUX_KIND, f"r{snap.round:06d}", {"features": np.stack(feats), "labels": np.asarray(labels)})


class AggregateProperty(Attack):
    name: ClassVar[str] = NAME
    params = PropertyParams
    needs = Needs(property_column=True, full_updates=True, level="aggregate")
    source = "seed 002 §7.2.6-7.2.7, Figure 7.8"
    threat = (
        "a curious server that observes only each round's aggregate of K participants' updates (model averaging, or "
        "secure aggregation hiding the individual updates) and holds auxiliary data labelled with the property"
    )
    scorer = "aggregate-property"

    def on_round(self, ctx: AttackContext, snapshot: RoundSnapshot) -> None:
        aux_round(ctx.workspace, ctx.knowledge, ctx.params, snapshot)

    def predict(self, ctx: AttackContext) -> Outputs:
        x, y = read_aux(ctx.workspace, AUX_KIND)
        anon = ctx.store.read_anon()
        n_of = {str(i): float(n) for i, n in zip(anon["ids"], anon["num_examples"], strict=True)}
        rounds, feats, members = [], [], []
        for rnd in anon_rounds(ctx.store):
            updates = ctx.store.read_anon_full(rnd)
            if not updates:
                continue
            uids = sorted(updates)
            mean = weighted_mean([updates[u] for u in uids], [n_of.get(u, 1.0) for u in uids])
            rounds.append(rnd)
            feats.append(update_features(mean)[0])
            members.append(" ".join(uids))  # the update ids behind each observed aggregate (one under SecAgg+)
        queries = np.stack(feats) if feats else np.empty((0, x.shape[1]))
        scores = fit_both("pooled", ctx.params.trees, ctx.seed, x, y, queries)
        return {"rounds": np.asarray(rounds), **scores, "other": np.asarray("logistic"), "members": np.asarray(members)}
