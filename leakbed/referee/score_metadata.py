"""Referee side of metadata re-identification (``attacks.metadata``): the closed world's metrics
(seed 001 §6: mean AP over users, the exact chance AP of a random ranking, × chance, top-1/5) for
the metadata scores alone, the weight attackers alone on the same updates, and the two fused;
per round for the metadata alone (what it gives away each round). ``exports`` carries the fused
scores to Prometheus as attacks ``metadata+<attacker>``. Kind ``metadata``.

Coverage: one row per given update in every score matrix (``meta``, ``count_only``, ``weights_<a>``, ``fused_<a>``,
each (n, k) over ``classes``); a given update without a row, or with a non-finite score in any of them, counts as a
random ranking in all of them (the referee's draws: a random rank in each class's column, as kind ``reid``).
Rounds are the store's.

Classes: as kind ``reid``, the users the referee holds (``ScoreContext.known_users``), in every matrix; a user the
attack left out counts at chance, one it names that the referee does not hold is ignored. Which weight attackers
appear beside the metadata is the run's suite (``weights_<a>`` of an attacker outside it is not read); each is a row
of its own, never averaged.
"""

from __future__ import annotations

import numpy as np

from leakbed.core.reid_metrics import reid_metrics
from leakbed.referee.context import ScoreContext
from leakbed.referee.coverage import ClassCoverage, Coverage
from leakbed.referee.schemas import OutputsError

KEYS = ("ap", "chance_ap", "x_chance", "top1", "top5")


def _row(label: str, m: dict) -> list[str]:
    return [
        label,
        f"{100 * m['ap']:.1f}",
        f"{100 * m['chance_ap']:.1f}",
        f"{m['x_chance']:.2f}",
        f"{100 * m['top1']:.1f}",
        f"{100 * m['top5']:.1f}",
    ]


def score(ctx: ScoreContext) -> dict:
    out = ctx.outputs
    attackers = [a for a in ctx.cfg.attack.suite if f"weights_{a}" in out]
    for a in attackers:
        if f"fused_{a}" not in out:
            raise OutputsError(f"outputs: 'weights_{a}' comes with 'fused_{a}' (float (n, k)); it is missing")
    matrices = ["meta", "count_only", *(f"{k}_{a}" for a in attackers for k in ("weights", "fused"))]
    held = ClassCoverage(ctx.known_users, out["classes"])
    kept = {k: held.kept(out[k]) for k in matrices}
    cov = Coverage.of(ctx, "metadata", out["ids"], *kept.values())
    r = {k: held.widen(cov.scores(v)) for k, v in kept.items()}
    owners, classes, rounds = ctx.truth.truth_for(cov.given), held.classes, cov.rounds(out.get("rounds"))
    filled = cov.filled
    meta = reid_metrics(owners, classes, r["meta"], filled)
    count = reid_metrics(owners, classes, r["count_only"], filled)
    weights = {a: reid_metrics(owners, classes, r[f"weights_{a}"], filled) for a in attackers}
    fused = {a: reid_metrics(owners, classes, r[f"fused_{a}"], filled) for a in weights}
    per_round = {}
    for rnd in np.unique(rounds):
        sel = rounds == rnd
        m = reid_metrics(owners[sel], classes, r["meta"][sel], filled[sel])
        per_round[int(rnd)] = {k: m[k] for k in ("ap", "chance_ap", "x_chance", "top1")}
    rows = [_row("metadata only", meta), _row("count only", count)]
    for a in weights:
        rows += [_row(f"weights only ({a})", weights[a]), _row(f"metadata + {a}", fused[a])]
    rule = str(out["rule"])
    return {
        **{k: meta[k] for k in (*KEYS, "n_updates", "n_users")},
        **cov.report(),
        **held.report(),
        "count_only": {k: count[k] for k in KEYS},
        "weights": {a: {k: m[k] for k in KEYS} for a, m in weights.items()},
        "fused": {a: {k: m[k] for k in KEYS} for a, m in fused.items()},
        "per_round": per_round,
        "report_rule": rule,
        "size_scale": float(out["scale"]),
        "norm_slope": float(out["norm_slope"]),
        "exports": {f"metadata+{a}": {k: m[k] for k in KEYS} for a, m in fused.items()},
        "tables": {
            "Metadata re-identification (closed world, seed 001 §6 metrics)": {
                "header": ["scores", "AP %", "chance AP %", "× chance", "top-1 %", "top-5 %"],
                "rows": rows,
            }
        },
        "notes": [
            f"Counts reported {rule}; device size ≈ {float(out['scale']):.2f} × prior size (estimated from the stream); "
            f"per-round slope of log‖Δw‖ on log n_k {float(out['norm_slope']):.2f}. Seed 001 §3 assumes a shuffler "
            "leaves only Δw: these are what it leaves besides.",
            cov.note(),
            *held.notes(),
        ],
    }
