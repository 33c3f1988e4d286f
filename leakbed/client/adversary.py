"""An adversarial participant: active property inference (seed 002 §7.1.5, experiments §7.2.5).

Threat model: one (or a few) of the devices, named in ``adversary.users``, follow the protocol
and upload well-formed updates, but (i) train on the joint loss α·main + (1 − α)·property
(``core.multitask``) so the shared model learns to separate data with and without the property,
and (ii) observe what a participant sees: the global model of each round it is sampled in. From
two consecutive global models it takes the aggregate update and removes its own share
(aggregate − own Δ / K, with K participants a round, a public protocol fact; exact for equal data
sizes). Its batch property classifier is Algorithm 7 adapted to a participant: each round, on that
round's global model, it computes auxiliary updates on its own labelled batches with and without
the property, composes synthetic "others' aggregates" (the mean of K − 1 of them, one a property
batch or none), and keeps their labelled features across rounds; to score the others' aggregate
of round t it fits the classifier (logistic regression or the seed's 50-tree random forest) on all
of them up to round t, and reports the observed aggregate's rank among held-out synthetic
aggregates of round t without the property (a per-round null). Features are globally max-pooled
(§7.1.4) after dividing the update by its L2 norm, so the updates' shrinking as the model converges
cannot pose as the property.
It sees no other device's data, user id, data size or update.

Its per-round scores reach the referee through the device's sealed truth record (``adv-round``,
``adv-score``), like every other per-update fact: the adversary is a participant, so it has no
channel to the server's attacks, and the referee reports it apart ("participant attacks").
State across rounds (previous global model, own update, auxiliary updates, property head) lives
in the ClientApp's ``context.state``, which Flower keeps per node for the run.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from torch import nn

from leakbed.client.plan import DeviceRound
from leakbed.core.data import UserData
from leakbed.core.multitask import hidden_size, multitask_update
from leakbed.core.training import local_update, pick_device, state_arrays
from leakbed.core.updates import max_pooled
from leakbed.defenses.background import background_pool

STATE_KEY = "leakbed-adversary"


def flat_update(delta: dict[str, np.ndarray]) -> np.ndarray:
    """Δw over the shared model's parameters, flattened in name order."""
    return np.concatenate([np.asarray(delta[key], np.float64).ravel() for key in sorted(delta)])


def pooled_features(delta: dict[str, np.ndarray]) -> np.ndarray:
    """§7.1.4's global max pooling of an update divided by its L2 norm: per weight, the max over
    each axis (one feature per output unit and one per input position), biases as they are."""
    return max_pooled(delta, float(np.linalg.norm(flat_update(delta))) or 1.0)


def synthetic_aggregates(
    with_prop: list[dict[str, np.ndarray]],
    without: list[dict[str, np.ndarray]],
    k: int,
    count: int,
    rng: np.random.Generator,
    label: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Labelled features of ``count`` emulated others' aggregates: the mean of K − 1 auxiliary
    updates without the property, one of them swapped for an update with it (label 1) or not (0);
    alternating labels, or all ``label``."""
    feats, labels = [], []
    for i in range(count):
        lab = i % 2 if label is None else label
        parts = [without[j] for j in rng.choice(len(without), k - 1, replace=len(without) < k - 1)]
        if lab:
            parts[int(rng.integers(k - 1))] = with_prop[int(rng.integers(len(with_prop)))]
        feats.append(pooled_features({key: sum(p[key] for p in parts) / k for key in parts[0]}))
        labels.append(lab)
    return np.stack(feats), np.asarray(labels, np.int64)


def fit_property_classifier(x: np.ndarray, y: np.ndarray, classifier: str, seed: int) -> Any:
    """The batch property classifier (Algorithm 7: the seed's 50-tree forest, or a standardised
    logistic regression) fitted on labelled synthetic aggregates; None without both labels."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(set(y.tolist())) < 2:
        return None
    model = (
        RandomForestClassifier(n_estimators=50, random_state=seed, n_jobs=1)
        if classifier == "forest"
        else make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    )
    return model.fit(x, y)


def rank_score(model: Any, classifier: str, query: np.ndarray, null: np.ndarray) -> float:
    """The query's rank among held-out no-property aggregates of the same round (``null``), so the
    classifier's drift from round to round cannot pose as the property; 0.5 without a classifier."""
    if model is None:
        return 0.5
    both = np.vstack([query[None], null])
    # the logistic model's margin, not its probability: on separable training data that saturates at 0 / 1
    p = model.decision_function(both) if classifier == "logistic" else model.predict_proba(both)[:, 1]
    return float((np.sum(p[1:] < p[0]) + 0.5 * np.sum(p[1:] == p[0]) + 0.5) / (len(null) + 1))


def property_score(x: np.ndarray, y: np.ndarray, query: np.ndarray, null: np.ndarray, classifier: str, seed: int) -> float:
    """How likely another participant's batch held the property: the classifier fitted on ``x, y``
    scores the observed others' aggregate by its rank among the round's ``null`` aggregates."""
    return rank_score(fit_property_classifier(x, y, classifier, seed), classifier, query, null)


def _load(state: RecordDict) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    if STATE_KEY not in state:
        return {}, {}
    arrays = {k: v.numpy() for k, v in state.array_records[STATE_KEY].items()}
    meta = {k: float(v) for k, v in state.config_records[STATE_KEY + "-meta"].items()}
    return arrays, meta


def _save(state: RecordDict, arrays: dict[str, np.ndarray], meta: dict[str, float]) -> None:
    state[STATE_KEY] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
    state[STATE_KEY + "-meta"] = ConfigRecord(meta)


def _aux_batch(rng: np.random.Generator, data: UserData, prop: np.ndarray, size: int, share: float) -> UserData:
    """``size`` examples (drawn with replacement) of which round(share·size) hold the property."""
    pos, neg = np.flatnonzero(prop == 1), np.flatnonzero(prop == 0)
    k = int(round(share * size)) if len(pos) else 0
    k = size if not len(neg) else k
    idx = np.concatenate([rng.choice(pos, k), rng.choice(neg, size - k)]) if k < size else rng.choice(pos, size)
    return data.take(rng.permutation(idx))


def _auxiliary(device: DeviceRound, own: UserData, prop: np.ndarray) -> tuple[UserData, np.ndarray]:
    """The labelled data the adversary composes its auxiliary batches from (``adversary.aux_source``)."""
    p = device.plan
    if p.adversary.aux_source == "own":
        return own, prop
    pool = background_pool(p.background, p.data, p.split, p.seed, p.rule)
    if p.adversary.property not in pool.attrs:
        raise ValueError(f"adversary: the background data has no per-example attribute {p.adversary.property!r}")
    return pool, np.asarray(pool.attrs[p.adversary.property]).astype(np.int64)


def adversary_round(device: DeviceRound, model: nn.Module, seed: int, state: RecordDict) -> tuple[float, dict[str, object]]:
    """Observe, learn and upload for one round; trains ``model`` in place and returns
    (joint training loss, facts for the sealed truth record)."""
    plan, fed, pid, rnd, tcfg = device.plan, device.federation, device.partition, device.round, device.train
    assert tcfg is not None  # a train message (the caller checked)
    opts, torch_device = plan.adversary, pick_device(plan.device)
    # the adversary's own labelled data, all of it: the property plan and data defenses describe honest devices
    own = fed.private(pid)
    if opts.property not in own.attrs:
        raise ValueError(f"adversary: the data has no per-example attribute {opts.property!r}")
    arrays, meta = _load(state)
    global_now = state_arrays(model)
    shared = [k for k in global_now if global_now[k].dtype.kind == "f"]
    facts: dict[str, object] = {"adversary": 1}
    k = plan.participants  # K, as the server samples it (public protocol knowledge)

    # (1) the previous round's aggregate minus the adversary's own share, scored by the classifier
    # fitted on the labelled synthetic aggregates of every round up to that one (Algorithm 7)
    if arrays and int(meta.get("round", -1)) == rnd - 1 and "aux-x" in arrays:
        others = {key: arrays[f"global/{key}"] - global_now[key] - arrays[f"own/{key}"] / k for key in shared}
        facts["adv-round"] = rnd - 1
        x, y = arrays["aux-x"], arrays["aux-y"].astype(np.int64)
        facts["adv-score"] = property_score(x, y, pooled_features(others), arrays["null-x"], opts.classifier, plan.seed)

    # (2) auxiliary updates on this round's global model, with and without the property, composed
    # into synthetic others' aggregates of K − 1 participants
    prop = np.asarray(own.attrs[opts.property]).astype(np.int64)
    aux, aux_prop = _auxiliary(device, own, prop)
    rng = np.random.default_rng([plan.seed, rnd, pid, 0xAD])
    size = tcfg.batch_size * tcfg.steps if tcfg.steps else min(len(own), tcfg.batch_size * 4)
    pools: dict[str, list[dict[str, np.ndarray]]] = {}
    for label, share in (("with", opts.positive_fraction), ("without", 0.0)):
        pools[label] = []
        for i in range(opts.aux_batches):
            local = copy.deepcopy(model)
            batch = _aux_batch(rng, aux, aux_prop, size, share)
            local_update(local, batch, fed.corpus.task, tcfg, seed=seed + 7 * i + (label == "with"), device=torch_device)
            after = state_arrays(local)
            pools[label].append({key: global_now[key] - after[key] for key in shared})
    half = max(len(pools["without"]) // 2, 1)  # held-out updates for the round's null aggregates
    x, y = synthetic_aggregates(pools["with"], pools["without"][:half], max(k, 2), opts.aux_aggregates, rng)
    null, _ = synthetic_aggregates([], pools["without"][half:] or pools["without"], max(k, 2), opts.aux_aggregates, rng, label=0)
    if "aux-x" in arrays:
        x, y = np.concatenate([arrays["aux-x"], x]), np.concatenate([arrays["aux-y"], y])

    # (3) the upload: the joint loss α·main + (1 − α)·property, with the head kept on the device
    head = nn.Linear(hidden_size(model), 1)
    if "head/weight" in arrays:
        head.load_state_dict({"weight": torch.from_numpy(arrays["head/weight"]), "bias": torch.from_numpy(arrays["head/bias"])})
    loss = multitask_update(model, head, own, prop, fed.corpus.task, tcfg, opts.alpha, seed=seed, device=torch_device)
    after = state_arrays(model)

    keep = {f"global/{key}": global_now[key] for key in shared}
    keep |= {f"own/{key}": global_now[key] - after[key] for key in shared}
    keep |= {"aux-x": x, "aux-y": y, "null-x": null}
    keep |= {"head/weight": head.weight.detach().cpu().numpy(), "head/bias": head.bias.detach().cpu().numpy()}
    _save(state, keep, {"round": float(rnd)})
    return loss, facts
