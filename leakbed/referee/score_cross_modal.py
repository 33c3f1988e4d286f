"""Referee side of cross-modal matching (seed 001 §6.1.1), kind ``cross-modal``: AP on balanced (update, user text)
pairs (chance 0.5; the seed reports 76.3 AP on PIPA), over all users and over text-only users apart, and the
closed-world ranking of every user's text for each update (mean per-user AP against chance).

Coverage: one embedding row per given update; pairs and rankings are drawn over every given update. A pair with a
missing or non-finite update row, or a non-finite score (a non-finite head or user embedding makes every row count
as missing), gets the referee's draw (a random rank among the attack's own pair scores); in the ranking, such a
row's scores over the users are drawn the same way, column by column, and its top-1 counts at chance.

Users: the referee's, every known user (``ScoreContext.known_users``), never the attack's ``users``: pairs are drawn
over the updates of all of them, and a pair with a user the attack gave no text embedding gets the referee's draw
(its ranking column counts at chance, as kind ``reid``); a user it names that the referee does not hold is ignored.
Which users are text-only is the referee's too: ``core.attack_sets.paired_users`` over the known users with the
attacker's seed and ``paired_fraction`` (the declared ``paired`` is not read; the declared list without a knowledge
file, as ``split`` says).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from leakbed.core.attack_sets import PAIRED_FRACTION, paired_users
from leakbed.core.pairs import pair_scores
from leakbed.core.reid_metrics import reid_metrics
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import ClassCoverage, Coverage
from leakbed.referee.score_matching import scored_pairs

NAN = float("nan")


def pair_metrics(
    r: dict[str, np.ndarray], owners: np.ndarray, sel: np.ndarray, n_pairs: int, seed: int, cov: Coverage | None = None
) -> dict:
    """Balanced pairs: each drawn update with its own user's text, or with another user's (``r["emb"]`` in the
    order of ``owners``; with ``cov``, a pair whose update row is not ``cov.ok``, or whose user has no text embedding
    (``r["user_ok"]``), is scored by the referee's draw)."""
    users = [str(u) for u in r["users"]]
    col = {u: k for k, u in enumerate(users)}
    rows = np.flatnonzero(sel & np.isin(owners, users))
    if len(rows) == 0 or len(users) < 2:
        return {"ap": NAN, "auc": NAN, "chance": NAN, "pairs": 0}
    rng = np.random.default_rng([seed, 0xC3055])
    half = n_pairs // 2
    i = rows[rng.integers(0, len(rows), 2 * half)]
    own = np.asarray([col[str(owners[k])] for k in i])
    other = rng.integers(0, len(users) - 1, half)
    j = own.copy()
    j[half:] = other + (other >= own[half:])
    same = np.r_[np.ones(half), np.zeros(half)]
    usable = None if cov is None else cov.ok[i]
    if "user_ok" in r:
        usable = np.asarray(r["user_ok"], bool)[j] if usable is None else usable & np.asarray(r["user_ok"], bool)[j]
    p = scored_pairs(r["emb"], r["user_emb"], r["head_w"], r["head_b"], i, j, usable, None if cov is None else cov.rng)
    return {
        "ap": float(average_precision_score(same, p)),
        "auc": float(roc_auc_score(same, p)),
        "chance": 0.5,
        "pairs": int(2 * half),
    }


def referee_paired(ctx: ScoreContext, declared: np.ndarray) -> tuple[np.ndarray, str]:
    """The users whose images the attacker holds: recomputed from its knowledge, seed and params, else as declared."""
    seed = ctx.attacker_seed
    if seed is None:
        return np.asarray(declared, str), "declared"
    fraction = float(ctx.params.get("paired_fraction", PAIRED_FRACTION))
    return np.asarray(paired_users(list(ctx.known_users), seed, fraction), str), "referee"


def score(ctx: ScoreContext) -> dict:
    out = ctx.outputs
    held = ClassCoverage(ctx.known_users, out["users"])
    rows = held.column[: held.n_kept]
    given_emb = np.asarray(out["user_emb"])
    user_emb = np.zeros((len(held.classes), *given_emb.shape[1:]), given_emb.dtype)  # the attack's dtype: its scores
    user_emb[: held.n_kept] = given_emb[rows]
    user_ok = np.arange(len(held.classes)) < held.n_kept
    cov = Coverage.of(ctx, "cross-modal", out["ids"], out["emb"], shared=(out["head_w"], out["head_b"], user_emb[user_ok]))
    paired, whose = referee_paired(ctx, out["paired"])
    r = {**out, "emb": cov.take(out["emb"], 0.0), "users": held.classes, "user_emb": user_emb, "user_ok": user_ok}
    r["paired"] = paired
    owners = ctx.truth.truth_for(cov.given)
    n, seed = ctx.params.siamese.eval_pairs, ctx.seed
    text_only = ~np.isin(owners, r["paired"])
    every = pair_metrics(r, owners, np.ones(len(owners), bool), n, seed, cov)
    unpaired = pair_metrics(r, owners, text_only, n, seed, cov)
    with np.errstate(all="ignore"):
        columns = [
            pair_scores(r["emb"], r["user_emb"], r["head_w"], r["head_b"], np.arange(len(owners)), np.full(len(owners), k))
            for k in range(held.n_kept)
        ]
    all_scores = np.stack(columns, axis=1).reshape(len(owners), held.n_kept) if columns else np.zeros((len(owners), 0))
    all_scores = held.widen(cov.randomize(all_scores))
    filled = cov.filled
    rank = reid_metrics(owners[text_only], r["users"], all_scores[text_only], filled[text_only]) if text_only.any() else {}
    m = {
        "ap": every["ap"],
        "auc": every["auc"],
        "chance": 0.5,
        "text_only_ap": unpaired["ap"],
        "text_only_auc": unpaired["auc"],
        "rank_ap": rank.get("ap", NAN),
        "rank_chance_ap": rank.get("chance_ap", NAN),
        "rank_x_chance": rank.get("x_chance", NAN),
        "rank_top1": rank.get("top1", NAN),
        "encoder": str(r["encoder"]),
        "paired_users": int(len(r["paired"])),
        "pairs": every["pairs"],
        "split": whose,
        **cov.report(),
        **held.report(),
    }
    m["notes"] = [
        f"Cross-modal matching (seed 001 §4.3, §6.1.1; text prior embedded with {m['encoder']}): AP {m['ap']:.3f} on "
        f"balanced (update, user text) pairs, {m['text_only_ap']:.3f} for users known only by text (chance 0.50; seed: "
        f"76.3 AP on PIPA). Ranking every user's text for a text-only user's update: AP {m['rank_ap']:.3f} = "
        f"{m['rank_x_chance']:.1f}× chance.",
        cov.note(),
        *held.notes(),
    ]
    return m
