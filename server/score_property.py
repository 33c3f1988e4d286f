"""Referee scoring of passive property inference (seed 002 §7.2.3-7.2.4) and its aggregate-level
form (§7.2.6-7.2.7): ROC AUC of the attack's scores against the property facts devices sealed.

- single batch: AUC of per-update scores vs "the update's batches held the property" (Table 7.3),
  and AUC by the share of property examples (Figure 7.4: each share bin against property-free updates);
- whole dataset: AUC of each user's mean score vs "the user holds the property" (§7.1.4);
- timeline: per-round scores of the property-plan holders vs everyone else (Figure 7.5), plotted;
- aggregate: AUC of per-round aggregate scores vs "some participant of the round held it" (Figure 7.8).
Chance is 0.5; a metric is None when its truth has a single class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from leakbed.config import ExperimentConfig
from leakbed.store import UpdateStore
from server.referee import Referee

FRACTION_BINS = (0.0, 0.125, 0.25, 0.5, 1.0)


def auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    labels = np.asarray(labels).astype(int)
    return float(roc_auc_score(labels, scores)) if len(np.unique(labels)) == 2 else None


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def score_property(referee: Referee, store: UpdateStore, cfg: ExperimentConfig, out: Path) -> dict:
    res = store.read_result("property")
    ids, rounds, scores = res["ids"], res["rounds"], res["scores"]
    has = np.asarray(referee.field_for(ids, "has-property"), int)
    frac = np.asarray(referee.field_for(ids, "property-fraction"), float)
    users = referee.truth_for(ids)
    rows = []
    for lo, hi in zip(FRACTION_BINS[:-1], FRACTION_BINS[1:], strict=True):
        sel = (frac > lo) & (frac <= hi)
        neg = frac == 0
        rows.append(
            [
                f"({lo:g}, {hi:g}]",
                int(sel.sum()),
                _fmt(auc(np.r_[np.ones(sel.sum()), np.zeros(neg.sum())], np.r_[scores[sel], scores[neg]]))
                if sel.any() and neg.any()
                else "—",
            ]
        )
    names = sorted(set(users))
    mean_score = np.asarray([scores[users == u].mean() for u in names])
    mean_frac = np.asarray([frac[users == u].mean() for u in names])
    holder = mean_frac > cfg.attack.property.holder_rate
    figure = _timeline(out, cfg, users, rounds, scores)
    return {
        "auc": auc(has, scores),
        "chance": 0.5,
        "updates": int(len(ids)),
        "positive_share": float(has.mean()) if len(has) else None,
        "auc_majority": auc(frac >= 0.5, scores),
        "dataset_auc": auc(holder, mean_score),
        "dataset_users": int(len(names)),
        "dataset_holders": int(holder.sum()),
        "setting": "FedSGD (one batch a round)"
        if cfg.fl.local_steps == 1
        else f"FedAvg (local_steps={cfg.fl.local_steps}, E={cfg.fl.local_epochs})",
        "tables": {
            "Single-batch property inference by property share of the update (Figure 7.4)": {
                "header": ["share with the property", "updates", "AUC vs property-free updates"],
                "rows": rows,
            }
        },
        "figures": [figure] if figure else [],
        "notes": [
            f"Seed 002 Table 7.3 reports single-batch AUC 0.91-1.0 on LFW; here {_fmt(auc(has, scores))} "
            f"over {len(ids)} updates ({int(has.sum())} with the property in their batches)."
        ],
    }


def _timeline(out: Path, cfg: ExperimentConfig, users: np.ndarray, rounds: np.ndarray, scores: np.ndarray) -> str | None:
    """Figure 7.5: per-round scores of the planned holders (or all users) with the onset marked."""
    if not len(scores):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leakbed.property_plan import is_default

    targets = set(cfg.data.property_plan.holders) if not is_default(cfg) and cfg.data.property_plan.holders else set()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    is_target = np.isin(users, list(targets)) if targets else np.zeros(len(users), bool)
    if (~is_target).any():
        ax.scatter(rounds[~is_target], scores[~is_target], s=8, c="0.6", label="other updates")
    if is_target.any():
        ax.plot(rounds[is_target], scores[is_target], "o-", c="C3", ms=4, label="target (planned holder)")
    if cfg.data.property_plan.onset_round:
        ax.axvline(cfg.data.property_plan.onset_round - 0.5, ls="--", c="k", lw=1, label="property appears")
    ax.set(xlabel="FL round", ylabel="P(batch has property)", ylim=(-0.02, 1.02), title="When does the property appear")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    name = "property_timeline.png"
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    return name


def score_aggregate_property(referee: Referee, store: UpdateStore, cfg: ExperimentConfig, out: Path) -> dict:
    res = store.read_result("aggregate-property")
    labels, sizes = [], []
    for members in res["members"]:
        ids = np.asarray(str(members).split())
        labels.append(int(any(int(h) for h in referee.field_for(ids, "has-property"))))
        sizes.append(
            sum(int(p) for p in referee.field_for(ids, "participants")) if _sealed(referee, ids, "participants") else len(ids)
        )
    labels_a = np.asarray(labels)
    scores = res["scores"]
    pos, neg = scores[labels_a == 1], scores[labels_a == 0]
    return {
        "auc": auc(labels_a, scores),
        "chance": 0.5,
        "aggregates": int(len(labels_a)),
        "with_property": int(labels_a.sum()),
        "participants_mean": float(np.mean(sizes)) if sizes else None,
        "secure_aggregation": cfg.fl.secure_aggregation,
        "mean_score_with": float(pos.mean()) if len(pos) else None,
        "mean_score_without": float(neg.mean()) if len(neg) else None,
        "notes": [
            "Seed 002 Figure 7.8 (K = 3 and 5 participants): aggregates with a property holder score much higher than "
            "without; Figure 7.7 reports AUC about 0.8 with 12 participants (synchronized SGD)."
        ],
    }


def _sealed(referee: Referee, ids: np.ndarray, name: str) -> bool:
    try:
        referee.field_for(ids, name)
    except KeyError:
        return False
    return True
