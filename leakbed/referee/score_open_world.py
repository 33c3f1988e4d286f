"""Referee side of open-world re-identification and matching (seed 001 §6.1.2, Figure 6), kind ``open-world``.

Test updates are those of seen and unseen users (holdout users only train the attacker). The MLP
is scored like the closed world over |seen| + 1 classes, an unseen user's update counting as class
"unseen"; the Siamese network on balanced pairs of these updates (chance AP 0.5).

Coverage: one row per given update (``scores`` when there are seen users, and ``emb``); a given update without a
row, or with a non-finite number in either, counts as a random ranking in both: its class scores are the referee's
draws (a random rank in each class's column, as kind ``reid``; its top-1 counts at chance), and so is the score of
any pair it is in.

Sets: the users split is the referee's, recomputed from the attacker's knowledge, its seed and the params
(``core.attack_sets.split_users`` with ``seen_fraction`` / ``holdout_fraction``, the built-in defaults when a plugin's
params lack them); the ``seen`` and ``holdout`` the attack declares are not read (a declared holdout would take the
updates it ranks worst out of the test set), and ``split_mismatch`` counts the users it put elsewhere. Classes are the
referee's seen users and "unseen", as kind ``reid``: a class left out counts at chance, an extra one is ignored.
Without a knowledge file (a store filed by hand) the declared split is used, and the result says so (``split``).
"""

from __future__ import annotations

import numpy as np

from leakbed.core.attack_sets import HOLDOUT_FRACTION, SEEN_FRACTION, split_users
from leakbed.core.labels import UNSEEN
from leakbed.core.reid_metrics import reid_metrics, top_k_hits
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import ClassCoverage, Coverage
from leakbed.referee.schemas import OutputsError
from leakbed.referee.score_matching import matching_metrics

NAN = float("nan")


def open_world_metrics(
    r: dict[str, np.ndarray], owners: np.ndarray, n_pairs: int, seed: int, cov: Coverage | None = None
) -> dict:
    """``r``'s per-update arrays in the order of ``owners`` (with ``cov``: aligned to its given updates, the rows that
    are not ``cov.ok`` already drawn in ``scores`` and drawn here in the pairs)."""
    test = ~np.isin(owners, r["holdout"])
    is_seen = np.isin(owners, r["seen"])
    labels = np.where(is_seen, owners, UNSEEN)[test]
    out: dict = {
        "seen_users": int(len(r["seen"])),
        "unseen_users": int(len(np.unique(owners[test & ~is_seen]))),
        "holdout_users": int(len(r["holdout"])),
        "test_updates": int(test.sum()),
    }
    if "classes" in r:
        filled = (~cov.ok if cov is not None else np.zeros(len(owners), bool))[test]
        m = reid_metrics(labels, r["classes"], r["scores"][test], filled)
        hit = top_k_hits(labels, np.asarray(r["classes"]), np.asarray(r["scores"], np.float64)[test], 1, filled)
        unseen = labels == UNSEEN
        out |= {
            "ap": m["ap"],
            "chance_ap": m["chance_ap"],
            "x_chance": m["x_chance"],
            "top1": m["top1"],
            "seen_top1": float(np.mean(hit[~unseen])) if (~unseen).any() else NAN,
            "unseen_recall": float(np.mean(hit[unseen])) if unseen.any() else NAN,
        }
    else:
        out |= {"ap": NAN, "chance_ap": NAN, "x_chance": NAN, "top1": NAN, "seen_top1": NAN, "unseen_recall": NAN}
    sub = None
    if cov is not None:  # the pairs' coverage over the test updates
        sub = Coverage(cov.given[test], cov.given[test & cov.ok], rng=cov.rng)
    match = matching_metrics(owners[test], r["emb"][test], r["head_w"], r["head_b"], n_pairs, seed, sub)
    out |= {
        "match_ap": match["ap"],
        "match_auc": match["auc"],
        "match_chance": match["chance"],
        "match_x_chance": match["x_chance"],
    }
    return out


def referee_split(ctx: ScoreContext, out: dict[str, np.ndarray]) -> tuple[dict[str, list[str]], str, int]:
    """(holdout / seen lists, whose split, how many users the attack declared in another group than the referee's)."""
    declared = {k: [str(u) for u in np.asarray(out[k]).ravel()] for k in ("seen", "holdout")}
    seed = ctx.attacker_seed
    if seed is None:
        return declared, "declared", 0
    seen_f, hold_f = ctx.params.get("seen_fraction", SEEN_FRACTION), ctx.params.get("holdout_fraction", HOLDOUT_FRACTION)
    split = split_users(list(ctx.known_users), seed, float(seen_f), float(hold_f))
    group = {u: g for g in ("seen", "holdout", "unseen") for u in split[g]}
    theirs = {u: g for g in ("seen", "holdout") for u in declared[g]}
    mismatch = sum(theirs.get(u, "unseen") != g for u, g in group.items()) + sum(u not in group for u in theirs)
    return {"seen": split["seen"], "holdout": split["holdout"]}, "referee", int(mismatch)


def score(ctx: ScoreContext) -> dict:
    out = ctx.outputs
    if ("classes" in out) != ("scores" in out):
        raise OutputsError("outputs: 'classes' and 'scores' come together (both, or neither when no user is seen)")
    split, whose, mismatch = referee_split(ctx, out)
    held = ClassCoverage([*split["seen"], UNSEEN], out["classes"] if "classes" in out else np.asarray([], str))
    kept = held.kept(out["scores"]) if "scores" in out else None
    per_row = [out["emb"], *([kept] if kept is not None else [])]
    cov = Coverage.of(ctx, "open-world", out["ids"], *per_row, shared=(out["head_w"], out["head_b"]))
    r = {**out, "emb": cov.take(out["emb"], 0.0), "seen": np.asarray(split["seen"], str)}
    r["holdout"] = np.asarray(split["holdout"], str)
    r.pop("classes", None)
    if split["seen"]:  # something to re-identify: every referee class, those the attack left out at chance
        scores = cov.scores(kept) if kept is not None else np.zeros((len(cov), 0))
        r |= {"classes": held.classes, "scores": held.widen(scores)}
    m = open_world_metrics(r, ctx.truth.truth_for(cov.given), ctx.params.siamese.eval_pairs, ctx.seed, cov)
    m |= cov.report() | held.report() | {"split": whose, "split_mismatch": mismatch}
    m["notes"] = [
        f"Open world (seed 001 §6.1.2): {m['seen_users']} seen, {m['unseen_users']} unseen, {m['holdout_users']} holdout "
        f"users. Re-identification over |seen|+1 classes: AP {m['ap']:.3f} = {m['x_chance']:.1f}× chance "
        f"({m['chance_ap']:.3f}), unseen recall {m['unseen_recall']:.2f}; Siamese matching AP {m['match_ap']:.3f} "
        f"(chance {m['match_chance']:.2f}). Sweep the seen share with `leakbed open-world-sweep`.",
        cov.note(),
        *held.notes("classes (seen users and unseen)"),
    ]
    return m
