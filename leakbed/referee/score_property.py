"""Referee scoring of passive property inference (seed 002 §7.2.3-7.2.4) and its aggregate-level
form (§7.2.6-7.2.7): ROC AUC of the attack's scores against the property facts devices sealed.

- single batch: AUC of per-update scores vs "the update's batches held the property" (Table 7.3),
  and AUC by the share of property examples (Figure 7.4: each share bin against property-free updates);
- whole dataset: AUC of each user's mean score vs "the user holds the property" (§7.1.4);
- timeline: per-round scores of the property-plan holders vs everyone else (Figure 7.5), plotted;
- aggregate: AUC of per-round aggregate scores vs "some participant of the round held it" (Figure 7.8).
Chance is 0.5; a metric is None when its truth has a single class.

Coverage, kind ``property``: one score per given update (``scores``, and ``scores_other`` when given); a given update
without a row, or with a non-finite score, gets the referee's draw (a uniform random rank among the attack's own
scores), so each AUC covers every given update; rounds are the store's.
Kind ``aggregate-property``: its rows are aggregates, one per round, joined on ``rounds``. The referee builds the
aggregates it expects itself: the given updates grouped by their (store) round, the round's truth from those updates
(the attack's ``members`` are not read: which updates an aggregate holds is not the attack's to say). A round
without a row, or with a non-finite score, gets the referee's draw; a row for a round that holds no given update is
ignored (``rows_extra``); ``coverage`` and ``rows_missing`` count aggregates, ``n_updates`` the given updates.
Sets: the facts are the devices' sealed ones, and the per-user AUC runs over every user with a given update.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from leakbed.core.config import ExperimentConfig
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage, fill_rng, finite_rows, store_rounds
from leakbed.referee.truth import Referee

FRACTION_BINS = (0.0, 0.125, 0.25, 0.5, 1.0)


def auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    labels = np.asarray(labels).astype(int)
    return float(roc_auc_score(labels, scores)) if len(np.unique(labels)) == 2 else None


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def score_property(ctx: ScoreContext) -> dict:
    res, referee, cfg, out = ctx.outputs, ctx.truth, ctx.cfg, ctx.out
    other = res["scores_other"] if "scores_other" in res else None
    cov = Coverage.of(ctx, "property", res["ids"], res["scores"], *([other] if other is not None else []))
    ids, rounds, scores = cov.given, cov.rounds(res.get("rounds")), cov.scores(res["scores"])
    other = cov.scores(other) if other is not None else None
    has = np.asarray(referee.field_for(ids, "has-property"), int)
    frac = np.asarray(referee.field_for(ids, "property-fraction"), float)
    users = referee.truth_for(ids)
    rows = []
    for lo, hi in zip(FRACTION_BINS[:-1], FRACTION_BINS[1:], strict=True):
        sel = (frac > lo) & (frac <= hi)
        row: list = [f"({lo:g}, {hi:g}]", int(sel.sum())]
        for values in (scores, other if other is not None else scores):
            pair = np.r_[values[sel], values[frac == 0]]
            row.append(_fmt(auc(np.r_[np.ones(sel.sum()), np.zeros((frac == 0).sum())], pair)) if sel.any() else "—")
        rows.append(row)
    other_name = str(res["other"]) if "other" in res else "other"
    names = sorted(set(users))
    mean_score = np.asarray([scores[users == u].mean() for u in names])
    mean_other = np.asarray([other[users == u].mean() for u in names]) if other is not None else None
    mean_frac = np.asarray([frac[users == u].mean() for u in names])
    holder = mean_frac > ctx.params.holder_rate
    figure = _timeline(out, cfg, users, rounds, {"seed classifier": scores, other_name: other})
    return {
        "auc": auc(has, scores),
        "chance": 0.5,
        **cov.report(),
        "updates": int(len(ids)),
        "positive_share": float(has.mean()) if len(has) else None,
        "auc_majority": auc(frac >= 0.5, scores),
        "dataset_auc": auc(holder, mean_score),
        "classifier_other": other_name,
        "auc_other": auc(has, other) if other is not None else None,
        "dataset_auc_other": auc(holder, mean_other) if mean_other is not None else None,
        "dataset_users": int(len(names)),
        "dataset_holders": int(holder.sum()),
        "setting": "FedSGD (one batch a round)"
        if cfg.fl.local_steps == 1
        else f"FedAvg (local_steps={cfg.fl.local_steps}, E={cfg.fl.local_epochs})",
        "tables": {
            "Single-batch property inference by property share of the update (Figure 7.4)": {
                "header": ["share with the property", "updates", "AUC vs property-free updates", f"AUC ({other_name})"],
                "rows": rows,
            }
        },
        "figures": [figure] if figure else [],
        "notes": [
            f"Seed 002 Table 7.3 reports single-batch AUC 0.91-1.0 on LFW; here {_fmt(auc(has, scores))} with the seed's "
            f"classifier and {_fmt(auc(has, other) if other is not None else None)} with {other_name}, over {len(ids)} "
            f"updates ({int(has.sum())} with the property in their batches).",
            cov.note(),
        ],
    }


def _timeline(out: Path, cfg: ExperimentConfig, users: np.ndarray, rounds: np.ndarray, panels: dict) -> str | None:
    """Figure 7.5: per-round scores of the planned holders against everyone else, the onset marked;
    one panel per classifier."""
    panels = {k: v for k, v in panels.items() if v is not None and len(v)}
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leakbed.core.property_plan import is_default

    plan = cfg.data.property_plan
    targets = set(plan.holders) if not is_default(plan) and plan.holders else set()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 3.2), squeeze=False)
    is_target = np.isin(users, list(targets)) if targets else np.zeros(len(users), bool)
    for ax, (title, scores) in zip(axes[0], panels.items(), strict=True):
        if (~is_target).any():
            ax.scatter(rounds[~is_target], scores[~is_target], s=8, c="0.6", label="other updates")
        for i, user in enumerate(sorted(set(users[is_target]))):
            sel = users == user
            ax.plot(rounds[sel], scores[sel], "o-", c=f"C{3 + i}", ms=4, label=f"target {user} (planned holder)")
        if cfg.data.property_plan.onset_round:
            ax.axvline(cfg.data.property_plan.onset_round - 0.5, ls="--", c="k", lw=1, label="property appears")
        ax.set(
            xlabel="FL round",
            ylabel="P(batch has property)",
            ylim=(-0.02, 1.02),
            title=f"When does the property appear ({title})",
        )
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    name = "property_timeline.png"
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    return name


def score_aggregate_property(ctx: ScoreContext) -> dict:
    res, referee, cfg = ctx.outputs, ctx.truth, ctx.cfg
    given = np.asarray(list(dict.fromkeys(str(g) for g in ctx.given)), dtype=str)
    filed = store_rounds(ctx.store)
    sealed = referee.fields_for(given, ["round"])["round"]
    round_of = [filed.get(g, s if s is not None else -1) for g, s in zip(given.tolist(), sealed, strict=True)]
    members: dict[str, list[str]] = {}
    for g, rnd in zip(given.tolist(), round_of, strict=True):
        members.setdefault(str(int(rnd)), []).append(g)
    keys = np.asarray(sorted(members, key=int), dtype=str)
    per_row = [res["scores"], *([res["scores_other"]] if "scores_other" in res else [])]
    cov = Coverage(keys, np.asarray(res["rounds"]).astype(np.int64).astype(str),
                   rng=fill_rng(cfg.seed, "aggregate-property", ctx.attack),
                   finite=finite_rows(len(res["rounds"]), per_row))  # fmt: skip
    labels, sizes = [], []
    for key in keys.tolist():
        ids = np.asarray(members[key])
        labels.append(int(any(int(h) for h in referee.field_for(ids, "has-property"))))
        sizes.append(
            sum(int(p) for p in referee.field_for(ids, "participants")) if _sealed(referee, ids, "participants") else len(ids)
        )
    labels_a = np.asarray(labels)
    scores = cov.scores(res["scores"])
    other = cov.scores(res["scores_other"]) if "scores_other" in res else None
    pos, neg = scores[labels_a == 1], scores[labels_a == 0]
    return {
        "auc": auc(labels_a, scores),
        "chance": 0.5,
        "classifier_other": str(res["other"]) if "other" in res else None,
        "auc_other": auc(labels_a, other) if other is not None else None,
        "aggregates": int(len(labels_a)),
        **cov.report(),
        "n_updates": int(len(given)),
        "with_property": int(labels_a.sum()),
        "participants_mean": float(np.mean(sizes)) if sizes else None,
        "secure_aggregation": cfg.fl.secure_aggregation,
        "mean_score_with": float(pos.mean()) if len(pos) else None,
        "mean_score_without": float(neg.mean()) if len(neg) else None,
        "notes": [
            "Seed 002 Figure 7.8 (K = 3 and 5 participants): aggregates with a property holder score much higher than "
            "without; Figure 7.7 reports AUC about 0.8 with 12 participants (synchronized SGD).",
            cov.note(what="aggregates (rounds of the given updates)"),
        ],
    }


def _sealed(referee: Referee, ids: np.ndarray, name: str) -> bool:
    try:
        referee.field_for(ids, name)
    except KeyError:
        return False
    return True
