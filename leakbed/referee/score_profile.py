"""Referee side of the profile-prior attack (seed 001 §6.1.1, Figure 5): which users own the
highest-ranked updates, and how many of them fit the profile.

A user fits when the share of the profile's class in their own data (reported by the device) is at
least ``fit_ratio`` times the mean share over users. Reported: the top-k users in the order their
first update appears in the ranking, precision@k against the share of fitting users (chance), and
the AP of the update ranking against its random-ranking expectation. Kind ``profile``.

Coverage: one score per given update (P[profile]); a given update without a row, or with a non-finite score, gets
the referee's draw (a uniform random rank among the attack's own scores), so the ranking covers every given update.
Sets: the users are the owners of the given updates and whether each fits comes from their sealed label shares; k is
the params' ``top_k``; nothing is read from the outputs but the scores and the profile's class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score

from leakbed.core.reid_metrics import random_ranking_ap
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage


def profile_metrics(owners: np.ndarray, share: np.ndarray, scores: np.ndarray, fit_ratio: float, k: int) -> dict:
    users = np.unique(owners)
    user_share = {u: float(share[owners == u].mean()) for u in users}
    threshold = fit_ratio * float(np.mean(list(user_share.values())))
    fits = {u: s >= threshold for u, s in user_share.items()}
    positive = np.asarray([fits[u] for u in owners])
    order = np.argsort(-scores, kind="stable")
    top_users: list[str] = []
    for idx in order:
        if owners[idx] not in top_users:
            top_users.append(str(owners[idx]))
    k = min(k, len(top_users))
    hits = [fits[u] for u in top_users[:k]]
    has_both = 0 < positive.sum() < len(positive)
    ap = float(average_precision_score(positive, scores)) if has_both else float("nan")
    chance_ap = random_ranking_ap(int(positive.sum()), len(positive)) if has_both else float("nan")
    chance = float(np.mean(list(fits.values())))
    prec = float(np.mean(hits)) if hits else float("nan")
    best = {u: float(scores[owners == u].max()) for u in top_users[:k]}
    return {
        "precision_at_k": prec,
        "k": k,
        "chance": chance,
        "x_chance": prec / chance if chance else float("nan"),
        "ap": ap,
        "chance_ap": chance_ap,
        "fit_threshold": threshold,
        "fitting_users": int(sum(fits.values())),
        "users": int(len(users)),
        "top": [(u, best[u], user_share[u], bool(fits[u])) for u in top_users[:k]],
        "mean_share": float(np.mean(list(user_share.values()))),
    }


def _figure(m: dict, target: int, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t[0] for t in m["top"]]
    shares = [t[2] for t in m["top"]]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(names) + 1.5), 3.2))
    ax.bar(range(len(names)), shares, color=["tab:red" if t[3] else "tab:gray" for t in m["top"]])
    ax.axhline(m["mean_share"], color="k", lw=1, ls=":", label="mean over users")
    ax.axhline(m["fit_threshold"], color="tab:red", lw=1, ls="--", label="fits the profile")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"share of class {target}\nin the user's data")
    ax.set_title(
        f"Profile prior: top-{len(names)} users (precision@k {m['precision_at_k']:.2f}, chance {m['chance']:.2f})", fontsize=9
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "profile_top_users.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def score(ctx: ScoreContext) -> dict:
    r, referee, out = ctx.outputs, ctx.truth, ctx.out
    target = int(r["target_class"])
    cov = Coverage.of(ctx, "profile", r["ids"], r["scores"])
    owners = referee.truth_for(cov.given)
    share = np.asarray([s[target] for s in referee.field_for(cov.given, "label-share")], float)
    m = profile_metrics(owners, share, cov.scores(r["scores"]), ctx.params.fit_ratio, ctx.params.top_k)
    m |= cov.report()
    top = m.pop("top")
    m["tables"] = {
        f"Profile prior (class {target}): top-{m['k']} users": {
            "header": ["rank", "user", "best P[profile]", f"share of class {target}", "fits"],
            "rows": [[n + 1, u, round(s, 4), round(sh, 3), "yes" if f else "no"] for n, (u, s, sh, f) in enumerate(top)],
        }
    }
    m["figures"] = [_figure({**m, "top": top}, target, out)]
    m["notes"] = [
        f"Profile prior (seed 001 §5.2.2, Fig. 5): precision@{m['k']} {m['precision_at_k']:.2f} vs chance {m['chance']:.2f} "
        f"({m['fitting_users']}/{m['users']} users hold ≥ {m['fit_threshold']:.3f} of class {target}); update ranking "
        f"AP {m['ap']:.3f} vs chance {m['chance_ap']:.3f}.",
        cov.note(),
    ]
    return m
