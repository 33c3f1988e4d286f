"""Referee scoring of the reconstruction attacks (seed 004 §4.1, Table 1: per-sample property accuracy).

Truth: each device sealed the content hashes of the distinct records its update's batches used,
with each record's property (``client.batch_truth``). The referee rebuilds the federation from the
frozen config to read those records back. A gradient is a sum over its batch, so reconstructions
come in no order; two accuracies are reported per attacked update, then averaged over updates:

- ``accuracy`` (matched): reconstructions are paired one-to-one with the true samples by the
  Hungarian algorithm (``scipy.optimize.linear_sum_assignment``) on the true deep features at the
  round's global model (cosine; feature-inference) or the true pixels (mean squared error; DLG,
  IG), and each pair's predicted property is compared with the true one. This uses the truth to
  pair, so it is the attack's best case, as in seed 004's per-sample accuracy.
- ``count_accuracy`` (no matching): 1 − |k̂ − k| / U, predicted against true property counts; the
  most any ordering of the predictions could reach, and what an attacker can claim without knowing
  which reconstruction is which sample.

Chance: ``chance`` is the accuracy of guessing the majority class of all attacked samples,
max(r, 1 − r) with r their property rate (seed 004 balances the property, so its chance is 50%);
``count_chance`` is the count accuracy of guessing k̂ = round(r·U).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from attacks.feature_inference import feature_split
from core.config import ExperimentConfig
from core.models import build_model
from core.store import UpdateStore
from core.training import load_arrays
from referee.context import ScoreContext
from referee.score_membership import record_index

SEED_TABLE_1 = {  # CelebA gender, per-sample accuracy %, FedSGD (seed 004 Table 1)
    "dlg": {1: 93.12, 8: 50.00, 32: 50.00},
    "inverting-gradients": {1: 94.86, 8: 67.34, 32: 54.31},
    "feature-inference": {1: 95.35, 8: 95.42, 32: 95.49},
}


def matched_accuracy(
    recon: np.ndarray, true: np.ndarray, pred: np.ndarray, labels: np.ndarray, metric: str
) -> tuple[float, float]:
    """Per-sample accuracy after a one-to-one Hungarian matching of reconstructions to true samples,
    and the matched pairs' mean distance (1 − cosine, or mean squared error)."""
    a = recon.reshape(len(recon), -1).astype(np.float64)
    b = true.reshape(len(true), -1).astype(np.float64)
    if metric == "cosine":
        a = a / (np.linalg.norm(a, axis=1, keepdims=True) + 1e-12)
        b = b / (np.linalg.norm(b, axis=1, keepdims=True) + 1e-12)
        cost = 1.0 - a @ b.T
    else:
        cost = ((a[:, None, :] - b[None, :, :]) ** 2).mean(-1)
    rows, cols = linear_sum_assignment(cost)
    return float(np.mean((pred[rows] >= 0.5) == (labels[cols] == 1))), float(cost[rows, cols].mean())


def count_accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """1 − |k̂ − k| / U: the best per-sample accuracy any ordering of the predictions can reach."""
    return 1.0 - abs(int((pred >= 0.5).sum()) - int(labels.sum())) / len(labels)


def _true_features(cfg: ExperimentConfig, store: UpdateStore, rnd: int, x: np.ndarray, corpus) -> np.ndarray:  # noqa: ANN001
    model = build_model(cfg.model, corpus)
    load_arrays(model, store.read_global(rnd))
    model.eval()
    with torch.no_grad():
        return feature_split(model).features(torch.as_tensor(x)).numpy()


def score(ctx: ScoreContext) -> dict:
    """The scorer of feature-inference, dlg and inverting-gradients."""
    name, res, referee, cfg, store = ctx.attack, ctx.outputs, ctx.truth, ctx.cfg, ctx.store
    private = record_index(ctx.federation)[0]
    features = str(res["space"]) == "features"  # feature-inference matches on deep features, DLG and IG on pixels
    corpus = ctx.federation.corpus
    offsets = np.concatenate([[0], np.cumsum(res["counts"])])
    matched, counted, chance, count_chance, missing, sizes, labels_all = [], [], [], [], 0, [], []
    per_update, distances = [], []
    for j, uid in enumerate(res["ids"]):
        hashes = [int(h) for h in referee.field_for(np.asarray([uid]), "batch-records")[0]]
        props = np.asarray(referee.field_for(np.asarray([uid]), "batch-properties")[0], np.int64)
        found = [i for i, h in enumerate(hashes) if h in private]
        missing += len(hashes) - len(found)
        if not found:
            continue
        x = np.stack([private[hashes[i]][0] for i in found])
        labels = props[found]
        recon = res["recon"][offsets[j] : offsets[j + 1]]
        pred = res["probs"][offsets[j] : offsets[j + 1]]
        if features:
            true = _true_features(cfg, store, int(res["rounds"][j]), x, corpus)
            acc, dist = matched_accuracy(recon, true, pred, labels, "cosine")
        else:
            acc, dist = matched_accuracy(recon, x, pred, labels, "mse")
        matched.append(acc)
        distances.append(dist)
        counted.append(count_accuracy(pred, labels))
        sizes.append(len(labels))
        labels_all.append(labels)
        per_update.append([int(res["rounds"][j]), len(labels), int(labels.sum()), f"{100 * acc:.1f}", f"{100 * counted[-1]:.1f}"])
    rate = float(np.concatenate(labels_all).mean()) if labels_all else 0.0
    for labels in labels_all:
        chance.append(max(rate, 1 - rate))
        count_chance.append(1.0 - abs(round(rate * len(labels)) - int(labels.sum())) / len(labels))
    steps = sorted({int(s) for s in res["steps"]})
    batch = sorted({int(b) for b in res["batch_size"]})
    seed = SEED_TABLE_1[name].get(batch[0]) if len(batch) == 1 and steps == [1] else None
    mean = lambda v: float(np.mean(v)) if v else None  # noqa: E731
    acc_all = mean(matched)
    return {
        "accuracy": acc_all,
        "count_accuracy": mean(counted),
        "chance": mean(chance),
        "count_chance": mean(count_chance),
        # matched pairs' distance: 1 − cosine of deep features (feature-inference) or pixel MSE (dlg, IG)
        "reconstruction_error": mean(distances),
        "updates": len(matched),
        "skipped": int(res["skipped"]),
        "samples_mean": mean(sizes),
        "property_rate": rate,
        "records_missing": missing,
        "local_steps": steps[0] if len(steps) == 1 else None,
        "batch_size": batch[0] if len(batch) == 1 else None,
        "seed_table_1": seed,
        "tables": {
            f"{name}: per attacked update (accuracy %, matched and count-based)": {
                "header": ["round", "samples U", "with property", "matched", "count"],
                "rows": per_update,
            }
        },
        "notes": [
            f"{name}: per-sample property accuracy {_pct(acc_all)} (Hungarian-matched on true "
            f"{'deep features' if features else 'pixels'}), {_pct(mean(counted))} count-based "
            f"(no matching); chance {_pct(mean(chance))} / {_pct(mean(count_chance))}; {len(matched)} updates of "
            f"{', '.join(map(str, steps))} local step(s) at batch {', '.join(map(str, batch))}"
            + (f"; seed 004 Table 1 (CelebA, FedSGD): {seed:.1f}%" if seed is not None else "")
            + "."
        ],
    }


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"
