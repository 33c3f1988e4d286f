"""Referee side of linkage across rounds (``attacks.linkage``): pairwise same-user AP of each view
(metadata, Δw, both) against the exact chance AP of a random ranking of the same pairs, the adjusted
Rand index of each grouping, re-identification from one prior example per user with and without
linking (closed-world metrics), and the intersection attack scored against each update's sealed node
pseudonym: alone, with the attack's linked groups, and with perfect linking (an upper bound the
referee computes from the truth, to show what the shuffler setting leaves to any linker). Kind ``linkage``.

Coverage: one row per given update (its group labels, and its one-example and intersection scores), the pairs over
those rows (``pairs_<view>``: the upper triangle of the rows, row-major). Every metric is over the given updates
and all their pairs: a pair touching a given update without a row (or whose score is not finite) gets the
referee's draw, a uniform random rank among the attack's own pair scores of that view; such an update's group is a
label drawn uniformly from the attack's groups, and its score rows random ranks (as kind ``reid``); a row with a
non-finite score counts as missing. The attack links at most ``attacks.linkage.MAX_UPDATES`` updates (a seeded
sample beyond): past that its coverage is below 1 and the unlinked pairs score at chance. Pairs are O(n²).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import adjusted_rand_score, average_precision_score

from leakbed.core.linkage_views import VARIANTS
from leakbed.core.rankings import group_mean, tie_break
from leakbed.core.reid_metrics import random_ranking_ap, reid_metrics
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import Coverage, random_ranks
from leakbed.referee.schemas import OutputsError

NAN = float("nan")
VIEW = {"meta": "metadata", "w": "Δw", "both": "metadata + Δw"}
KEYS = ("ap", "chance_ap", "x_chance", "top1", "top5")
SINGLE = ("single_attacker", "single_classes", "single_raw", "single_linked")
INTERSECTION = ("pseudonyms", "inter_candidates", "inter_single", "inter_linked")


def pair_metrics(owners: np.ndarray, scores: np.ndarray) -> dict:
    """AP of ranking every pair of updates by the same-user score; chance = a random ranking's expected AP."""
    iu = np.triu_indices(len(owners), 1)
    same = owners[iu[0]] == owners[iu[1]]
    if not same.any() or same.all():
        return {"ap": NAN, "chance_ap": NAN, "x_chance": NAN, "pairs": int(same.size), "same_pairs": int(same.sum())}
    ap = float(average_precision_score(same, scores))
    chance = random_ranking_ap(int(same.sum()), int(same.size))
    return {"ap": ap, "chance_ap": chance, "x_chance": ap / chance, "pairs": int(same.size), "same_pairs": int(same.sum())}


def given_pairs(cov: Coverage, n: int, scores: np.ndarray) -> np.ndarray:
    """The attack's pair scores (upper triangle of its ``n`` rows) for every pair of given updates, in the upper
    triangle of the given order; a pair without two usable rows, or not finite, gets the referee's draw."""
    gi, gj = np.triu_indices(len(cov), 1)
    a, b = cov.row[gi], cov.row[gj]
    usable = cov.ok[gi] & cov.ok[gj]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    at = np.where(usable, lo * n - lo * (lo + 1) // 2 + (hi - lo - 1), 0)
    out = np.asarray(scores, np.float64)[at] if len(scores) else np.zeros(len(at))
    return random_ranks(out, ~usable | ~np.isfinite(out), cov.rng)


def score(ctx: ScoreContext) -> dict:
    out, referee = ctx.outputs, ctx.truth
    n = len(out["ids"])
    if len(out["pairs_both"]) != n * (n - 1) // 2:
        raise OutputsError(
            f"outputs: 'pairs_*' must be float (p,) with p = n(n-1)/2 = {n * (n - 1) // 2}; got {len(out['pairs_both'])}"
        )
    for keys in (SINGLE, INTERSECTION):
        if any(k in out for k in keys) and not all(k in out for k in keys):
            raise OutputsError(f"outputs: {', '.join(repr(k) for k in keys)} come together; some are missing")
    per_row = [out[k] for k in ("single_raw", "single_linked", "inter_single", "inter_linked") if k in out]
    cov = Coverage.of(ctx, "linkage", out["ids"], *per_row)
    owners = referee.truth_for(cov.given)
    r = {k: out[k] for k in ("cannot_link", "groups", "single_attacker", "single_classes", "pseudonyms") if k in out}
    for v in VARIANTS:
        r[f"pairs_{v}"] = given_pairs(cov, n, out[f"pairs_{v}"])
        used = out[f"labels_{v}"][cov.row[cov.ok]]
        r[f"labels_{v}"] = cov.labels(out[f"labels_{v}"], np.unique(used) if len(used) else np.arange(max(int(out["groups"]), 1)))
    for k in ("single_raw", "single_linked", "inter_candidates", "inter_single", "inter_linked"):
        if k in out:
            r[k] = cov.scores(out[k])
    views = {}
    for v in VARIANTS:
        m = pair_metrics(owners, r[f"pairs_{v}"])
        views[v] = {**m, "ari": float(adjusted_rand_score(owners, r[f"labels_{v}"]))}
    result: dict = {
        "ap": views["both"]["ap"],
        "chance_ap": views["both"]["chance_ap"],
        "x_chance": views["both"]["x_chance"],
        "ari": views["both"]["ari"],
        "views": views,
        "groups": int(r["groups"]),
        "users": int(len(np.unique(owners))),
        "cannot_link": bool(r["cannot_link"]),
        **cov.report(),
    }
    rows = [
        [VIEW[v], f"{100 * m['ap']:.1f}", f"{100 * m['chance_ap']:.2f}", f"{m['x_chance']:.1f}", f"{m['ari']:.3f}"]
        for v, m in views.items()
    ]
    tables = {
        "Linkage without prior: pairwise same-user AP and grouping": {
            "header": ["view", "pair AP %", "chance AP %", "× chance", "ARI"],
            "rows": rows,
        }
    }
    reid_rows = []
    if "single_raw" in r:
        alone = reid_metrics(owners, r["single_classes"], r["single_raw"])
        linked = reid_metrics(owners, r["single_classes"], r["single_linked"])
        result["one_example"] = {
            "attacker": str(r["single_attacker"]),
            "alone": {k: alone[k] for k in KEYS},
            "linked": {k: linked[k] for k in KEYS},
        }
        reid_rows += [
            [f"one prior example ({r['single_attacker']}), alone", *_cells(alone)],
            [f"one prior example ({r['single_attacker']}), linked first", *_cells(linked)],
        ]
    if "pseudonyms" in r:
        nodes = np.asarray([str(x) for x in referee.field_for(cov.given, "node")])
        cand = r["inter_candidates"]
        oracle = tie_break(group_mean(cand, owners) + 1e-3 * cand, ctx.seed)
        inter = {
            "alone": reid_metrics(nodes, r["pseudonyms"], r["inter_single"]),
            "linked": reid_metrics(nodes, r["pseudonyms"], r["inter_linked"]),
            "perfect_linking": reid_metrics(nodes, r["pseudonyms"], oracle),
        }
        result["intersection"] = {k: {q: m[q] for q in KEYS} for k, m in inter.items()}
        result["intersection"]["candidates_per_update"] = float(cand.sum(axis=1).mean())
        result["intersection"]["batch_min"] = ctx.cfg.shuffler.batch_min
        reid_rows += [[f"intersection with sampled pseudonyms, {k.replace('_', ' ')}", *_cells(m)] for k, m in inter.items()]
    if reid_rows:
        tables["Re-identification after linking (closed-world metrics)"] = {
            "header": ["attack", "AP %", "chance AP %", "× chance", "top-1 %"],
            "rows": reid_rows,
        }
    result["tables"] = tables
    result["notes"] = [
        f"{len(owners)} updates of {result['users']} users grouped into {result['groups']} groups; same-round pairs "
        f"{'kept apart' if result['cannot_link'] else 'not kept apart (batched stream or no participation)'}.",
        cov.note(),
    ]
    return result


def _cells(m: dict) -> list[str]:
    return [f"{100 * m['ap']:.1f}", f"{100 * m['chance_ap']:.1f}", f"{m['x_chance']:.2f}", f"{100 * m['top1']:.1f}"]
