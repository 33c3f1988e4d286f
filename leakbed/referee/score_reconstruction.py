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

Pixel reconstructions (DLG, IG, ``fedavg-inversion``) are also scored as Dimitrov et al. 2022 (§5) score
FedAvg inversion: reconstructions and true images are paired by the Hungarian algorithm on PSNR (data
range 1), ``psnr`` is the pairs' mean and ``recovered`` the share of true images whose pair is above
``RECOVERED_PSNR`` dB (the paper's threshold). ``recovered_chance`` is the same share for U images drawn
from the attacker's prior instead (other people's images of the same kind: what a guess without the update
reaches). An attack that outputs ``labels`` gets ``label_accuracy``, 1 − Σ_c |ĉ_c − c_c| / (2U) (the share of
the batch's labels recovered as a multiset; the paper's label error), beside ``label_chance``, the same for
the counts the prior's label frequencies predict. A property without a column in the data leaves the
property accuracies empty.

Coverage (kind ``reconstruction``): rows are attacked updates, and an attack attacks a sample of the updates it was
given by design (its own choice, bounded by its params: ``updates``, ``rounds``...), so unattacked updates are not
filled in: ``coverage`` is the share of given updates attacked with a finite reconstruction, ``rows_missing`` the
given updates without one, and the metrics average over the attacked updates. This is the one set an attack still
chooses, and it is reported beside the score, never hidden: an attack may attack many and keep its best (its own
reconstruction loss tells it which); closing it needs the sample drawn by trusted code and handed to the attack, not
chosen by it. A row for an update that was not given is ignored (``rows_extra``), as is a later row of the same
update (``rows_duplicate``). A non-finite reconstruction is not dropped: it is scored as noise the referee draws
(uniform pixels in [0, 1), or uniform features over the range of the finite ones) and counts as missing; a non-finite
property probability is scored as a uniform draw. Rounds are the store's.

Samples: within an attacked update the referee scores the batch's records (the sealed ``batch-records``, U of them),
never the attack's count: reconstructions beyond U are ignored (``samples_extra``: more guesses would let the
matching pick the lucky ones), and each one short of U is the referee's noise with a uniform probability and a
uniform label (``samples_missing``): every true sample is matched, so an attack cannot average over the few it
reconstructs best.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from leakbed.core.config import ExperimentConfig
from leakbed.core.features import feature_split
from leakbed.core.models import build_model
from leakbed.core.store import UpdateStore
from leakbed.core.training import load_arrays
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage, fill_rng, store_rounds
from leakbed.referee.schemas import OutputsError
from leakbed.referee.score_membership import record_index

RECOVERED_PSNR = 20.0  # dB: Dimitrov et al. 2022's threshold for an image to count as recovered (FEMNIST, CIFAR-10)
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


def psnr_matched(recon: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Each true image's PSNR (dB, data range 1) against its reconstruction, paired by the Hungarian algorithm on PSNR."""
    a = recon.reshape(len(recon), -1).astype(np.float64)
    b = true.reshape(len(true), -1).astype(np.float64)
    mse = ((a[:, None, :] - b[None, :, :]) ** 2).mean(-1)
    psnr = 10.0 * np.log10(1.0 / np.maximum(mse, 1e-10))
    rows, cols = linear_sum_assignment(-psnr)
    return psnr[rows, cols]


def images_x_chance(recovered: int, chance: int) -> float:
    """× chance of image recovery: (images recovered + 1) / (prior images "recovered" + 1), add-one so that a chance
    of no image stays finite; what a sweep plots against utility."""
    return (recovered + 1) / (chance + 1)


def label_accuracy(guess: np.ndarray, true: np.ndarray, classes: int) -> float:
    """1 − Σ_c |ĉ_c − c_c| / (2U): the share of the true labels the guessed multiset recovers."""
    diff = np.abs(np.bincount(guess, minlength=classes) - np.bincount(true, minlength=classes)).sum()
    return 1.0 - diff / (2 * len(true))


def frequency_guess(frequencies: np.ndarray, total: int) -> np.ndarray:
    """``total`` labels in proportion to ``frequencies`` (largest remainder): the guess without the update."""
    est = frequencies / frequencies.sum() * total
    counts = np.floor(est).astype(np.int64)
    counts[np.argsort(-(est - counts))[: total - int(counts.sum())]] += 1
    return np.repeat(np.arange(len(frequencies)), counts)


def _prior_pool(ctx: ScoreContext) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's prior images and its label frequencies, for the chance of pixel and label recovery."""
    fed = ctx.federation
    priors = [fed.splits[u].prior for u in fed.user_ids]
    x = np.concatenate([p.x for p in priors])
    y = np.concatenate([p.y for p in priors]).astype(np.int64)
    return x, np.bincount(y, minlength=fed.corpus.num_classes).astype(np.float64)


def _true_features(cfg: ExperimentConfig, store: UpdateStore, rnd: int, x: np.ndarray, corpus) -> np.ndarray:  # noqa: ANN001
    model = build_model(cfg.model, corpus)
    load_arrays(model, store.read_global(rnd))
    model.eval()
    with torch.no_grad():
        return feature_split(model).features(torch.as_tensor(x)).numpy()


def score_reconstruction(ctx: ScoreContext) -> dict:
    """The scorer of feature-inference, dlg, inverting-gradients and reconstruction plugins with the same outputs."""
    name, res, referee, cfg, store = ctx.attack, ctx.outputs, ctx.truth, ctx.cfg, ctx.store
    counts = np.asarray(res["counts"], np.int64)
    if (counts < 0).any() or int(counts.sum()) != len(res["recon"]):
        raise OutputsError(
            f"outputs: 'counts' must be non-negative and sum to the {len(res['recon'])} rows of 'recon'; got sum {counts.sum()}"
        )
    offsets = np.concatenate([[0], np.cumsum(counts)])
    with np.errstate(all="ignore"):
        finite = np.asarray([np.isfinite(res["recon"][a:b]).all() for a, b in zip(offsets[:-1], offsets[1:], strict=True)], bool)
    cov = Coverage(ctx.given, res["ids"], rng=fill_rng(cfg.seed, "reconstruction", name), finite=finite)
    filed = store_rounds(store)
    real = res["recon"][np.isfinite(res["recon"])]
    lo, hi = (0.0, 1.0) if str(res["space"]) != "features" or not real.size else (float(real.min()), float(real.max()))
    private = record_index(ctx.federation)[0]
    features = str(res["space"]) == "features"  # feature-inference matches on deep features, DLG and IG on pixels
    corpus = ctx.federation.corpus
    if "labels" in res and len(res["labels"]) and not (0 <= res["labels"].min() and res["labels"].max() < corpus.num_classes):
        got = f"{res['labels'].min()}..{res['labels'].max()}"
        raise OutputsError(f"outputs: 'labels' must be classes 0..{corpus.num_classes - 1}; got {got}")
    prior_x, prior_freq = (None, None) if features else _prior_pool(ctx)
    rng = np.random.default_rng([cfg.seed, 0x9F])
    kinds = ("matched", "counted", "dist", "psnr", "psnr_chance", "rec", "rec_chance", "rec_n", "rec_chance_n", "lab",
             "lab_chance")  # fmt: skip
    m: dict[str, list] = {k: [] for k in kinds}
    missing, sizes, labels_all, per_update = 0, [], [], []
    samples = {"missing": 0, "extra": 0}  # reconstructions short of, or beyond, an update's true sample count
    attacked = np.sort(cov.row[cov.row >= 0])  # each given update's first row, in the attack's order
    for j in attacked.tolist():
        uid = str(res["ids"][j])
        hashes = [int(h) for h in referee.field_for(np.asarray([uid]), "batch-records")[0]]
        found = [i for i, h in enumerate(hashes) if h in private]
        missing += len(hashes) - len(found)
        if not found:
            continue
        x = np.stack([private[hashes[i]][0] for i in found])
        start, take = int(offsets[j]), min(int(counts[j]), len(hashes))  # the referee's samples: the batch's records
        short = len(hashes) - take
        samples["extra"] += int(counts[j]) - take
        samples["missing"] += short
        recon = res["recon"][start : start + take]
        if not finite[j]:  # scored as the referee's noise, not dropped
            recon = cov.rng.uniform(lo, hi, recon.shape).astype(np.float32)
        pred = res["probs"][start : start + take]
        if short:  # a sample it did not reconstruct: the referee's noise, and a uniform probability
            width = int(np.prod(res["recon"].shape[1:])) or int(x[0].size)  # no reconstruction at all: a pixel's
            noise = cov.rng.uniform(lo, hi, (short, width)).astype(np.float32)
            recon = np.concatenate([recon.reshape(take, width).astype(np.float32), noise])
            pred = np.concatenate([np.asarray(pred, np.float64), cov.rng.random(short)])
        rnd = filed.get(uid, int(res["rounds"][j]))
        row = [rnd, len(found)]
        if not features:
            psnr = psnr_matched(recon, x)
            pool = prior_x[rng.permutation(len(prior_x))[: len(x)]]
            m["psnr"].append(float(psnr.mean()))
            m["rec"].append(float((psnr > RECOVERED_PSNR).mean()))
            guess = psnr_matched(pool, x)
            m["psnr_chance"].append(float(guess.mean()))
            m["rec_chance"].append(float((guess > RECOVERED_PSNR).mean()))
            m["rec_n"].append(int((psnr > RECOVERED_PSNR).sum()))
            m["rec_chance_n"].append(int((guess > RECOVERED_PSNR).sum()))
            row += [f"{m['psnr'][-1]:.1f}", f"{100 * m['rec'][-1]:.0f}"]
        if "labels" in res:
            true_y = np.asarray([private[hashes[i]][1] for i in found], np.int64)
            guess = np.asarray(res["labels"][start : start + take], np.int64)
            if short:  # labels it did not guess: uniform ones, drawn by the referee
                guess = np.concatenate([guess, cov.rng.integers(0, corpus.num_classes, short)])
            m["lab"].append(label_accuracy(guess, true_y, corpus.num_classes))
            m["lab_chance"].append(label_accuracy(frequency_guess(prior_freq, len(true_y)), true_y, corpus.num_classes))
            row.append(f"{100 * m['lab'][-1]:.0f}")
        props = _properties(referee, uid)
        if props is not None:
            pred = np.where(np.isfinite(pred), pred, cov.rng.random(len(pred)))  # a non-finite probability: a draw
            labels = props[found]
            if features:
                true = _true_features(cfg, store, rnd, x, corpus)
                acc, dist = matched_accuracy(recon, true, pred, labels, "cosine")
            else:
                acc, dist = matched_accuracy(recon, x, pred, labels, "mse")
            m["matched"].append(acc)
            m["dist"].append(dist)
            m["counted"].append(count_accuracy(pred, labels))
            labels_all.append(labels)
            row += [int(labels.sum()), f"{100 * acc:.1f}", f"{100 * m['counted'][-1]:.1f}"]
        sizes.append(len(found))
        per_update.append(row)
    rate = float(np.concatenate(labels_all).mean()) if labels_all else None
    chance = [max(rate, 1 - rate) for _ in labels_all] if rate is not None else []
    count_chance = [1.0 - abs(round(rate * len(lab)) - int(lab.sum())) / len(lab) for lab in labels_all] if labels_all else []
    steps = sorted({int(s) for s in res["steps"][attacked]})
    batch = sorted({int(b) for b in res["batch_size"][attacked]})
    seed = SEED_TABLE_1.get(name, {}).get(batch[0]) if len(batch) == 1 and steps == [1] else None
    mean = lambda v: float(np.mean(v)) if v else None  # noqa: E731
    header = ["round", "samples U"]
    header += [] if features else ["PSNR dB", f"recovered % (> {RECOVERED_PSNR:g} dB)"]
    header += ["labels %"] if "labels" in res else []
    header += ["with property", "matched", "count"] if labels_all else []
    out = {
        "accuracy": mean(m["matched"]),
        "count_accuracy": mean(m["counted"]),
        "chance": mean(chance),
        "count_chance": mean(count_chance),
        # matched pairs' distance: 1 − cosine of deep features (feature-inference) or pixel MSE (dlg, IG)
        "reconstruction_error": mean(m["dist"]),
        "psnr": mean(m["psnr"]),
        "psnr_chance": mean(m["psnr_chance"]),
        "recovered": mean(m["rec"]),
        "recovered_chance": mean(m["rec_chance"]),
        # × chance: images recovered against prior images (pixels), or matched property accuracy against its chance
        "x_chance": (
            images_x_chance(sum(m["rec_n"]), sum(m["rec_chance_n"])) if m["psnr"]
            else (mean(m["matched"]) / mean(chance) if m["matched"] and chance else None)
        ),  # fmt: skip
        "label_accuracy": mean(m["lab"]),
        "label_chance": mean(m["lab_chance"]),
        "seconds_per_update": float(np.mean(res["seconds"][attacked])) if "seconds" in res and len(attacked) else None,
        "updates": len(sizes),
        "skipped": int(res["skipped"]),
        "samples_mean": mean(sizes),
        "property_rate": rate,
        "records_missing": missing,
        "samples_missing": samples["missing"],
        "samples_extra": samples["extra"],
        "local_steps": steps[0] if len(steps) == 1 else None,
        "batch_size": batch[0] if len(batch) == 1 else None,
        "seed_table_1": seed,
        "tables": {f"{name}: per attacked update": {"header": header, "rows": per_update}},
        **cov.report(),
    }
    out["notes"] = [
        _note(name, out, features, steps, batch),
        cov.note(
            "an attack attacks a sample of its updates, so unattacked ones are not filled in and the scores average over "
            "the attacked ones; a non-finite reconstruction or probability is scored as noise the referee draws",
            "updates",
        ),
    ]
    return out


def _properties(referee: object, uid: str) -> np.ndarray | None:
    """The sealed per-sample properties of an update's batch records, when the data has a property column."""
    try:
        return np.asarray(referee.field_for(np.asarray([uid]), "batch-properties")[0], np.int64)  # type: ignore[attr-defined]
    except KeyError:
        return None


def _note(name: str, r: dict, features: bool, steps: list[int], batch: list[int]) -> str:
    at = f"{', '.join(map(str, steps))} local step(s) at batch {', '.join(map(str, batch))}"
    parts = [f"{name}: {r['updates']} updates of {at}"]
    if not features:
        parts.append(
            f"images recovered (PSNR > {RECOVERED_PSNR:g} dB) {_pct(r['recovered'])} against {_pct(r['recovered_chance'])} "
            f"for prior images, mean PSNR {r['psnr']:.1f} dB ({r['psnr_chance']:.1f} dB)"
            if r["psnr"] is not None
            else "no image scored"
        )
    if r["label_accuracy"] is not None:
        parts.append(f"labels {_pct(r['label_accuracy'])} (prior frequencies {_pct(r['label_chance'])})")
    if r["accuracy"] is not None:
        parts.append(
            f"per-sample property accuracy {_pct(r['accuracy'])} (Hungarian-matched on true "
            f"{'deep features' if features else 'pixels'}), {_pct(r['count_accuracy'])} count-based (no matching); chance "
            f"{_pct(r['chance'])} / {_pct(r['count_chance'])}"
            + (f"; seed 004 Table 1 (CelebA, FedSGD): {r['seed_table_1']:.1f}%" if r["seed_table_1"] is not None else "")
        )
    if r["seconds_per_update"] is not None:
        parts.append(f"{r['seconds_per_update']:.1f} s per attacked update")
    return "; ".join(parts) + "."


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"
