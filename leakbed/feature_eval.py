"""``leakbed feature-inference``: seed 004's Table 1 in kind, as a stand-alone evaluation.

It trains the shared model with plain FedAvg for a few rounds (the same DeviceUpdate as the
devices), takes device gradients of single-step updates (one mini-batch, plain SGD, so
g = Δw / η exactly) at several batch sizes, runs the deep-feature attack
(``attacks.feature_inference``) and the pixel-space DLG baseline (``attacks.dlg``), and scores the
per-sample property predictions. Like the referee, this evaluator holds the truth: the attacks
only receive gradients, the global model and the auxiliary (prior) data.

Scoring is order-invariant (a gradient is a sum over the batch, so reconstructions come in no
order): reconstructions are matched one-to-one to the batch's true samples by the Hungarian
algorithm (true deep features for the feature attack, true pixels for DLG), and per-sample accuracy
is taken over matched pairs. Target batches draw each sample's property with probability 1/2, so
chance is 50% for any predictor. The count accuracy (1 − |k̂ − k| / B, comparing predicted and
true property counts; needs no matching) is reported too, with its own chance level.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn

from attacks.dlg import dlg_reconstruct
from attacks.feature_inference import feature_split, predict_property, reconstruct_features, train_property_net
from core.config import ExperimentConfig, FeatureInferenceConfig
from core.data import Federation, UserData, federation
from core.data.errors import DataError
from core.models import build_model
from core.training import TrainConfig, local_update, state_arrays


@dataclass
class BatchScore:
    feature_acc: float
    dlg_acc: float
    feature_count_acc: float
    dlg_count_acc: float
    oracle_feature_acc: float
    oracle_pixel_acc: float


def _pool(parts: list[UserData]) -> UserData:
    return UserData(
        x=np.concatenate([p.x for p in parts]),
        y=np.concatenate([p.y for p in parts]),
        t=np.concatenate([p.t for p in parts]),
        attrs={k: np.concatenate([p.attrs[k] for p in parts]) for k in parts[0].attrs},
    )


def check_inputs(cfg: ExperimentConfig, fed: Federation) -> None:
    """One-line errors for data the evaluation cannot use, before anything trains."""
    fi = cfg.attack.feature_inference
    corpus = fed.corpus
    if corpus.task != "multiclass" or len(corpus.input_shape) != 3:
        raise DataError(f"feature-inference needs multiclass images, not {corpus.task} data of shape {corpus.input_shape}")
    first = next(iter(fed.splits.values())).private
    if fi.property not in first.attrs:
        raise DataError(f"feature-inference: the data has no per-example attribute {fi.property!r}")
    values = np.unique(np.concatenate([s.private.attrs[fi.property] for s in fed.splits.values()]))
    if not set(values.tolist()) <= {0, 1} or len(values) < 2:
        raise DataError(f"feature-inference: attribute {fi.property!r} must be binary 0/1 with both values present")
    feature_split(build_model(cfg.model, corpus))  # raises for an unsupported architecture


def train_shared_model(cfg: ExperimentConfig, fed: Federation, rounds: int) -> nn.Module:
    """Plain FedAvg (weighted by examples) with the devices' own DeviceUpdate; seeded."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, fed.corpus)
    rng = np.random.default_rng([cfg.seed, 0xFE])
    tcfg = TrainConfig(cfg.fl.local_epochs, cfg.fl.batch_size, cfg.fl.lr, cfg.fl.optimizer, cfg.fl.momentum)
    users = fed.user_ids
    k = max(1, int(len(users) * cfg.fl.fraction_train))
    for rnd in range(1, rounds + 1):
        base = state_arrays(model)
        total: dict[str, np.ndarray] = {key: np.zeros_like(v, dtype=np.float64) for key, v in base.items()}
        weight = 0
        for pid in sorted(rng.choice(len(users), size=k, replace=False)):
            local = copy.deepcopy(model)
            data = fed.private(int(pid))
            seed = cfg.seed * 7919 + rnd * 131 + int(pid)
            local_update(local, data, fed.corpus.task, tcfg, seed=seed, device=torch.device("cpu"))
            for key, v in state_arrays(local).items():
                total[key] += len(data) * v
            weight += len(data)
        model.load_state_dict({key: torch.from_numpy((v / weight).astype(base[key].dtype)) for key, v in total.items()})
    return model


def device_gradient(model: nn.Module, batch: UserData, task: str, lr: float, seed: int) -> dict[str, np.ndarray]:
    """g = Δw / η of one device step on ``batch`` (one mini-batch, plain SGD): what the server receives."""
    local = copy.deepcopy(model)
    before = state_arrays(local)
    local_update(local, batch, task, TrainConfig(1, len(batch), lr, "sgd", 0.0), seed=seed, device=torch.device("cpu"))
    after = state_arrays(local)
    return {k: (before[k] - after[k]) / lr for k in before}


def matched_accuracy(recon: np.ndarray, true: np.ndarray, pred: np.ndarray, labels: np.ndarray, metric: str) -> float:
    """Per-sample accuracy after a one-to-one Hungarian matching of reconstructions to true samples."""
    a = recon.reshape(len(recon), -1).astype(np.float64)
    b = true.reshape(len(true), -1).astype(np.float64)
    if metric == "cosine":
        a = a / (np.linalg.norm(a, axis=1, keepdims=True) + 1e-12)
        b = b / (np.linalg.norm(b, axis=1, keepdims=True) + 1e-12)
        cost = 1.0 - a @ b.T
    else:
        cost = ((a[:, None, :] - b[None, :, :]) ** 2).mean(-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.mean((pred[rows] >= 0.5) == (labels[cols] == 1)))


def _accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean((pred >= 0.5) == (labels == 1)))


def count_accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """1 − |k̂ − k| / B: the best per-sample accuracy any ordering of the predictions can reach."""
    return 1.0 - abs(int((pred >= 0.5).sum()) - int(labels.sum())) / len(labels)


def count_chance(batch_size: int) -> float:
    """Expected count accuracy of coin-flip predictions on coin-flip labels (K, K̂ ~ Bin(B, 1/2))."""
    pmf = np.array([math.comb(batch_size, k) for k in range(batch_size + 1)], dtype=np.float64) / 2.0**batch_size
    diff = np.abs(np.arange(batch_size + 1)[:, None] - np.arange(batch_size + 1)[None, :])
    return float(1.0 - (pmf[:, None] * pmf[None, :] * diff).sum() / batch_size)


def _balanced_batch(rng: np.random.Generator, pool: UserData, prop: str, size: int) -> UserData:
    """``size`` distinct examples whose property is drawn with probability 1/2 each."""
    want = rng.random(size) < 0.5
    pos = rng.permutation(np.flatnonzero(pool.attrs[prop] == 1))
    neg = rng.permutation(np.flatnonzero(pool.attrs[prop] == 0))
    n_pos = int(min(want.sum(), len(pos)))
    idx = np.concatenate([pos[:n_pos], neg[: size - n_pos]])
    return pool.take(rng.permutation(idx))


def evaluate(cfg: ExperimentConfig, out: Path, progress=None) -> dict:
    """Run the whole evaluation; writes ``feature_inference.json`` and ``feature_inference.md`` to ``out``."""
    fi: FeatureInferenceConfig = cfg.attack.feature_inference
    fed = federation(cfg, cfg.split.priors[0])
    check_inputs(cfg, fed)
    torch.set_num_threads(1)
    corpus = fed.corpus
    model = train_shared_model(cfg, fed, fi.rounds)
    model.eval()
    split = feature_split(model)
    rng = np.random.default_rng([cfg.seed, 0x004])

    aux = _pool(list(fed.prior().values()))
    aux = aux.take(rng.permutation(len(aux))[: fi.aux_examples])
    with torch.no_grad():
        aux_feats = split.features(torch.from_numpy(aux.x)).numpy()
    aux_prop = aux.attrs[fi.property]
    feat_net = train_property_net(aux_feats, aux_prop, epochs=fi.classifier_epochs, lr=fi.classifier_lr, seed=cfg.seed)
    pix_net = train_property_net(
        aux.x.reshape(len(aux), -1), aux_prop, epochs=fi.classifier_epochs, lr=fi.classifier_lr, seed=cfg.seed + 1
    )
    targets = _pool([fed.private(i) for i in range(len(fed.user_ids))])

    rows: dict[int, list[BatchScore]] = {}
    for size in fi.batch_sizes:
        rows[size] = []
        for b in range(fi.batches):
            batch = _balanced_batch(rng, targets, fi.property, size)
            labels = batch.attrs[fi.property]
            seed = int(rng.integers(2**31))
            grads = device_gradient(model, batch, corpus.task, fi.device_lr, seed)
            with torch.no_grad():
                true_feats = split.features(torch.from_numpy(batch.x)).numpy()
            feats = reconstruct_features(
                split, grads, size, corpus.num_classes, corpus.input_shape,
                steps=fi.steps, step_size=fi.step_size, block_weight=fi.block_weight, seed=seed, labels=fi.labels,
                init=fi.init, schedule=fi.schedule, restarts=fi.restarts, nonnegative=fi.nonnegative, aux_x=aux.x, aux_y=aux.y,
            )  # fmt: skip
            images, _ = dlg_reconstruct(model, grads, size, corpus.num_classes, corpus.input_shape, steps=fi.dlg_steps, seed=seed)
            p_feat = predict_property(feat_net, feats)
            p_pix = predict_property(pix_net, images.reshape(size, -1))
            rows[size].append(
                BatchScore(
                    feature_acc=matched_accuracy(feats, true_feats, p_feat, labels, "cosine"),
                    dlg_acc=matched_accuracy(images, batch.x, p_pix, labels, "mse"),
                    feature_count_acc=count_accuracy(p_feat, labels),
                    dlg_count_acc=count_accuracy(p_pix, labels),
                    oracle_feature_acc=_accuracy(predict_property(feat_net, true_feats), labels),
                    oracle_pixel_acc=_accuracy(predict_property(pix_net, batch.x.reshape(size, -1)), labels),
                )
            )
            if progress:
                progress(size, b + 1)
    result = {
        "config": fi.model_dump(),
        "utility_rounds": fi.rounds,
        "aux_examples": len(aux),
        "aux_property_rate": float(aux_prop.mean()),
        "by_batch_size": {
            str(size): {
                **{k: float(np.mean([getattr(s, k) for s in scores])) for k in BatchScore.__dataclass_fields__},
                "chance": 0.5,
                "count_chance": count_chance(size),
                "batches": len(scores),
            }
            for size, scores in rows.items()
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "feature_inference.json").write_text(json.dumps(result, indent=2))
    (out / "feature_inference.md").write_text(markdown_table(result))
    return result


def markdown_table(result: dict) -> str:
    """Seed 004 Table 1 in kind: per-sample property accuracy (%) by device batch size."""
    lines = [
        "## Individual property inference: deep-feature space vs DLG (seed 004 Table 1)",
        "",
        "Per-sample accuracy % after Hungarian matching of reconstructions to the batch's samples "
        "(chance 50%); count accuracy compares predicted and true property counts (its chance in brackets); "
        "oracle = the same classifier on the true features / pixels.",
        "",
        "| batch size | DLG (pixels) | proposed (features) | DLG count | features count (chance) "
        "| oracle features | oracle pixels |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, r in result["by_batch_size"].items():
        lines.append(
            f"| {size} | {100 * r['dlg_acc']:.1f} | {100 * r['feature_acc']:.1f} | {100 * r['dlg_count_acc']:.1f} | "
            f"{100 * r['feature_count_acc']:.1f} ({100 * r['count_chance']:.1f}) | {100 * r['oracle_feature_acc']:.1f} | "
            f"{100 * r['oracle_pixel_acc']:.1f} |"
        )
    return "\n".join(lines) + "\n"
