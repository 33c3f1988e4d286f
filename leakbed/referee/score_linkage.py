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

Classes: the one-example re-identification ranks the users the referee holds (``ScoreContext.known_users``), the
intersection attack the node pseudonyms the server sampled (the ``sampled`` lists of the round configs trusted code
filed in the store; the sealed nodes of the updates without them), never the attack's ``single_classes`` or
``pseudonyms``: a class left out counts at chance, one the referee does not hold is ignored (as kind ``reid``).
"""

from __future__ import annotations

import json

import numpy as np
from sklearn.metrics import adjusted_rand_score, average_precision_score

from leakbed.core.linkage_views import VARIANTS
from leakbed.core.rankings import group_mean, tie_break
from leakbed.core.reid_metrics import random_ranking_ap, reid_metrics
from leakbed.core.store import UpdateStore
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import ClassCoverage, Coverage, random_ranks
from leakbed.referee.schemas import OutputsError
from leakbed.referee.truth import Referee

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


def sampled_pseudonyms(store: UpdateStore, referee: Referee) -> list[str]:
    """Every node pseudonym the server shared as sampled (the store's round configs, which trusted code filed), sorted;
    without any, the nodes sealed with the updates."""
    names: set[str] = set()
    for f in sorted((store.root / "config").glob("r*.json")):
        names |= {p for p in str(json.loads(f.read_text(encoding="utf-8")).get("sampled", "")).split(",") if p}
    if not names:
        names = {str(r["node"]) for r in referee.records() if "node" in r}
    return sorted(names)


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
    users = ClassCoverage(ctx.known_users, out["single_classes"]) if "single_classes" in out else None
    nodes_held = ClassCoverage(sampled_pseudonyms(ctx.store, referee), out["pseudonyms"]) if "pseudonyms" in out else None
    kept = {k: users.kept(out[k]) for k in ("single_raw", "single_linked") if users is not None}
    kept |= {k: nodes_held.kept(out[k]) for k in INTERSECTION[1:] if nodes_held is not None}
    per_row = [kept[k] for k in ("single_raw", "single_linked", "inter_single", "inter_linked") if k in kept]
    cov = Coverage.of(ctx, "linkage", out["ids"], *per_row)
    owners = referee.truth_for(cov.given)
    r = {k: out[k] for k in ("cannot_link", "groups", "single_attacker") if k in out}
    if users is not None:
        r["single_classes"] = users.classes
    if nodes_held is not None:
        r["pseudonyms"] = nodes_held.classes
    for v in VARIANTS:
        r[f"pairs_{v}"] = given_pairs(cov, n, out[f"pairs_{v}"])
        used = out[f"labels_{v}"][cov.row[cov.ok]]
        r[f"labels_{v}"] = cov.labels(out[f"labels_{v}"], np.unique(used) if len(used) else np.arange(max(int(out["groups"]), 1)))
    for k, values in kept.items():
        r[k] = (users if k.startswith("single") else nodes_held).widen(cov.scores(values))  # type: ignore[union-attr]
    filled = cov.filled
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
        alone = reid_metrics(owners, r["single_classes"], r["single_raw"], filled)
        linked = reid_metrics(owners, r["single_classes"], r["single_linked"], filled)
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
            "alone": reid_metrics(nodes, r["pseudonyms"], r["inter_single"], filled),
            "linked": reid_metrics(nodes, r["pseudonyms"], r["inter_linked"], filled),
            "perfect_linking": reid_metrics(nodes, r["pseudonyms"], oracle, filled),
        }
        result["intersection"] = {k: {q: m[q] for q in KEYS} for k, m in inter.items()}
        result["intersection"]["candidates_per_update"] = float(np.nansum(cand, axis=1).mean())
        result["intersection"]["batch_min"] = ctx.cfg.shuffler.batch_min
        reid_rows += [[f"intersection with sampled pseudonyms, {k.replace('_', ' ')}", *_cells(m)] for k, m in inter.items()]
    if reid_rows:
        tables["Re-identification after linking (closed-world metrics)"] = {
            "header": ["attack", "AP %", "chance AP %", "× chance", "top-1 %"],
            "rows": reid_rows,
        }
    result["tables"] = tables
    for held, what in ((users, "users"), (nodes_held, "node pseudonyms")):
        if held is not None:
            result |= {f"{what.split()[-1]}_{k}": v for k, v in held.report().items()}
    result["notes"] = [
        f"{len(owners)} updates of {result['users']} users grouped into {result['groups']} groups; same-round pairs "
        f"{'kept apart' if result['cannot_link'] else 'not kept apart (batched stream or no participation)'}.",
        cov.note(),
        *(line for held, what in ((users, "users"), (nodes_held, "node pseudonyms")) if held for line in held.notes(what)),
    ]
    return result


def _cells(m: dict) -> list[str]:
    return [f"{100 * m['ap']:.1f}", f"{100 * m['chance_ap']:.1f}", f"{m['x_chance']:.2f}", f"{100 * m['top1']:.1f}"]
