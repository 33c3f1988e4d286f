"""Referee side of linkage across rounds (``attacks.linkage``): pairwise same-user AP of each view
(metadata, Δw, both) against the exact chance AP of a random ranking of the same pairs, the adjusted
Rand index of each grouping, re-identification from one prior example per user with and without
linking (closed-world metrics), and the intersection attack scored against each update's sealed node
pseudonym: alone, with the attack's linked groups, and with perfect linking (an upper bound the
referee computes from the truth, to show what the shuffler setting leaves to any linker).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import adjusted_rand_score, average_precision_score

from attacks.linkage import VARIANTS, group_mean
from attacks.metadata import tie_break
from referee.context import ScoreContext
from referee.reid_metrics import random_ranking_ap, reid_metrics

NAN = float("nan")
VIEW = {"meta": "metadata", "w": "Δw", "both": "metadata + Δw"}
KEYS = ("ap", "chance_ap", "x_chance", "top1", "top5")


def pair_metrics(owners: np.ndarray, scores: np.ndarray) -> dict:
    """AP of ranking every pair of updates by the same-user score; chance = a random ranking's expected AP."""
    iu = np.triu_indices(len(owners), 1)
    same = owners[iu[0]] == owners[iu[1]]
    if not same.any() or same.all():
        return {"ap": NAN, "chance_ap": NAN, "x_chance": NAN, "pairs": int(same.size), "same_pairs": int(same.sum())}
    ap = float(average_precision_score(same, scores))
    chance = random_ranking_ap(int(same.sum()), int(same.size))
    return {"ap": ap, "chance_ap": chance, "x_chance": ap / chance, "pairs": int(same.size), "same_pairs": int(same.sum())}


def score(ctx: ScoreContext) -> dict:
    r, referee = ctx.outputs, ctx.truth
    owners = referee.truth_for(r["ids"])
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
        nodes = np.asarray([str(x) for x in referee.field_for(r["ids"], "node")])
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
        f"{'kept apart' if result['cannot_link'] else 'not kept apart (batched stream or no participation)'}."
    ]
    return result


def _cells(m: dict) -> list[str]:
    return [f"{100 * m['ap']:.1f}", f"{100 * m['chance_ap']:.1f}", f"{m['x_chance']:.2f}", f"{100 * m['top1']:.1f}"]
